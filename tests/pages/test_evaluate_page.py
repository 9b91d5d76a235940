"""Evaluate page, driven through Streamlit's AppTest."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from page_helpers import assert_clean, timed_run

from iba_core.app.evaluation import BoxRun, DegradationRun, SanityRun
from iba_core.render.sanity import STRIP_DENSITY, sanity_strip_width

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, write_card  # noqa: E402

CHEAP = ["saliency", "grad_cam"]
#: The page's default: two cheap baselines and the paper's Per-Sample Bottleneck (β = 10/k).
DEFAULT = [*CHEAP, "iba_10"]
#: No table column may be narrower than its header or its longest value at this many pixels per character
#: (Streamlit's table font, Source Sans at 14 px, measured at most ~6.4 px per character in Chromium;
#: the rest is padding and the sort arrow).
PX_PER_CHAR, PAD_PX = 6.5, 24


def specs(at) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key}


def assert_no_clipped_column(table) -> None:
    """Every column of an st.dataframe has a width that holds its header and its longest value."""
    config = json.loads(table.proto.columns)
    frame = table.value
    for name in frame.columns:
        width = config[name].get("width")
        assert isinstance(width, int), f"column {name!r} has no width in pixels: {config[name]}"
        values = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in frame[name]]
        chars = max([len(config[name].get("label") or name)] + [len(v) for v in values])  # the header as shown
        assert width >= chars * PX_PER_CHAR + PAD_PX, (name, width, chars)
        assert config[name].get("help"), f"column {name!r} has no tooltip"


def test_degradation_curves_and_areas(open_page, lock_waits) -> None:
    at = open_page("evaluate")
    assert at.multiselect(key="ev_methods").value == DEFAULT
    at.multiselect(key="ev_methods").set_value(CHEAP)  # the curves' logic is the same; the baselines are quick
    at.number_input(key="ev_points").set_value(5)
    at, seconds = timed_run(at.button(key="ev_deg_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    entry = at.session_state["ev_degradation"]
    assert isinstance(entry, DegradationRun)  # results are kept as dataclasses, not dicts
    assert lock_waits and all(lock_waits)  # maps, then curves: each through the waiting helper
    assert list(entry.curves) == CHEAP and entry.tile == 14
    for c in entry.curves.values():
        assert len(c.removed) == 5 and c.n_tiles == 256
    chart = specs(at)["ev_deg_chart"]
    assert len(chart["data"]) == 2 * len(CHEAP)  # MoRF and LeRF per method
    names = " ".join(t["name"] for t in chart["data"])
    assert "MoRF" in names and "LeRF" in names
    table = at.dataframe[0].value
    assert list(table["Method"]) == ["Saliency", "Grad-CAM"]
    assert table["Area (LeRF − MoRF)"].notna().all()
    assert_no_clipped_column(at.dataframe[0])
    config = json.loads(at.dataframe[0].proto.columns)  # the area's direction, the registry's degradation metric's
    assert config["Area (LeRF − MoRF)"]["label"] == "Area (LeRF − MoRF) ↑" and config["points"]["label"] == "points"
    assert "ev_sanity" not in at.session_state and "ev_bbox" not in at.session_state  # sections run apart
    assert seconds < 60, f"degradation took {seconds:.0f} s"


def test_bbox_ratios_for_a_typed_box(open_page, lock_waits) -> None:
    at = open_page("evaluate")
    at.text_input(key="ev_box").set_value("60, 40, 170, 200")
    at.button(key="ev_box_button").click().run()  # the default methods, Per-Sample IBA β = 10/k among them
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    entry = at.session_state["ev_bbox"]
    assert isinstance(entry, BoxRun) and lock_waits and all(lock_waits)
    rows = entry.rows
    assert [r["Method"] for r in rows] == ["Saliency", "Grad-CAM", "Per-Sample IBA β=10/k"]
    assert_no_clipped_column(at.dataframe[0])
    assert all(0.0 <= r["bbox ratio"] <= 1.0 for r in rows)
    assert abs(rows[0]["random ≈"] - (110 * 160) / 224**2) < 1e-3
    assert any("box on the crop" in c for im in at.image for c in im.captions)


def test_the_box_limit_in_the_text_is_the_metrics_constant(open_page, monkeypatch) -> None:
    """The page formats metrics.bbox.LARGEST_BOX_SHARE (paper §4.5): change it and the text follows."""
    import iba_core.app.evaluation as evaluation
    import iba_core.metrics.bbox as bbox

    def scored(box: str):
        at = open_page("evaluate")
        at.multiselect(key="ev_methods").set_value(CHEAP)
        at.text_input(key="ev_box").set_value(box)
        at.button(key="ev_box_button").click().run()
        assert_clean(at)
        captions = " ".join(c.value for c in at.caption)
        return captions, [w.value for w in at.warning], at.session_state["ev_bbox"]

    small = "60, 40, 170, 150"  # 110 × 110 px: 24 % of the crop
    captions, warnings, entry = scored(small)
    assert f"larger than {bbox.LARGEST_BOX_SHARE:.0%} of the crop" in captions and "33%" in captions
    assert not entry.large and not warnings

    monkeypatch.setattr(bbox, "LARGEST_BOX_SHARE", 0.2)
    monkeypatch.setattr(evaluation, "LARGEST_BOX_SHARE", 0.2)
    captions, warnings, entry = scored(small)
    assert "larger than 20% of the crop" in captions and "33%" not in captions
    assert entry.large and any("covers 24% of the crop (more than 20%)" in w for w in warnings)


def test_bad_box_is_a_readable_error(open_page) -> None:
    at = open_page("evaluate")
    at.text_input(key="ev_box").set_value("1, 2, 3")
    at.button(key="ev_box_button").click().run()
    assert_clean(at)
    assert any("four numbers" in e.value for e in at.error)


@pytest.fixture
def shown_images(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, str, object]]:
    """(bytes, caption, width) of every st.image a page shows (still shown: the spy calls Streamlit's own)."""
    import streamlit as st

    shown: list[tuple[bytes, str, object]] = []
    original = st.image

    def spy(image, caption=None, width="content", *args, **kwargs):
        shown.append((image if isinstance(image, bytes) else b"", str(caption), width))
        return original(image, caption, width, *args, **kwargs)

    monkeypatch.setattr(st, "image", spy)
    return shown


def test_sanity_strip_with_a_cheap_method(open_page, lock_waits, shown_images) -> None:
    at = open_page("evaluate")
    assert at.selectbox(key="ev_san_method").value == "saliency"
    at.slider(key="ev_san_levels").set_value(2)
    at, seconds = timed_run(at.button(key="ev_san_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    entry = at.session_state["ev_sanity"]
    assert isinstance(entry, SanityRun) and lock_waits and all(lock_waits)
    strip = entry.strip
    assert len(strip.levels) == 2 and strip.levels[0] == "logits"
    assert all(-1.0 <= s <= 1.0 for s in strip.ssim)
    assert strip.heatmaps[0].shape == (224, 224)
    chart = specs(at)["ev_ssim_chart"]
    assert chart["data"][0]["y"][0] == 1.0 and len(chart["data"][0]["y"]) == 3
    assert chart["layout"]["font"]["size"] >= 13  # the curve's ticks and axis titles
    # The strip is shown at the width it was drawn for, its PNG at STRIP_DENSITY pixels per CSS px: its titles
    # then measure ≥ 13 px on screen (tests/render/test_render_sanity.py), never stretched or shrunk to the column.
    (png, width), = [(png, width) for png, caption, width in shown_images if "randomisation step" in caption]
    assert width == sanity_strip_width(strip) <= 820  # fits a 1280 × 800 window's column
    assert Image.open(io.BytesIO(png)).width == width * STRIP_DENSITY
    assert seconds < 60, f"sanity check took {seconds:.0f} s"


def test_sanity_check_offers_fast_methods_only(open_page) -> None:
    at = open_page("evaluate")
    options = at.selectbox(key="ev_san_method").options
    assert "Saliency" in options and "Grad-CAM" in options
    assert not any("IBA" in o or "Occlusion" in o or "Integrated" in o or "SmoothGrad" in o for o in options)


def test_reasons_a_method_is_missing_use_the_apps_words(offline_model, monkeypatch) -> None:
    """A network without a readout checkpoint: the page says so without command lines or flags."""
    import iba_core.readout as readout
    from iba_core.app.choices import READOUT_METHOD, method_choices, unavailable_text
    from iba_core.methods import display_names

    monkeypatch.setattr(readout, "default_checkpoint", lambda key: None)
    offered = method_choices(offline_model)
    assert READOUT_METHOD in offered.unavailable
    text = unavailable_text(offered, display_names())
    assert "EfficientNet-Lite0" in text and "Readout Bottleneck checkpoints" in text
    assert "python -m" not in text and "--" not in text and "efficientnet_lite0" not in text


# ---- a network with a crop of its own ---------------------------------------------------------------


@pytest.fixture
def small_crop_card(tmp_path, monkeypatch) -> str:
    """A model card (random-weights ResNet-18) whose preprocessing is resize 220, centre crop 192, in the
    models folder the app lists."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    card = write_card(folder, name="small", weights=None, extra="[preprocess]\nresize = 220\ncrop = 192\n")
    monkeypatch.setenv("IBA_MODELS_DIR", str(folder))
    return str(card.resolve())


def test_a_box_is_read_in_the_networks_own_crop(open_page, small_crop_card) -> None:
    """A card network with a 192 crop: the box is typed in its crop and scored without a shape error."""
    at = open_page("evaluate")
    at.selectbox(key="network").set_value(small_crop_card).run()
    assert_clean(at)
    assert "pixels of the 192 crop" in at.text_input(key="ev_box").label
    at.multiselect(key="ev_methods").set_value(CHEAP)
    at.text_input(key="ev_box").set_value("60, 40, 170, 300")  # beyond the 192 crop: said, not clipped
    at.button(key="ev_box_button").click().run()
    assert_clean(at)
    assert len(at.error) == 1 and "inside the 192 × 192 crop" in at.error[0].value
    assert at.session_state.get("ev_bbox") is None
    at.text_input(key="ev_box").set_value("60, 40, 170, 192")  # the bottom edge of the 192 crop
    at.button(key="ev_box_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    entry = at.session_state["ev_bbox"]
    assert entry.share == pytest.approx(110 * (192 - 40) / 192**2)
    assert entry.picture.size == (192, 192) and all(0.0 <= r["bbox ratio"] <= 1.0 for r in entry.rows)
