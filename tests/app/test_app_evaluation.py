"""iba_core.app.evaluation: the Evaluate page's per-image checks."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from app_helpers import fake_map
from iba_core.app import evaluation
from iba_core.app.inputs import box_input, crop_box_mask
from iba_core.app.state import Subject
from iba_core.methods import AttributionMap, get_method
from iba_core.metrics import bbox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, write_card  # noqa: E402


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py says why


def test_bbox_rows_and_large_boxes() -> None:
    mask = crop_box_mask((10, 20, 110, 70), 224)
    inside = np.zeros((224, 224), np.float32)
    inside[mask] = 1.0
    rows = evaluation.bbox_rows({"a": AttributionMap("a", "A", inside, False, "", 0.0)}, mask)
    assert rows == [{"Method": "A", "bbox ratio": 1.0, "random ≈": round(float(mask.mean()), 4)}]
    assert not evaluation.large_box(mask)
    assert evaluation.large_box(crop_box_mask((0, 0, 200, 200), 224))


def test_large_box_follows_the_papers_share(monkeypatch) -> None:
    """One home for the limit: `large_box` reads metrics.bbox.LARGEST_BOX_SHARE."""
    mask = crop_box_mask((0, 0, 112, 224), 224)  # half the crop
    assert bbox.LARGEST_BOX_SHARE == 0.33 and evaluation.large_box(mask)
    monkeypatch.setattr(evaluation, "LARGEST_BOX_SHARE", 0.6)
    assert not evaluation.large_box(mask)


def test_box_run_keeps_a_dataclass_with_the_box_drawn() -> None:
    mask, boxes = box_input("10, 20, 110, 70", None, SimplePreprocess(resize=256, crop=224))
    cropped = Image.new("RGB", (224, 224), (0, 0, 0))
    run = evaluation.box_run(Subject("cat.jpg", "Net", "tabby", 281), {"a": fake_map("a")}, mask, boxes, cropped)
    assert isinstance(run, evaluation.BoxRun) and run.subject.caption == "cat.jpg · Net · explaining **tabby** (#281)"
    assert run.share == pytest.approx(100 * 50 / 224**2) and not run.large and len(run.rows) == 1
    picture = np.asarray(run.picture)
    assert picture[20, 10].any() and picture[69, 109].any() and not picture[45, 60].any()  # outline only


class SimplePreprocess:
    """What the box mapping reads of a network's preprocessing."""

    def __init__(self, resize: int, crop: int):
        self.resize, self.crop_size = resize, crop


# ---- a network with a crop of its own ---------------------------------------------------------------

#: Original image 660 × 440: short side 440 → 220 (× 0.5), long 660 → 330; crop 192 at left 69, top 14.
WIDTH, HEIGHT, RESIZE, CROP = 660, 440, 220, 192
BOX = (200, 100, 400, 300)  # in the original image
ON_CROP = (200 * 0.5 - 69, 100 * 0.5 - 14, 400 * 0.5 - 69, 300 * 0.5 - 14)  # (31, 36, 131, 136), by hand
VOC = (f"<annotation><filename>photo.png</filename><size><width>{WIDTH}</width><height>{HEIGHT}</height></size>"
       "<object><name>cat</name><bndbox>" + "".join(
           f"<{t}>{v}</{t}>" for t, v in zip(("xmin", "ymin", "xmax", "ymax"), BOX)) + "</bndbox></object></annotation>")


