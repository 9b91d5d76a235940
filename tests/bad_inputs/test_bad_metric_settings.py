"""Issue #40, item 3: a bad metric setting cannot spoil a run. A setting the network's crop cannot take is refused in
one sentence before any image (folder runs, the evaluate CLI, the library's drivers); a metric that fails on a map
keeps the map; a rerun may measure again, another way, a metric whose every try failed, but never one that has
results measured another way."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bad_input_helpers import assert_one_sentence, cli_error, run_cli
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.metrics import registry
from iba_core.metrics.insertion_deletion import protocol_from
from iba_core.metrics.yardsticks import YardstickOptions
from iba_core.runs import FolderSettings, RunFolderError, finish_run, list_images, run_folder
from iba_core.runs.store import PartWriter, read_parts
from iba_core.runs.tables import open_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import SIZE, load_card, write_card, write_noise_images  # noqa: E402

#: 1,024 px a step on the 64 × 64 crop: 5 points a curve (quick)
STEP = 1024
SOUND = YardstickOptions(protocol=protocol_from("rise", step=STEP))
#: half of 129 is 64: more than the 64-px crop allows, so every image's blur would fail
WIDE = YardstickOptions(protocol=protocol_from("rise", step=STEP, blur_kernel=129))


@pytest.fixture(scope="module")
def card(tmp_path_factory):
    return write_card(tmp_path_factory.mktemp("card"), ["apple", "banana", "cherry"])


@pytest.fixture(scope="module")
def net(card):
    return load_card(card)


@pytest.fixture
def images(tmp_path):
    write_noise_images(tmp_path / "images", 3)
    return tmp_path / "images"


def _cli(card, images, out, *extra):
    return run_cli(["attribute", images, "--model", card, "--trust-code", "--out", out, "--methods", "gradient",
                    "--no-progress", *extra])


def test_a_blur_kernel_wider_than_the_crop_is_refused_before_any_image(card, images, tmp_path):
    out = tmp_path / "run"
    result = _cli(card, images, out, "--metrics", "insertion", "--blur-kernel", "129")
    assert result.code == 1
    message = cli_error(result)
    assert_one_sentence(message)
    assert "129 × 129 blur kernel" in message and f"{SIZE} × {SIZE} crop" in message
    assert "--blur-kernel 127 or less" in message  # names the flag and what it may be
    assert not (out / "run.json").exists() and not (out / "parts").exists()  # nothing started
    # the largest kernel the crop takes runs
    assert _cli(card, images, out, "--metrics", "insertion", "--blur-kernel", "127", "--step", str(STEP)).code == 0
    assert pd.read_parquet(out / "results.parquet")["insertion_auc"].between(0, 1).all()


def test_the_evaluate_cli_refuses_the_same_kernel_before_any_image(card, images, tmp_path):
    out = tmp_path / "results.jsonl"
    result = run_cli(["evaluate", "insertion", "--images", images, "--model", card, "--trust-code", "--methods",
                      "gradient", "--out", out, "--no-progress", "--blur-kernel", "129"])
    message = cli_error(result)
    assert_one_sentence(message)
    assert "--blur-kernel 127 or less" in message
    assert not out.exists() or out.read_text() == ""


@pytest.mark.parametrize("options, words", [
    (WIDE, "--blur-kernel 127"),
    (YardstickOptions(protocol=protocol_from("rise", step=SIZE * SIZE + 1)), f"--step {SIZE * SIZE} or less"),
    (YardstickOptions(road_removed=(0.01, 50)), "removes no pixel"),
])
def test_each_metric_checks_its_settings_against_the_crop(options, words):
    metrics = {"--blur": ("insertion", "deletion"), "--step": ("insertion",), "remove": ("road",)}
    key = next(k for k in metrics if k in words)
    for name in metrics[key]:
        with pytest.raises(UserError) as caught:
            registry.check_on_crop([name], options, (SIZE, SIZE))
        assert words in f"{caught.value.message} {caught.value.cli_hint}"
    registry.check_on_crop(["insertion", "deletion", "road", "pointing", "aopc"], SOUND, (SIZE, SIZE))  # all sound
    registry.check_on_crop(["insertion", "deletion"], replace(WIDE, protocol=protocol_from(
        "rise", step=SIZE * SIZE, blur_kernel=127)), (SIZE, SIZE))  # the largest the crop takes
    registry.check_on_crop(["insertion"], options, None)  # no crop known: nothing to check


def test_the_least_percentage_roads_refusal_names_removes_a_pixel():
    from iba_core.metrics.road import removed_count

    for side in (16, 64, 224):
        with pytest.raises(UserError) as caught:
            registry.check_on_crop(["road"], YardstickOptions(road_removed=(1e-6,)), (side, side))
        least = float(caught.value.message.split("at least ")[1].split(" ")[0])
        assert removed_count(least, side * side) == 1


def _failed_run(net, images, out, monkeypatch):
    """A run whose insertion failed on every map (a kernel too wide for the crop, let through as an older version
    did), written by the library's runner with the crop check switched off."""
    root, items = list_images(images, class_index=net.class_index)
    with monkeypatch.context() as patch:
        patch.setattr(registry, "check_on_crop", lambda *args: None)
        summary = run_folder(net, items, [get_method("gradient")], out,
                             FolderSettings(metrics=("insertion",), yardsticks=WIDE), root=root)
    return root, items, summary


