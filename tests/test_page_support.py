"""iba_core.page_support: the Compare and Evaluate pages' helpers, without Streamlit."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import iba_core.page_support as ps
from iba_core.baselines.base import AttributionMap


def fake_map(key: str, signed: bool = False, unit: str = "") -> AttributionMap:
    values = np.linspace(-1 if signed else 0, 1, 224 * 224, dtype=np.float32).reshape(224, 224)
    return AttributionMap(key, key.title(), values, signed, unit, 0.01)


def test_map_cache_computes_each_map_once(monkeypatch) -> None:
    calls = []

    def run(method, loaded, x, target):
        calls.append(method.key)
        return fake_map(method.key)

    monkeypatch.setattr(ps, "run_method", run)
    loaded = SimpleNamespace(key="net", weights_id="w")
    cache = ps.MapCache()
    seen = []
    first = cache.maps(loaded, torch.zeros(1, 3, 224, 224), "img", 3, ["saliency", "gradient"],
                       on_map=lambda k, e, cached: seen.append((k, cached)))
    assert list(first) == ["saliency", "gradient"] and calls == ["saliency", "gradient"]
    assert first["saliency"].png.startswith(b"\x89PNG")
    cache.maps(loaded, torch.zeros(1, 3, 224, 224), "img", 3, ["saliency", "gradient", "grad_cam"],
               on_map=lambda k, e, cached: seen.append((k, cached)))
    assert calls == ["saliency", "gradient", "grad_cam"] and cache.computed == 3
    assert seen[2:] == [("saliency", True), ("gradient", True), ("grad_cam", False)]
    cache.maps(loaded, torch.zeros(1, 3, 224, 224), "img", 4, ["saliency"])  # other class: new map
    assert calls[-1] == "saliency" and cache.computed == 4


def test_map_cache_reports_errors_and_skips(monkeypatch) -> None:
    def run(method, loaded, x, target):
        raise RuntimeError("boom")

    monkeypatch.setattr(ps, "run_method", run)
    errors = []
    out = ps.MapCache().maps(SimpleNamespace(key="n", weights_id="w"), torch.zeros(1, 3, 224, 224), "i", 0,
                             ["saliency"], on_error=lambda k, e: errors.append(k))
    assert out == {} and errors == ["saliency"]


def test_map_key_depends_on_settings_not_their_order() -> None:
    loaded = SimpleNamespace(key="n", weights_id="w")
    a = ps.map_key("i", loaded, 1, "m", {"steps": 8, "batch": 2})
    assert a == ps.map_key("i", loaded, 1, "m", {"batch": 2, "steps": 8})
    assert a != ps.map_key("i", loaded, 1, "m", {"steps": 9, "batch": 2})


def test_parse_box() -> None:
    assert ps.parse_box("10, 20, 100, 200") == (10, 20, 100, 200)
    assert ps.parse_box("100 200 10 20") == (10, 20, 100, 200)
    assert ps.parse_box("-5, 0, 300, 224") == (0, 0, 224, 224)
    for bad in ("1, 2, 3", "a, b, c, d", "5, 5, 5, 9"):
        with pytest.raises(ValueError):
            ps.parse_box(bad)


def test_crop_box_mask_and_ratio() -> None:
    mask = ps.crop_box_mask((10, 20, 110, 70))
    assert mask.sum() == 100 * 50 and mask[20, 10] and not mask[19, 10] and not mask[20, 110]
    inside = np.zeros((224, 224), np.float32)
    inside[mask] = 1.0
    rows = ps.bbox_rows({"a": AttributionMap("a", "A", inside, False, "", 0.0)}, mask)
    assert rows[0]["bbox ratio"] == 1.0 and rows[0]["random ≈"] == round(mask.mean(), 4)


def test_voc_boxes_map_to_the_crop() -> None:
    xml = """<annotation><size><width>448</width><height>448</height></size>
    <object><name>cat</name><bndbox><xmin>64</xmin><ymin>64</ymin><xmax>192</xmax><ymax>192</ymax></bndbox></object>
    </annotation>"""
    mask, boxes = ps.voc_boxes(xml.encode())
    # 448 → 256 (×4/7), crop offset 16: 64 → 20.57, 192 → 93.71
    assert boxes[0] == pytest.approx((64 * 4 / 7 - 16, 64 * 4 / 7 - 16, 192 * 4 / 7 - 16, 192 * 4 / 7 - 16))
    assert mask.shape == (224, 224) and mask.any()
    with pytest.raises(ValueError):
        ps.voc_boxes(b"not xml")


def test_draw_boxes_outlines_the_box() -> None:
    from PIL import Image

    out = np.asarray(ps.draw_boxes(Image.new("RGB", (224, 224)), [(10, 10, 50, 50)]))
    assert tuple(out[10, 30]) == (0, 229, 255) and tuple(out[30, 30]) == (0, 0, 0)


def test_readout_checkpoints_listing(tmp_path, monkeypatch) -> None:
    import iba_core.readout as readout

    monkeypatch.setattr(readout, "default_checkpoint", lambda key: None)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert ps.readout_checkpoints("efficientnet_lite0", [tmp_path]) == []  # unreadable files are not listed
    info = ps.describe_readout(tmp_path / "junk.pt", False)
    assert info.error
    good = tmp_path / "run" / "readout_best.pt"
    readout.save_checkpoint(good, {
        "format": readout.CHECKPOINT_FORMAT, "version": readout.CHECKPOINT_VERSION,
        "config": {"model": "efficientnet_lite0", "weights_id": "w", "layer": "block3_2", "reads": ["fc"],
                   "feature_shape": [40, 28, 28], "read_channels": [1000]},
        "state_dict": {}, "training": {"data": "12 images below /photos", "epoch": 3, "complete": True},
    })
    found = ps.readout_checkpoints("efficientnet_lite0", [tmp_path])
    assert [f.path for f in found] == [good]
    assert "12 images below /photos" in found[0].label and found[0].complete
    shipped = ps.describe_readout(good, True)
    assert shipped.label.startswith("Readout (trained on 12 images below /photos") and "rough, offline photos" in shipped.label
    assert ps.readout_checkpoints("resnet50", [tmp_path]) == []


def test_limits_text() -> None:
    assert ps.limits_text(fake_map("s", signed=True)).startswith("-")
    assert ps.limits_text(fake_map("i", unit="bits/pixel")).endswith("bits/pixel")
