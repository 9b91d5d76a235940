"""iba_core.app.evaluation: the Evaluate page's per-image checks."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from app_helpers import fake_map
from iba_core.app import evaluation
from iba_core.app.inputs import crop_box_mask
from iba_core.methods import AttributionMap


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def test_bbox_rows_and_large_boxes() -> None:
    mask = crop_box_mask((10, 20, 110, 70))
    inside = np.zeros((224, 224), np.float32)
    inside[mask] = 1.0
    rows = evaluation.bbox_rows({"a": AttributionMap("a", "A", inside, False, "", 0.0)}, mask)
    assert rows == [{"Method": "A", "bbox ratio": 1.0, "random ≈": round(float(mask.mean()), 4)}]
    assert not evaluation.large_box(mask)
    assert evaluation.large_box(crop_box_mask((0, 0, 200, 200)))


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