@pytest.fixture(scope="module")
def small_crop_network(tmp_path_factory):
    """A model card for a random-weights ResNet-18 whose preprocessing is resize 220, crop 192."""
    from iba_core.networks import load_network

    folder = tmp_path_factory.mktemp("small-crop")
    (folder / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    card = write_card(folder, name="small", weights=None, extra=f"[preprocess]\nresize = {RESIZE}\ncrop = {CROP}\n")
    return load_network(str(card))


def test_boxes_follow_a_card_networks_own_crop_as_the_cli_maps_them(small_crop_network, tmp_path) -> None:
    from iba_core.image_folders import list_items
    from iba_core.metrics.results import read_records
    from iba_core.metrics.runner import EvalOptions, run_evaluation

    network = small_crop_network
    assert (network.preprocess.resize, network.preprocess.crop_size) == (RESIZE, CROP)
    mask, boxes = box_input("not used", VOC, network.preprocess)
    assert boxes == [pytest.approx(ON_CROP)] and boxes[0] == pytest.approx((31, 36, 131, 136))
    assert mask.shape == (CROP, CROP) and mask.sum() == 100 * 100  # pixel centres 31.5 … 130.5, 36.5 … 135.5
    assert mask[36, 31] and mask[135, 130] and not mask[35, 31] and not mask[36, 131]

    # The page's ratio: a map of this network (192 × 192) scored against the mask, without a shape error.
    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8))
    x = network.preprocess(photo)
    amap = get_method("saliency").attribute(network, x, 0)
    assert amap.values.shape == (CROP, CROP)
    rows = evaluation.bbox_rows({"saliency": amap}, mask)
    assert 0.0 <= rows[0]["bbox ratio"] <= 1.0 and rows[0]["random ≈"] == round(100 * 100 / CROP**2, 4)

    # The CLI's runner maps the same annotation to the same box.
    (tmp_path / "images").mkdir()
    photo.save(tmp_path / "images" / "photo.png")
    (tmp_path / "boxes").mkdir()
    (tmp_path / "boxes" / "photo.xml").write_text(VOC)
    out = tmp_path / "results.jsonl"
    run_evaluation("bbox", network, list_items(tmp_path / "images"), {"saliency": get_method("saliency")}, out,
                   EvalOptions(boxes=tmp_path / "boxes", progress=False))
    (record,) = read_records(out)
    assert record["box_pixels"] == int(mask.sum())
    from iba_core.metrics.common import stable_seed

    target = record["target"]
    values = get_method("saliency").attribute(network, x, target).values
    assert record["ratio"] == pytest.approx(bbox.bbox_ratio(values, mask, seed=stable_seed("photo.png")), rel=1e-4)


def test_degradation_for_and_rows(offline_model, chelsea_x) -> None:
    maps = {"a": fake_map("a"), "b": fake_map("b", signed=True)}
    progress = []
    curves = evaluation.degradation_for(offline_model, chelsea_x, maps, 285, tile=56, points=3,
                                        progress=lambda *a: progress.append(a))
    assert list(curves) == ["a", "b"] and all(len(c.removed) == 3 for c in curves.values())
    assert progress[0] == (0, 2, "A") and progress[-1] == (2, 2, "done")
    rows = evaluation.degradation_rows(curves, {"a": "Method A"})
    assert [r["Method"] for r in rows] == ["Method A", "b"]  # unnamed keys fall back to the key
    assert all(r["points"] == 3 and np.isfinite(r["Area (LeRF − MoRF)"]) for r in rows)


def test_sanity_strip(offline_model, chelsea_x) -> None:
    levels = evaluation.sanity_levels(offline_model)
    assert levels[0] == "logits" and len(levels) > 2
    before = {k: v.clone() for k, v in offline_model.model.state_dict().items()}
    progress = []
    strip = evaluation.sanity_strip(offline_model, chelsea_x, 285, "saliency", 2,
                                    progress=lambda *a: progress.append(a))
    assert strip.method == "Saliency" and strip.levels == levels[:2]
    assert strip.original.shape == (224, 224) and len(strip.heatmaps) == 2
    assert all(-1.0 <= s <= 1.0 for s in strip.ssim)
    assert progress[0] == (0, 3, "original") and progress[-1] == (3, 3, "done")
    assert all(torch.equal(before[k], v) for k, v in offline_model.model.state_dict().items())  # a copy was randomised
