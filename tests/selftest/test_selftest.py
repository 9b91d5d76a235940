"""The self-test end to end (issue #42, item 2) on a tiny CNN trained in the test so that a red top-left square is the
only cue of its class "marked": a red patch planted top-left on the other class's images moves every prediction to
"marked" (its reaction reported, the methods ranked on the maps of the class the mark pushes toward); the same
network meets a blue patch it was never taught (no reaction: the caution, no ranking). Quick settings: 8 images, the
Per-Sample Bottleneck at 5 steps with 32 statistics samples."""
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selftest_fixtures import mark_network, train_mark_net, write_object_folder  # noqa: E402

from iba_core.errors import UserError  # noqa: E402
from iba_core.methods import get_method  # noqa: E402
from iba_core.runs import open_run  # noqa: E402
from iba_core.selftest import make_mark, open_self_test, self_test  # noqa: E402
from iba_core.selftest.selftest import IMAGES_FILE, MAPS_FILE, RESULTS_FILE  # noqa: E402

IMAGES = 8


def quick_methods() -> list:
    return [get_method("iba_10", precision="fp32", stats_samples=32, steps=5), get_method("saliency"),
            get_method("grad_cam")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("selftest")
    network = mark_network(root, train_mark_net())
    write_object_folder(root / "data", IMAGES)
    return root, network


@pytest.fixture(scope="module")
def reacting(setup):
    root, network = setup
    mark = make_mark("patch", where="top-left", size=0.125)  # the taught cue: red, 8 px, top-left
    return self_test(network, root / "data", mark, quick_methods(), root / "red"), network


def test_a_model_built_to_react_to_the_mark_is_reported_as_reacting(reacting):
    result, _ = reacting
    r = result.reaction
    assert r.reacts and r.images == IMAGES
    assert r.toward_name == "marked" and r.changed_share == 1.0 and r.changed_to == {"marked": IMAGES}
    assert r.p_own_clean > 0.9 and r.p_own_marked < 0.1 and r.toward_rise > 0.8
    assert r.verdict.startswith("your model reacts to this mark: p(marked) ×")
    assert result.caution is None
    assert (result.images["own_name"] == "object").all() and result.images["changed"].all()


def test_the_mark_adds_evidence_for_marked_so_a_second_pair_of_runs_explains_it(reacting):
    result, _ = reacting
    assert set(result.runs) == {"own", "toward"}
    toward = open_run(result.out_dir / result.runs["toward"][1]).table
    own = open_run(result.out_dir / result.runs["own"][1]).table
    assert (toward["target"] == 0).all() and (own["target"] == 1).all()  # "marked", and each image's own class
    assert len(toward) == len(own) == IMAGES * 3 and toward["error"].isna().all()
    assert result.new_rows == {"run-clean": 24, "run-marked": 24, "run-clean-toward": 24, "run-marked-toward": 24}


def test_each_method_is_scored_and_ranked_on_the_pushed_class(reacting):
    result, _ = reacting
    assert result.box == (0, 0, 8, 8) and result.region_share == pytest.approx(1 / 64)
    toward = {s.method: s for s in result.scores if s.target == "toward"}
    assert set(toward) == {"iba_10", "saliency", "grad_cam"} and all(s.images == IMAGES for s in toward.values())
    assert sorted(result.ranking) == sorted(toward)
    ratios = [toward[m].localisation_ratio for m in result.ranking]
    assert ratios == sorted(ratios, reverse=True) and [toward[m].rank for m in result.ranking] == [1, 2, 3]
    # the bottleneck's maps put the marked copies' change on the mark, far above chance (1), and tell every marked
    # copy from every clean one by the mark's share of the map
    assert toward["iba_10"].localisation_ratio > 20 and toward["iba_10"].auroc == 1.0
    assert all(s.localisation_ratio <= s.best_ratio + 1e-9 for s in result.scores)
    maps = result.maps
    assert len(maps) == IMAGES * 3 * 2 and set(maps["target"]) == {"own", "toward"}
    iba = maps[(maps["method"] == "iba_10") & (maps["target"] == "toward")]
    assert np.mean(iba["difference_share"]) / result.region_share == pytest.approx(
        toward["iba_10"].localisation_ratio)


def test_the_results_are_written_and_read_back(reacting):
    result, _ = reacting
    out = result.out_dir
    summary = json.loads((out / RESULTS_FILE).read_text())
    assert summary["verdict"] == result.reaction.verdict and summary["ranking"] == result.ranking
    assert summary["box"] == [0, 0, 8, 8]
    assert len(pd.read_parquet(out / IMAGES_FILE)) == IMAGES and len(pd.read_parquet(out / MAPS_FILE)) == 48
    again = open_self_test(out)
    assert again.ranking == result.ranking and again.reaction == result.reaction
    assert again.region().sum() == 64
    # the copies keep the folder's relative paths, clean and marked
    assert sorted(p.name for p in (out / "clean").iterdir()) == sorted(p.name for p in (out / "marked").iterdir())


def test_the_paired_view_compares_the_two_copy_folders_image_by_image(reacting):
    result, _ = reacting
    assert set(result.paired_dirs) == {"own", "toward"}
    assert set(result.paired_dirs["toward"]) == {"iba_10", "saliency", "grad_cam"}
    folder = result.out_dir / result.paired_dirs["toward"]["iba_10"]
    assert (folder / "paired.parquet").is_file() and (folder / "paired_report.html").is_file()
    paired = result.paired("iba_10", "toward")
    assert len(paired.table) == IMAGES and paired.table["changed"].all()  # every prediction moved to "marked"
    assert paired.score == "total_bits" and (paired.table["delta_score"] > 0).all()  # the mark adds bits
    difference = paired.difference(paired.table.iloc[0])
    assert difference[:8, :8].sum() > 0.5 * np.clip(difference, 0, None).sum()  # most of the rise on the mark
    with pytest.raises(UserError, match="no runs for the target 'toward'"):
        replace(result, runs={"own": result.runs["own"]}).paired("iba_10", "toward")


def test_a_rerun_skips_the_finished_runs(setup, reacting):
    root, network = setup
    result, _ = reacting
    again = self_test(network, root / "data", make_mark("patch", where="top-left", size=0.125), quick_methods(),
                      root / "red")
    assert again.new_rows == {name: 0 for name in result.new_rows}
    assert again.ranking == result.ranking
    fewer = self_test(network, root / "data", make_mark("patch", where="top-left", size=0.125),
                      [get_method("saliency")], root / "red")  # the runs keep the others: only saliency is scored
    assert fewer.ranking == ["saliency"] and {s.method for s in fewer.scores} == {"saliency"}
    assert fewer.new_rows == {name: 0 for name in result.new_rows}


def test_a_mark_the_model_ignores_gets_the_caution_and_no_ranking(setup):
    root, network = setup
    blue = make_mark("patch", where="top-left", size=0.125, colour="blue")  # never taught
    result = self_test(network, root / "data", blue, quick_methods(), root / "blue")
    r = result.reaction
    assert not r.reacts and r.changed_share == 0 and abs(r.delta_p_own) < 0.05
    assert result.caution == r.verdict and "hardly reacts to this mark" in r.verdict
    assert r.verdict.endswith("a map has nothing to show, so this test cannot rank the methods")
    assert result.ranking == [] and all(s.rank is None for s in result.scores)
    assert set(result.runs) == {"own"}  # nothing to push toward: no second pair
    assert {s.method for s in result.scores} == {"iba_10", "saliency", "grad_cam"}  # measured all the same


def test_another_request_into_the_same_folder_is_refused(setup, reacting):
    root, network = setup
    with pytest.raises(UserError, match="holds a self-test with another mark"):
        self_test(network, root / "data", make_mark("text"), quick_methods(), root / "red")


def test_a_sample_is_seeded_and_stated(setup):
    root, network = setup
    methods = [get_method("saliency")]
    result = self_test(network, root / "data", make_mark("patch", where="top-left"), methods, root / "sample",
                       sample=3)
    assert result.sample == {"images": 3, "of": IMAGES, "seed": 0} and len(result.images) == 3
    again = self_test(network, root / "data", make_mark("patch", where="top-left"), methods, root / "sample2",
                      sample=3)
    assert list(again.images["image"]) == list(result.images["image"])


def test_an_unreadable_image_is_left_out_and_said(setup, tmp_path):
    root, network = setup
    folder = tmp_path / "data"
    write_object_folder(folder, 2)
    (folder / "broken.png").write_bytes(b"not a png")
    result = self_test(network, folder, make_mark("patch", where="top-left"), [get_method("saliency")],
                       tmp_path / "out")
    assert list(result.images["image"]) == ["00.png", "01.png"] and list(result.unreadable) == ["broken.png"]
    assert result.sample == {"images": 2, "of": 3, "seed": None}  # the images used, not the ones asked
    assert open_self_test(tmp_path / "out").sample["images"] == 2 == result.reaction.images
    assert Image.open(tmp_path / "out" / "marked" / "00.png").size == (64, 64)


def test_the_shortcut_fixture_network_ignores_a_red_corner_on_its_object_images(tmp_path):
    """The folder-run tests' shortcut network (tests/runs/run_fixtures.py) tells "object" by its green square, so a
    red top-left square planted on object images moves nothing: the caution, not a reaction (why this test's
    reacting network is trained with the green object in both classes)."""
    from run_fixtures import load_card, train_shortcut_net, write_card, write_shortcut_folder

    write_shortcut_folder(tmp_path / "data", per_class=4)
    network = load_card(write_card(tmp_path / "card", ["marked", "object"], model=train_shortcut_net()))
    result = self_test(network, tmp_path / "data" / "object", make_mark("patch", where="top-left", size=0.125),
                       [get_method("saliency")], tmp_path / "out")
    assert not result.reaction.reacts and result.reaction.changed_share == 0
    assert result.reaction.toward_p_marked < 0.01 and result.ranking == []


def test_an_out_folder_in_the_image_folder_is_refused(setup):
    """The copies and reports would be listed as images (and a rerun find others); an image folder inside the
    folders the test writes is refused too, one elsewhere inside the out folder is fine."""
    root, network = setup
    mark, methods = make_mark("patch", where="top-left"), [get_method("saliency")]
    for out in (root / "data", root / "data" / "st"):
        with pytest.raises(UserError, match="is the image folder .* or inside it"):
            self_test(network, root / "data", mark, methods, out)
    assert not (root / "data" / "st").exists() and not (root / "data" / "clean").exists()
    with pytest.raises(UserError, match="lies in clean/ of the self-test's folder"):
        self_test(network, root / "red" / "clean", mark, methods, root / "red")
    write_object_folder(root / "holder" / "images", 2)
    inside = self_test(network, root / "holder" / "images", mark, methods, root / "holder")
    assert len(inside.images) == 2


def test_the_measures_score_the_marks_box(setup):
    """A text mark's box, not its letters' pixels, is what the localisation ratio and the AUROC score."""
    root, network = setup
    result = self_test(network, root / "data", make_mark("text", where="top-left"), [get_method("saliency")],
                       root / "text", sample=3)
    x0, y0, x1, y1 = result.box
    assert result.region_share == pytest.approx((x1 - x0) * (y1 - y0) / result.crop ** 2)
    assert result.region().sum() == (x1 - x0) * (y1 - y0) == open_self_test(root / "text").region().sum()
    assert all(s.best_ratio == pytest.approx(1 / result.region_share) for s in result.scores)


def test_the_class_pushed_toward_is_recorded_and_another_one_refused(setup, reacting, tmp_path):
    root, network = setup
    result, _ = reacting
    record = json.loads((result.out_dir / "mark.json").read_text())
    assert record["toward"] == {"class": 0, "name": "marked"}
    shutil.copytree(result.out_dir, tmp_path / "red")
    record["toward"] = {"class": 1, "name": "object"}  # as if an earlier test had found another class
    (tmp_path / "red" / "mark.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="pushed the predictions toward 'object', where this run finds 'marked', so "
                                        "its runs for that class cannot be resumed"):
        self_test(network, root / "data", make_mark("patch", where="top-left", size=0.125), quick_methods(),
                  tmp_path / "red")