def test_a_metric_that_fails_keeps_the_map_and_a_rerun_with_a_sound_kernel_replaces_it(net, images, tmp_path,
                                                                                      monkeypatch):
    out = tmp_path / "run"
    root, items, summary = _failed_run(net, images, out, monkeypatch)
    assert summary.errors == 0 and summary.metric_failures == 3
    table = finish_run(out)
    assert table["error"].isna().all() and table["insertion_auc"].isna().all()
    assert (table["map_index"] >= 0).all()  # the maps are kept
    assert table["metric_errors"].str.startswith("insertion: A 129 × 129 blur").all()
    assert not table["metrics"].fillna("").str.contains("insertion").any()
    run = open_run(out)
    assert np.isfinite(run.heatmap(run.table.iloc[0])).all()

    # the same kernel again: refused up front; a sound one replaces the failed results, also from the CLI
    with pytest.raises(UserError, match="129 × 129 blur kernel"):
        run_folder(net, items, [get_method("gradient")], out, FolderSettings(metrics=("insertion",), yardsticks=WIDE),
                   root=root)
    again = run_folder(net, items, [get_method("gradient")], out,
                       FolderSettings(metrics=("insertion",), yardsticks=SOUND), root=root)
    assert again.measured == 3 and again.rows == 0 and again.metric_failures == 0
    table = finish_run(out)
    assert len(table) == 3 and table["insertion_auc"].between(0, 1).all() and table["metric_errors"].isna().all()
    recorded = json.loads((out / "run.json").read_text())["settings"]["yardsticks"]["protocol"]
    assert recorded["blur_kernel"] == 11 and recorded["step"] == STEP

    # now that insertion has results, another kernel is refused as before, saying how to start over
    with pytest.raises(RunFolderError) as caught:
        run_folder(net, items, [get_method("gradient")], out,
                   FolderSettings(metrics=("insertion",), yardsticks=replace(SOUND, protocol=protocol_from(
                       "rise", step=STEP, blur_kernel=21))), root=root)
    assert "measured insertion another way" in caught.value.message
    assert "another --out folder to start over" in caught.value.cli_hint


def test_the_cli_replaces_failed_results_even_with_retry_errors(card, net, images, tmp_path, monkeypatch):
    out = tmp_path / "run"
    _failed_run(net, images, out, monkeypatch)
    result = _cli(card, images, out, "--metrics", "insertion", "--step", str(STEP), "--retry-errors")
    assert result.code == 0, result.err
    line = json.loads(result.out.strip().splitlines()[-1])
    assert line["rows_given_metrics"] == 3 and line["errors"] == 0 and "metric_failures" not in line
    assert pd.read_parquet(out / "results.parquet")["insertion_auc"].between(0, 1).all()


def test_error_rows_of_an_older_version_are_done_again_with_the_new_settings(net, images, tmp_path, monkeypatch):
    """Before maps were kept, a failed metric made the row an error without its map: such a run is measured again
    with a sound kernel, its rows made anew."""
    out = tmp_path / "run"
    root, items, _ = _failed_run(net, images, out, monkeypatch)
    old = read_parts(out)
    for part in (out / "parts").iterdir():
        part.unlink()
    writer = PartWriter(out)
    for _, row in old.iterrows():
        writer.add({"image": row["image"], "method": row["method"], "method_name": row["method_name"],
                    "label": None, "error": "the metrics failed: A 129 × 129 blur needs an image larger than 64 "
                    "pixels a side (this one is 64 × 64)."})
    writer.flush()
    assert finish_run(out)["error"].notna().all()
    summary = run_folder(net, items, [get_method("gradient")], out,
                         FolderSettings(metrics=("insertion",), yardsticks=SOUND), root=root)
    assert summary.rows == 3 and summary.errors == 0
    table = finish_run(out)
    assert len(table) == 3 and table["error"].isna().all() and table["insertion_auc"].between(0, 1).all()


def test_a_run_with_good_results_is_still_refused_another_protocol(net, images, tmp_path):
    root, items = list_images(images, class_index=net.class_index)
    out = tmp_path / "run"
    run_folder(net, items, [get_method("gradient")], out, FolderSettings(metrics=("insertion",), yardsticks=SOUND),
               root=root)
    other = YardstickOptions(protocol=protocol_from("rise", step=STEP, blur_kernel=21))
    with pytest.raises(RunFolderError) as caught:
        run_folder(net, items, [get_method("gradient")], out,
                   FolderSettings(metrics=("insertion",), yardsticks=other, retry_errors=True), root=root)
    assert "measured insertion another way" in caught.value.message and "blur_kernel 11" in caught.value.message
    assert json.loads((out / "run.json").read_text())["settings"]["yardsticks"]["protocol"]["blur_kernel"] == 11
