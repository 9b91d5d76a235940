"""Folder runs: one row per (image, method), errors as rows, resume, added methods, refusals, open_run, the CLI and
torchrun."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iba_core import open_run
from iba_core.cli import main
from iba_core.methods import get_method
from iba_core.runs import FolderSettings, RunFolderError, finish_run, list_images, run_folder
from iba_core.runs.store import PARTS, read_parts
from run_fixtures import LAYER, write_noise_images

ROOT = Path(__file__).resolve().parents[2]
#: Quick Per-Sample settings (2 steps, 2 noisy copies); statistics from 16 crops (cached for the session).
QUICK = {"steps": 2, "batch": 2, "precision": "fp32", "stats_samples": 16}
CLI_QUICK = ["--steps", "2", "--batch", "2", "--precision", "fp32", "--n", "16", "--no-progress"]


def iba(**overrides):
    return get_method("iba_10", **{**QUICK, **overrides})


def cli(card, *args):
    return main(["attribute", "--model", str(card), "--trust-code", *CLI_QUICK, *map(str, args)])  # args win


def json_line(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_twelve_images_two_unusable_give_ten_results_and_two_error_rows(tiny_card, twelve, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(tiny_card, twelve, "--out", out, "--batch-images", "4") == 0
    line = json_line(capsys)
    assert line["images"] == 12 and line["rows"] == 12 and line["errors"] == 2 and line["new_rows"] == 12
    table = pd.read_parquet(out / "results.parquet")  # any Parquet reader opens it
    assert len(table) == 12 and set(table["method"]) == {"iba_10"}
    errors = table[table["error"].notna()].set_index("image")["error"]
    assert sorted(errors.index) == ["bands.npy", "broken.png"]
    assert "5-band" in errors["bands.npy"] and "not a readable image" in errors["broken.png"]
    ok = table[table["error"].isna()]
    assert (ok["total_bits"] > 0).all() and ok["p_with"].between(0, 1).all()
    assert ok["border_share"].between(0, 1).all() and ok["concentration"].between(0.05, 1).all()
    assert ok["distance_to_class_mean"].notna().any()
    assert (ok["target"] == ok["predicted"]).all()  # no labels: the top-1 class is explained
    assert ok["p_target"].equals(ok["p_predicted"]) and ok["correct"].isna().all()
    info = json.loads((out / "run.json").read_text())
    assert info["network"] == "card:tiny" and info["layer"] == LAYER and info["methods"]["iba_10"]["settings"]["steps"] == 2
    assert {"python", "torch", "numpy"} <= set(info["versions"])


def test_open_run_maps_sum_to_total_bits(tiny_net, twelve, tmp_path):
    root, items = list_images(twelve, class_index=tiny_net.class_index)
    run_folder(tiny_net, items, [iba(), get_method("gradient")], tmp_path / "run", root=root)
    run = open_run(tmp_path / "run")  # no finish_run: the table is built on opening
    ok = run.table[run.table["error"].isna()]
    assert len(ok) == 20 and len(run.table) == 24
    for _, row in ok[ok["method"] == "iba_10"].iterrows():
        heatmap = run.heatmap(row)
        assert heatmap.dtype == np.float32 and heatmap.shape == (64, 64)
        assert heatmap.sum(dtype=np.float64) == pytest.approx(row["total_bits"] - row["unlocated_bits"], rel=1e-4)
    gradient = ok[ok["method"] == "gradient"].iloc[0]
    expected = get_method("gradient").attribute(tiny_net, tiny_net.preprocess(tiny_net.preprocess.load(
        run.image_path(gradient))), int(gradient["target"])).values
    np.testing.assert_allclose(run.heatmap(gradient), expected, rtol=2e-3, atol=np.abs(expected).max() * 2e-3)
    assert np.isnan(gradient["total_bits"]) and np.isnan(gradient["p_with"])
    assert run.thumbnails(ok).sum(axis=(1, 2)) == pytest.approx(np.ones(20), rel=1e-5)
    with pytest.raises(RunFolderError, match="has no map"):
        run.heatmap(run.table[run.table["image"] == "broken.png"].iloc[0])


def test_interrupted_run_resumes_and_every_image_is_there_once(tiny_net, twelve, tmp_path):
    root, items = list_images(twelve, class_index=tiny_net.class_index)
    out = tmp_path / "run"

    def stop_after_five(done, total, label):
        if done >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_folder(tiny_net, items, [iba()], out, FolderSettings(batch_images=1), root=root, progress=stop_after_five)
    first = read_parts(out)
    assert len(first) == 5 and first["image"].is_unique  # the finished images were kept on Ctrl-C
    assert first["error"].notna().sum() == 2  # bands.npy and broken.png sort first
    summary = run_folder(tiny_net, items, [iba()], out, FolderSettings(batch_images=3), root=root)
    assert summary.skipped == 5 and summary.rows == 7 and summary.errors == 0
    table = finish_run(out)
    assert sorted(table["image"]) == sorted(i.key for i in items) and table["image"].is_unique
    again = run_folder(tiny_net, items, [iba()], out, root=root)  # nothing left, not even the error rows
    assert again.rows == 0 and again.skipped == 12
    retried = run_folder(tiny_net, items, [iba()], out, FolderSettings(retry_errors=True), root=root)
    assert retried.rows == 2 and retried.errors == 2
    table = finish_run(out)
    assert len(table) == 12 and table["image"].is_unique and table["error"].notna().sum() == 2


def test_adding_a_method_computes_only_it(tiny_card, twelve, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(tiny_card, twelve, "--out", out) == 0
    before = read_parts(out)
    capsys.readouterr()
    assert cli(tiny_card, twelve, "--out", out, "--methods", "iba_10", "saliency") == 0
    line = json_line(capsys)
    assert line["new_rows"] == 12 and line["already_done"] == 0 and line["rows"] == 24
    after = read_parts(out)
    new = after.iloc[len(before):]
    assert set(new["method"]) == {"saliency"} and len(new) == 12
    pd.testing.assert_frame_equal(after.iloc[:len(before)], before)  # the Per-Sample rows were left alone
    assert set(json.loads((out / "run.json").read_text())["methods"]) == {"iba_10", "saliency"}


def test_a_run_folder_made_with_other_settings_is_refused(tiny_card, tiny_net, twelve, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(tiny_card, twelve, "--out", out, "--limit", "2") == 0
    parts = sorted((out / PARTS).iterdir())
    capsys.readouterr()
    assert cli(tiny_card, twelve, "--out", out, "--limit", "3", "--steps", "3") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was made with other settings: iba_10's steps 2 (this run: 3)" in err
    assert "Give another --out folder" in err
    assert cli(tiny_card, twelve, "--out", out, "--layer", "features.1") == 1
    assert "layer features.3 (this run: features.1)" in capsys.readouterr().err
    other = tiny_card.parent / "other.toml"
    other.write_text(tiny_card.read_text().replace('weights = "tiny.pth"\n', ""))
    assert main(["attribute", str(twelve), "--out", str(out), "--model", str(other), "--trust-code", *CLI_QUICK]) == 1
    assert "network card:tiny (this run: card:other)" in capsys.readouterr().err
    assert sorted((out / PARTS).iterdir()) == parts  # nothing was added
    with pytest.raises(RunFolderError, match="target"):  # the library refuses the same way
        root, items = list_images(twelve)
        run_folder(tiny_net, items, [iba()], out, FolderSettings(target=1), root=root)


def test_a_run_made_before_the_bottleneck_family_had_its_settings_resumes(tiny_card, twelve, tmp_path, capsys):
    """run.json from before the prior, the placement and CoIBA's read point were settings (issue #37): a rerun with
    the values those runs used adds to it; another prior is a difference, said as such."""
    import json

    out = tmp_path / "run"
    assert cli(tiny_card, twelve, "--out", out, "--limit", "1") == 0
    info = json.loads((out / "run.json").read_text())
    del info["methods"]["iba_10"]["settings"]["prior"]  # as run.json was written before
    (out / "run.json").write_text(json.dumps(info))
    capsys.readouterr()
    assert cli(tiny_card, twelve, "--out", out, "--limit", "2") == 0  # resumed: one more image
    assert len(open_run(out).table) == 2
    from iba_core.runs.store import differences

    old = {"methods": {"iba_10": {"settings": {"beta_k": 10.0}}}}
    assert differences(old, {"methods": {"iba_10": {"settings": {"beta_k": 10.0, "prior": "estimated"}}}}) == []
    assert differences(old, {"methods": {"iba_10": {"settings": {"beta_k": 10.0, "prior": "standard_normal"}}}}) \
        == ["iba_10's prior null (this run: standard_normal)"]


def test_an_image_list_labels_and_cli_refusals(tiny_card, tmp_path, capsys):
    images = tmp_path / "data"
    write_noise_images(images / "banana", 2)
    write_noise_images(images / "2", 1, prefix="c")
    # paths relative to the list's folder, which is the root (class folders are the top-level folders below it)
    listed = images / "list.txt"
    listed.write_text("# two bananas, a cherry and a missing file\nbanana/img00.png\n\nbanana/img01.png\n2/c00.png\n"
                      "banana/missing.png\nbanana/img00.png\n")
    out = tmp_path / "run"
    assert cli(tiny_card, listed, "--out", out, "--labels", tmp_path / "labels.csv") == 1
    assert "--labels file" in capsys.readouterr().err and not out.exists()  # checked before anything is made
    (tmp_path / "labels.csv").write_text("c00.png,apple\n")  # a label file's row wins over the class folder
    assert cli(tiny_card, listed, "--out", out, "--labels", tmp_path / "labels.csv") == 0
    table = open_run(out).table.set_index("image")
    assert list(table.index) == ["2/c00.png", "banana/img00.png", "banana/img01.png", "banana/missing.png"]
    assert table.loc["banana/img00.png", "label"] == 1 and table.loc["2/c00.png", "label"] == 0
    assert table.loc["banana/img01.png", "class_name"] == "banana"
    assert table["target"].iloc[:3].tolist() == table["label"].iloc[:3].tolist()
    assert "not found" in table.loc["banana/missing.png", "error"]
    capsys.readouterr()
    assert cli(tiny_card, listed, "--png", tmp_path / "x.png", "--out", tmp_path / "r2") == 1
    assert "--png draws the overlay of one image" in capsys.readouterr().err
    assert cli(tiny_card, images) == 1
    assert "needs a run folder" in capsys.readouterr().err
    assert cli(tiny_card, tmp_path / "nowhere.txt", "--out", tmp_path / "r3") == 1
    assert "was not found" in capsys.readouterr().err
    assert cli(tiny_card, images, "--out", tmp_path / "r4", "--methods", "no_such_method") == 1
    assert "Unknown attribution method 'no_such_method'" in capsys.readouterr().err
    # one image: the folder options would be ignored, so they are refused
    assert cli(tiny_card, images / "banana" / "img00.png", "--methods", "saliency", "--limit", "3") == 1
    assert "--methods, --limit apply to a folder run" in capsys.readouterr().err


def test_boxes_give_box_share(tiny_net, tmp_path):
    images = tmp_path / "images"
    write_noise_images(images, 2)
    boxes = tmp_path / "boxes"
    boxes.mkdir()
    # the images are 70 × 64: resized to 70 × 64 and centre-cropped to 64 × 64 (3 px off each side)
    (boxes / "img00.xml").write_text("<annotation><size><width>70</width><height>64</height></size><object>"
                                     "<name>x</name><bndbox><xmin>3</xmin><ymin>0</ymin><xmax>35</xmax><ymax>64</ymax>"
                                     "</bndbox></object></annotation>")
    root, items = list_images(images)
    method = get_method("gradient")
    run_folder(tiny_net, items, [method], tmp_path / "run", FolderSettings(boxes=boxes), root=root)
    table = finish_run(tmp_path / "run").set_index("image")
    assert np.isnan(table.loc["img01.png", "box_share"])  # no box file
    heatmap = np.abs(open_run(tmp_path / "run").heatmap(0).astype(np.float64))
    assert table.loc["img00.png", "box_share"] == pytest.approx(heatmap[:, :32].sum() / heatmap.sum(), rel=1e-3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_processes_give_the_table_of_one(tiny_card, twelve, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # no --n: torchrun's own parser finds it ambiguous (statistics from IBA_STATS_SAMPLES crops, in both runs)
    quick = [a for a in CLI_QUICK if a not in ("--n", "16")]
    args = [str(twelve), "--model", str(tiny_card), "--trust-code", *quick, "--methods", "iba_10", "gradient",
            "--batch-images", "4", "--metrics", "deletion", "road", "--step", "1024", "--removed", "50"]
    assert main(["attribute", *args, "--out", str(tmp_path / "one")]) == 0  # one process: this one
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "iba_core", "attribute", *args, "--out", str(tmp_path / "two")]
    two = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert two.returncode == 0, two.stderr[-3000:]
    lines = [json.loads(l) for l in two.stdout.splitlines() if l.startswith("{")]
    assert sorted(l["rank"] for l in lines) == [0, 1] and sorted(l["rank_images"] for l in lines) == [6, 6]
    assert [l.get("rows") for l in sorted(lines, key=lambda l: l["rank"])] == [24, None]  # rank 0 wrote the table
    parts = read_parts(tmp_path / "two")
    assert set(parts["rank"]) == {0, 1} and len(parts) == 24  # each rank its own parts, every pair once
    a, b = open_run(tmp_path / "one"), open_run(tmp_path / "two")
    exact = ["image", "method", "target", "predicted", "error", "label"]
    pd.testing.assert_frame_equal(a.table[exact], b.table[exact])
    close = ["p_target", "p_predicted", "total_bits", "p_with", "border_share", "concentration",
             "distance_to_class_mean", "deletion_auc", "road_morf", "road_lerf", "road_combined"]  # metrics: #29.4
    np.testing.assert_allclose(a.table[close].to_numpy(float), b.table[close].to_numpy(float), rtol=1e-4, atol=1e-7)
    for i in np.flatnonzero(a.table["error"].isna().to_numpy()):
        np.testing.assert_allclose(a.heatmap(i), b.heatmap(i), rtol=1e-3, atol=1e-6)


def test_the_readout_runs_a_chunk_in_one_pass_on_the_offline_network(offline_model, tmp_path):
    from iba_core.images import load_sample

    images = tmp_path / "photos"
    images.mkdir()
    for name in ("chelsea", "astronaut", "coffee"):
        load_sample(name).save(images / f"{name}.jpg", quality=95)
    root, items = list_images(images, class_index=offline_model.class_index)
    readout = get_method("readout")
    summary = run_folder(offline_model, items, [readout], tmp_path / "run", FolderSettings(batch_images=3), root=root)
    assert summary.rows == 3 and summary.errors == 0
    run = open_run(tmp_path / "run")
    table = run.table.set_index("image")
    assert table.loc["chelsea.jpg", "class_name"] in ("tabby", "tiger cat", "Egyptian cat")  # a cat: meaning kept
    for i, row in run.table.iterrows():
        x = offline_model.preprocess(offline_model.preprocess.load(run.image_path(row)))
        alone = readout.attribute(offline_model, x, int(row["target"]))
        np.testing.assert_allclose(run.heatmap(i), alone.values, rtol=2e-3, atol=alone.values.max() * 2e-3)
        assert run.heatmap(i).sum(dtype=np.float64) == pytest.approx(row["total_bits"], rel=1e-4)
        assert np.isnan(row["p_with"]) and row["p_without"] == row["p_target"]


def test_seconds_are_per_image_the_batch_time_split_over_its_images(tiny_net, tmp_path, monkeypatch):
    """A batch of 3 images: the rows' `seconds` add up to about the batch's time, not to 3 × it (issue #28.10)."""
    write_noise_images(tmp_path / "images", 3)
    method = iba()
    batches: list[float] = []
    compute = type(method)._compute_batch

    def timed(self, network, x, targets):
        import time

        start = time.perf_counter()
        try:
            return compute(self, network, x, targets)
        finally:
            batches.append(time.perf_counter() - start)

    monkeypatch.setattr(type(method), "_compute_batch", timed)
    root, items = list_images(tmp_path / "images", class_index=tiny_net.class_index)
    run_folder(tiny_net, items, [method], tmp_path / "run", FolderSettings(batch_images=3), root=root)
    seconds = open_run(tmp_path / "run").table["seconds"]
    assert len(batches) == 1 and len(seconds) == 3  # one batch of the three images
    # The method's own checks around the batch add a little; a batch's time on every row would give 3 × it.
    assert seconds.sum() == pytest.approx(batches[0], rel=0.25, abs=0.05)
    assert seconds.sum() < 2 * batches[0] and (seconds < 0.7 * batches[0]).all()


def test_a_row_failed_by_a_bug_says_so_and_the_runs_log_holds_its_traceback(tiny_net, twelve, tmp_path, monkeypatch):
    """#38 item 5: a method that raises an unexpected error (a bug, not a UserError) on two images gives their rows
    "a bug" with a reference, and RUN_DIR/errors.log the traceback under that reference (written once for the same
    bug); a row the user's file failed keeps its own sentence and writes nothing to the log."""
    import re

    import torch

    from iba_core.runs.bug_log import ERROR_LOG

    method = get_method("gradient")
    pre = tiny_net.preprocess
    bad = [pre.normalise(pre.crop(pre.load(twelve / name))) for name in ("img03.png", "img07.png")]
    honest = type(method).attribute_batch

    def buggy(self, network, x, targets, *args, **kwargs):
        if any(torch.equal(image.cpu(), b[0]) for image in x for b in bad):
            raise RuntimeError("injected bug: shapes (3,) and (4,) do not align")
        return honest(self, network, x, targets, *args, **kwargs)

    monkeypatch.setattr(type(method), "attribute_batch", buggy)
    root, items = list_images(twelve, class_index=tiny_net.class_index)
    summary = run_folder(tiny_net, items, [method], tmp_path / "run", FolderSettings(batch_images=4), root=root)
    assert summary.errors == 4  # the two unusable files and the two images the bug failed
    errors = open_run(tmp_path / "run").table.set_index("image")["error"]
    assert errors.notna().sum() == 4 and errors[["img00.png", "img05.png", "img09.png"]].isna().all()
    log = (tmp_path / "run" / ERROR_LOG).read_text(encoding="utf-8")
    references = []
    for image in ("img03.png", "img07.png"):
        row = errors[image]
        assert "a bug" in row and "RuntimeError" in row and f"{ERROR_LOG} in the run folder" in row, row
        assert str(tmp_path) not in row and "shapes" not in row  # the bug's text and the machine's path: in the log
        (reference,) = re.findall(r"reference ([0-9a-f]{8})", row)
        assert f"reference {reference} (image {image} · method gradient" in log
        references.append(reference)
    first, again = references
    assert f"reference {again} (image img07.png · method gradient): the same bug as reference {first}" in log
    assert log.count(", process ") == 1  # one full entry: the traceback once
    assert "Traceback (most recent call last)" in log
    assert "RuntimeError: injected bug: shapes (3,) and (4,) do not align" in log and "in buggy" in log
    assert "not a readable image" in errors["broken.png"] and "a bug" not in errors["broken.png"]
    assert "broken.png" not in log and "bands.npy" not in log


def test_the_cli_names_the_log_of_a_folder_run_that_met_a_bug(tiny_card, twelve, tmp_path, monkeypatch, capsys):
    from iba_core.runs.bug_log import ERROR_LOG

    method = get_method("gradient")

    def buggy(self, network, x, targets, *args, **kwargs):
        raise RuntimeError("injected bug")

    monkeypatch.setattr(type(method), "attribute_batch", buggy)
    out = tmp_path / "run"
    assert cli(tiny_card, twelve, "--out", out, "--methods", "gradient") == 0
    err = capsys.readouterr().err
    assert "this is a bug" in err and f"the tracebacks of rows a bug failed are in {out / ERROR_LOG}" in err
    assert "RuntimeError: injected bug" in (out / ERROR_LOG).read_text(encoding="utf-8")
