"""iba_core.app.evaluation: the Evaluate page's yardsticks (insertion / deletion, ROAD, pointing) for one image,
checked against the library's functions called directly on the same inputs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from app_helpers import fake_map
from iba_core.app import evaluation
from iba_core.app.inputs import crop_box_mask
from iba_core.app.state import Subject
from iba_core.heads import head_of
from iba_core.metrics.common import scoring_model
from iba_core.metrics.insertion_deletion import PROTOCOLS, insertion_deletion
from iba_core.metrics.pointing import POINTING_TOLERANCE, pointing_scores
from iba_core.metrics.road import road_curves

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py says why

#: A coarse protocol so the test is quick: 32 steps of 1,568 pixels on the 224 crop.
COARSE = replace(PROTOCOLS["rise"], step=224 * 7)
REMOVED = (20, 50, 80)
BOX = (60, 40, 170, 200)
SUBJECT = Subject("chelsea", "EfficientNet-Lite0", "tabby", 281, "digest")


def peaked_map(row: int, col: int) -> np.ndarray:
    """A smooth map with its maximum at (row, col)."""
    r, c = np.mgrid[:224, :224]
    return np.exp(-((r - row) ** 2 + (c - col) ** 2) / (2 * 30.0**2)).astype(np.float32)


@pytest.fixture(scope="module")
def maps():
    inside, outside = fake_map("inside"), fake_map("outside", signed=True)
    inside.values = peaked_map(100, 110)  # inside the box
    outside.values = peaked_map(215, 10)  # far from it
    return {"inside": inside, "outside": outside}


@pytest.fixture(scope="module")
def measured(offline_model, chelsea_x, maps):
    progress: list[tuple] = []
    mask = crop_box_mask(BOX, 224)
    results = evaluation.yardsticks_for(offline_model, chelsea_x, maps, 281, COARSE, removed=REMOVED, mask=mask,
                                        seed=7, progress=lambda *a: progress.append(a))
    return results, progress, mask


def test_yardsticks_are_the_librarys_numbers(offline_model, chelsea_x, maps, measured) -> None:
    results, _, mask = measured
    assert list(results) == ["inside", "outside"]
    model, head = scoring_model(offline_model), head_of(offline_model)
    for key, amap in maps.items():
        got = results[key]
        pixels = insertion_deletion(model, chelsea_x, amap.values, 281, COARSE, head=head, seed=7)
        road = road_curves(model, chelsea_x, amap.values, 281, REMOVED, head=head, seed=7)
        np.testing.assert_allclose(got.pixels.fraction, pixels.fraction)
        np.testing.assert_allclose(got.pixels.insertion, pixels.insertion, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got.pixels.deletion, pixels.deletion, rtol=1e-4, atol=1e-6)
        assert got.pixels.protocol == COARSE and got.pixels.target == 281
        assert got.pixels.insertion_auc == pytest.approx(pixels.insertion_auc, rel=1e-4)
        np.testing.assert_allclose(got.road.removed, REMOVED)
        np.testing.assert_allclose(got.road.morf, road.morf, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(got.road.lerf, road.lerf, rtol=1e-4, atol=1e-6)
        assert got.pointing == pytest.approx(pointing_scores(amap.values, mask, POINTING_TOLERANCE))
    assert len(results["inside"].pixels.fraction) == 33  # 0, 1,568, …, 224² pixels: the coarse protocol's steps


def test_pointing_hits_inside_the_box_and_misses_outside(measured) -> None:
    results = measured[0]
    assert results["inside"].peak == (100, 110) and results["outside"].peak == (215, 10)  # (row, column)
    assert results["inside"].pointing["pointing_hit"] == 1.0 and results["outside"].pointing["pointing_hit"] == 0.0
    assert results["inside"].pointing["energy_pointing"] > 0.5 > results["outside"].pointing["energy_pointing"]


def test_progress_covers_every_method_and_measurement_in_order(measured) -> None:
    progress = measured[1]
    # a phase per metric with forward passes (the registry's: insertion, deletion, ROAD, MoRF AOPC) and method
    timed = ["Insertion", "Deletion", "ROAD", "MoRF AOPC"]
    total = 2 * len(timed) * evaluation.PHASE_UNITS
    assert all(t == total for _, t, _ in progress)
    done = [d for d, _, _ in progress]
    assert done == sorted(done) and done[0] == 0 and progress[-1] == (total, total, "done")
    labels = list(dict.fromkeys(label for _, _, label in progress))
    assert labels == [f"{m} · {t}" for m in ("Inside", "Outside") for t in timed] + ["done"]


def test_without_a_box_there_are_no_pointing_scores(offline_model, chelsea_x, maps) -> None:
    one = {"inside": maps["inside"]}
    results = evaluation.yardsticks_for(offline_model, chelsea_x, one, 281, replace(COARSE, step=224 * 56),
                                        removed=(50,))
    assert results["inside"].pointing is None
    run = evaluation.yardstick_run(SUBJECT, results, COARSE, POINTING_TOLERANCE)
    assert run.picture is None and run.box_share is None
    (row,) = evaluation.yardstick_rows(run, {})
    assert row["Method"] == "inside" and evaluation.pointing_rows(run, {}) == []


def test_rows_csv_and_picture_of_a_run(measured) -> None:
    results, _, mask = measured
    cropped = Image.new("RGB", (224, 224), (0, 0, 0))
    run = evaluation.yardstick_run(SUBJECT, results, COARSE, POINTING_TOLERANCE, mask, [BOX], cropped)
    assert run.box_share == pytest.approx(110 * 160 / 224**2) and run.picture.size == (224, 224)
    assert run.picture.getpixel((110, 100)) != (0, 0, 0)  # the first map's maximum is marked (x, y)
    assert run.removed == [20.0, 50.0, 80.0]
    rows = evaluation.yardstick_rows(run, {"inside": "Peak inside"})
    assert [r["Method"] for r in rows] == ["Peak inside", "outside"]
    assert rows[0]["insertion AUC"] == round(results["inside"].pixels.insertion_auc, 4)
    assert rows[1]["deletion AUC"] == round(results["outside"].pixels.deletion_auc, 4)
    assert rows[0]["ROAD combined"] == round(results["inside"].road.combined, 4)
    assert rows[0]["MoRF AOPC"] == round(results["inside"].curves["aopc"].aopc, 4)  # the registry's example metric
    labels = {c["label"] for c in evaluation.table_columns(rows).values()}
    assert {"insertion AUC ↑", "deletion AUC ↓", "ROAD MoRF ↓", "ROAD LeRF ↑", "MoRF AOPC ↑", "Method"} <= labels
    points = evaluation.pointing_rows(run, {"inside": "Peak inside"})
    assert [r["Method"] for r in points] == ["Peak inside", "outside"]
    assert [r["pointing hit"] for r in points] == ["hit", "miss"]
    assert points[0]["EHR"] == round(results["inside"].pointing["ehr"], 4)
    for table in (rows, points):  # every column has its tooltip
        assert all(c["help"] for c in evaluation.table_columns(table).values())

    import io

    import pandas as pd

    table = pd.read_csv(io.BytesIO(evaluation.yardstick_csv(run, {"inside": "Peak inside"})))
    assert list(table["method"]) == ["inside", "outside"] and list(table["pointing_hit"]) == [1.0, 0.0]
    assert table["deletion_auc"][1] == pytest.approx(results["outside"].pixels.deletion_auc)
    assert set(table["protocol_settings"]) == {COARSE.identity()} and set(table["road_removed"]) == {"20 50 80"}
    assert set(table["target"]) == {281} and set(table["pointing_tolerance"]) == {POINTING_TOLERANCE}


def test_progress_text_says_the_time_left() -> None:
    assert evaluation.progress_text(0, 400, "A · ROAD", 0.0) == "A · ROAD · 0%"
    assert evaluation.progress_text(100, 400, "A · ROAD", 4.0) == "A · ROAD · 25% · about 12.0 s left"
    assert evaluation.progress_text(400, 400, "done", 16.0) == "done · 100%"



def test_a_box_off_the_crop_is_refused_before_any_measurement() -> None:
    from types import SimpleNamespace

    from iba_core.errors import UserError

    preprocess = SimpleNamespace(resize=256, crop_size=224)
    # 660 × 440 → 384 × 256, crop from x = 80: a box left of x = 137 (original pixels) misses the crop.
    voc = ("<annotation><size><width>660</width><height>440</height></size><object><name>cat</name><bndbox>"
           "<xmin>0</xmin><ymin>0</ymin><xmax>100</xmax><ymax>100</ymax></bndbox></object></annotation>")
    with pytest.raises(UserError, match="No box of the annotation lies on the network's crop"):
        evaluation.pointing_box("ignored", voc, preprocess)
    mask, boxes = evaluation.pointing_box("60, 40, 170, 200", None, preprocess)
    assert mask.sum() == 110 * 160 and boxes == [BOX]


def test_one_large_box_warning_for_the_ratio_and_the_pointing_game(monkeypatch) -> None:
    """A box above metrics.bbox.LARGEST_BOX_SHARE gets one sentence with its share; a smaller one none."""
    assert evaluation.large_box_warning(0.30, "x.") is None
    text = evaluation.large_box_warning(0.5, "a random map hits often; the pointing game says little here.")
    assert text == ("The box covers 50% of the crop (more than 33%): a random map hits often; the pointing game "
                    "says little here.")
    monkeypatch.setattr(evaluation, "LARGEST_BOX_SHARE", 0.2)
    assert evaluation.large_box_warning(0.30, "x.") == "The box covers 30% of the crop (more than 20%): x."


def test_box_text_names_the_boxes_in_crop_pixels() -> None:
    assert evaluation.box_text([(60, 40, 170, 200)]) == "60, 40, 170, 200"
    assert evaluation.box_text([(1.25, 2.0, 30.04, 40.0), (0, 0, 5, 5)]) == "1.2, 2, 30, 40; 0, 0, 5, 5"


def test_float_columns_are_shown_with_four_decimals() -> None:
    columns = evaluation.table_columns([{"Method": "a", "energy pointing": 1.0, "pointing hit": "hit"}])
    assert columns["energy pointing"]["decimals"] and not columns["Method"]["decimals"]
    assert not columns["pointing hit"]["decimals"]


def test_each_registered_method_has_its_own_fixed_chart_colour() -> None:
    from iba_core.methods import method_keys

    every = evaluation.chart_colours(method_keys())
    assert len(set(every.values())) == len(method_keys())  # no two registered methods share a colour
    assert evaluation.chart_colours(["grad_cam"]) == {"grad_cam": every["grad_cam"]}
    assert evaluation.chart_colours(["iba_10", "grad_cam", "saliency"])["grad_cam"] == every["grad_cam"]


def test_forward_passes_of_insertion_and_deletion_by_hand() -> None:
    assert evaluation.forward_passes(224, 224) == 2 * (224 + 1)  # RISE: 224 steps, 225 points a curve
    assert evaluation.forward_passes(224, 100) == 2 * (502 + 1)  # ⌈50,176 / 100⌉ = 502 steps, the last shorter
    assert evaluation.forward_passes(4, 16) == 2 * 2 and evaluation.forward_passes(4, 1) == 2 * 17


def test_a_setting_the_crop_cannot_take_is_refused_before_any_pass(offline_model, chelsea_x, maps) -> None:
    """Issue #40, item 3: the page's settings checked against the crop (`registry.check_on_crop`) before the
    metrics' forward passes: a step larger than the 224 crop, a blur kernel wider than it."""
    from iba_core.errors import UserError

    calls: list = []
    for protocol, words in ((replace(COARSE, step=224 * 224 + 1), "pixels per step or fewer"),
                            (replace(COARSE, blur_kernel=449), "blur kernel of 447 pixels or less")):
        with pytest.raises(UserError) as caught:
            evaluation.yardsticks_for(offline_model, chelsea_x, {"inside": maps["inside"]}, 281, protocol,
                                      removed=(50,), progress=lambda *a: calls.append(a))
        assert words in caught.value.app_hint
    assert calls == []  # refused before the first phase
