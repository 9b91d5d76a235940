"""Two runs compared image by image (`runs.paired`, issue #42 item 1): the differences by hand on tiny runs, the
matching by path with missing, extra and failed files, the refusals, the files written, the picture's colours and
the `compare-runs` command."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from iba_core.cli import main
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.runs import finish_run, list_images, open_run, run_folder
from iba_core.runs.paired import (CLASSES_FILE, MAPS_FILE, PAIRED_FILE, REPORT_FILE, SUMMARY_FILE, pair_runs,
                                  read_maps, write_paired)
from run_fixtures import load_card, tiny_module, write_card, write_noise_images

QUICK = {"steps": 2, "batch": 2, "precision": "fp32", "stats_samples": 16}
CLASSES = ["apple", "banana", "cherry"]


def _run(network, folder: Path, out: Path, methods) -> Path:
    root, items = list_images(folder, class_index=network.class_index)
    run_folder(network, items, methods, out, root=root)
    finish_run(out)
    return out


def _flipping_net(net_a, folder: Path, card_folder: Path):
    """Network A with one class's bias raised by the median margin to it: about half the images change their top-1
    class (so the test sees changed and unchanged predictions)."""
    model = tiny_module().build(len(CLASSES))
    model.load_state_dict(net_a.model.state_dict())
    x = torch.cat([net_a.preprocess(net_a.preprocess.load(p)) for p in sorted(folder.glob("*.png"))])
    with torch.no_grad():
        logits = model(x)
    top = logits.argmax(1)
    other = int(torch.topk(logits, 2, dim=1).indices[:, 1].mode().values)
    margin = (logits.gather(1, top[:, None])[:, 0] - logits[:, other])[top != other]
    with torch.no_grad():
        model.fc.bias[other] += float(margin.median()) + 1e-4
    return load_card(write_card(card_folder, CLASSES, model=model, name="flipped"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Eight noise images; run A (network A: Per-Sample Bottleneck and Gradient), run B (network B, A with a
    flipped bias: the bottleneck)."""
    root = tmp_path_factory.mktemp("paired")
    folder = root / "images"
    write_noise_images(folder, 8)
    net_a = load_card(write_card(root / "card_a", CLASSES))
    net_b = _flipping_net(net_a, folder, root / "card_b")
    run_a = _run(net_a, folder, root / "run_a", [get_method("iba_10", **QUICK), get_method("gradient")])
    run_b = _run(net_b, folder, root / "run_b", [get_method("iba_10", **QUICK)])
    return {"root": root, "folder": folder, "net_a": net_a, "a": run_a, "b": run_b}


def _row(run, image: str, method: str) -> pd.Series:
    t = run.table
    return t[(t["image"] == image) & (t["method"] == method)].iloc[0]


def test_two_networks_differences_by_hand(runs):
    run_a, run_b = open_run(runs["a"]), open_run(runs["b"])
    paired = pair_runs(run_a, run_b)  # defaults: each run's first bits method
    t = paired.table
    assert (paired.method_a, paired.method_b) == ("iba_10", "iba_10")
    assert (paired.score, paired.basis) == ("total_bits", "values")
    assert len(t) == 8 and paired.only_a == paired.only_b == paired.failed == ()
    diffs = []
    for _, r in t.iterrows():
        a, b = _row(run_a, r["image"], "iba_10"), _row(run_b, r["image"], "iba_10")
        assert r["delta_score"] == pytest.approx(b["total_bits"] - a["total_bits"], rel=1e-9)
        assert r["delta_p"] == pytest.approx(b["p_target"] - a["p_target"], rel=1e-9)
        assert r["changed"] == (a["predicted"] != b["predicted"])
        assert r["same_target"] == (a["target"] == b["target"])
        expected = run_b.heatmap(b) - run_a.heatmap(a)
        np.testing.assert_allclose(paired.difference(r), expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())
        assert r["map_change"] == pytest.approx(np.abs(expected).sum(), rel=1e-4)
        diffs.append((int(a["target"]), expected))
    assert 0 < t["changed"].sum() < 8  # the flipped bias changed some predictions, not all
    assert paired.scale == pytest.approx(max(np.abs(d).max() for _, d in diffs), rel=1e-5)
    big = np.abs(t["delta_score"].to_numpy())
    assert (np.diff(big) <= 0).all()  # the most changed first
    for _, c in paired.classes.iterrows():
        members = [d for target, d in diffs if target == c["target"]]
        np.testing.assert_allclose(paired.class_mean(c["target"]), np.mean(members, axis=0), rtol=1e-4, atol=1e-6)
        rows = t[t["target_a"] == c["target"]]
        assert c["images"] == len(members) == len(rows) and c["changed"] == rows["changed"].sum()
        assert c["mean_delta_p"] == pytest.approx(rows["delta_p"].mean())
    assert paired.classes["images"].sum() == 8
    s = paired.summary()
    assert s["matched"] == 8 and s["changed"] == t["changed"].sum() and len(s["top"]) == 8
    assert s["mean_delta_score"] == pytest.approx(t["delta_score"].mean())
    assert s["top"][0]["image"] == t["image"].iloc[0]


def test_two_methods_over_one_run_compare_shares(runs):
    run = open_run(runs["a"])
    paired = pair_runs(run, run, "iba_10", "gradient")
    assert (paired.basis, paired.comparable, paired.score) == ("shares", False, "positive_mass")
    assert paired.table["delta_score"].isna().all() and (paired.table["delta_p"] == 0).all()
    assert not paired.table["changed"].any() and "different units" in paired.notes[0]
    r = paired.table.iloc[0]
    a, b = run.heatmap(_row(run, r["image"], "iba_10")), run.heatmap(_row(run, r["image"], "gradient"))
    expected = b / np.clip(b, 0, None).sum(dtype=np.float64) - a / np.clip(a, 0, None).sum(dtype=np.float64)
    np.testing.assert_allclose(paired.difference(r), expected, rtol=1e-4, atol=1e-9)
    assert r["score_b"] == pytest.approx(np.clip(b, 0, None).sum(dtype=np.float64), rel=1e-6)


def test_folders_match_by_path_with_missing_extra_and_failed_files(runs, tmp_path):
    net = runs["net_a"]
    before, after = tmp_path / "before", tmp_path / "after"
    shutil.copytree(runs["folder"], before)
    (before / "broken.png").write_bytes(b"not a png")  # fails in both runs: in both tables, a map in neither
    shutil.copytree(before, after)
    (after / "img00.png").unlink()
    write_noise_images(after, 1, seed=9, prefix="new")
    gradient = [get_method("gradient")]
    paired = pair_runs(_run(net, before, tmp_path / "ra", gradient), _run(net, after, tmp_path / "rb", gradient))
    assert len(paired.table) == 7 and paired.only_a == ("img00.png",) and paired.only_b == ("new00.png",)
    assert paired.failed == ("broken.png",)
    assert paired.counts == {"matched": 7, "only_a": 1, "only_b": 1, "failed": 1, "changed": 0, "targets_differ": 0}
    assert paired.table["delta_score"].abs().max() == pytest.approx(0, abs=1e-3)  # the same pixels, the same network
    with pytest.raises(UserError, match="method 'iba_10'; it has gradient"):
        pair_runs(tmp_path / "ra", tmp_path / "rb", method_a="iba_10")


def test_nothing_matched_is_refused_with_the_counts(runs, tmp_path):
    other = tmp_path / "other"
    write_noise_images(other, 3, seed=3, prefix="x")
    run_b = _run(runs["net_a"], other, tmp_path / "rb", [get_method("gradient")])
    with pytest.raises(UserError) as caught:
        pair_runs(runs["a"], run_b, method_a="gradient")
    assert str(caught.value) == (f"No image of {run_b} matches {runs['a']} by its path: A has 8 images, B has 3, "
                                 "none in common.")


def test_written_files_hold_the_table_and_the_maps(runs, tmp_path):
    paired = pair_runs(runs["a"], runs["b"])
    files = write_paired(paired, tmp_path / "out")
    assert {p.name for p in files.values()} == {PAIRED_FILE, CLASSES_FILE, SUMMARY_FILE, MAPS_FILE, REPORT_FILE}
    table = pd.read_parquet(files["table"])
    assert list(table["image"]) == list(paired.table["image"])
    np.testing.assert_allclose(table["delta_p"], paired.table["delta_p"])
    for (_, r), stored in zip(table.iterrows(), read_maps(files["maps"], table)):
        exact = paired.difference(r)
        np.testing.assert_allclose(stored, exact, atol=np.abs(exact).max() * 1e-3)  # float16 of map / max|map|
    classes = pd.read_parquet(files["classes"])
    for (_, c), stored in zip(classes.iterrows(), read_maps(files["maps"], classes, prefix="c")):
        exact = paired.class_mean(c["target"])
        np.testing.assert_allclose(stored, exact, atol=np.abs(exact).max() * 1e-3)
    summary = json.loads(files["summary"].read_text())
    assert summary["matched"] == 8 and summary["changed"] == int(paired.table["changed"].sum())
    html = files["report"].read_text()
    assert html.count("data:image/png;base64,") == 8 + len(classes) and "B − A" in html


def test_signed_map_is_white_at_zero_red_above_blue_below():
    from io import BytesIO

    from PIL import Image

    from iba_core.render.paired import signed_map_png

    values = np.zeros((4, 4), dtype=np.float32)
    values[0, 0], values[3, 3] = 2.0, -2.0
    picture = np.asarray(Image.open(BytesIO(signed_map_png(values, 2.0, "bits/pixel", size=40))).convert("RGB"))
    zero, high, low = picture[20, 20], picture[2, 2], picture[37, 37]
    assert (zero >= 250).all()  # zero is white
    assert high[0] > 150 and high[2] < 50 and low[2] > 150 and low[0] < 50  # red above, blue below


def test_cli_prints_one_json_line_and_writes_the_files(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare-runs", str(runs["a"]), str(runs["b"]), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    paired = pair_runs(runs["a"], runs["b"])
    assert (line["matched"], line["only_a"], line["only_b"]) == (8, 0, 0)
    assert line["changed"] == int(paired.table["changed"].sum())
    assert line["mean_delta_p"] == pytest.approx(paired.table["delta_p"].mean())
    assert [r["image"] for r in line["top"]] == list(paired.table["image"])
    assert all(Path(p).is_file() for p in line["files"].values()) and set(line["files"]) == {
        "table", "classes", "summary", "maps", "report"}
    assert main(["compare-runs", str(runs["a"]), str(runs["b"]), "--out", str(out), "--method-b", "gradient"]) == 1
    assert "Run B" in capsys.readouterr().err


def test_cli_refuses_an_output_file_before_reading_the_runs(tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    code = main(["compare-runs", str(tmp_path / "nowhere_a"), str(tmp_path / "nowhere_b"), "--out",
                 str(tmp_path / "taken")])
    assert code == 1 and "is an existing file" in capsys.readouterr().err  # not "Run folder not found"


def test_maps_of_two_sizes_are_refused_not_resampled(runs):
    run_a, run_b = open_run(runs["a"]), open_run(runs["b"])
    first = run_b.table.index[run_b.table["image"] == "img03.png"]
    run_b.table.loc[first, ["height", "width"]] = 32  # as a run made at a 32-px crop records its maps
    with pytest.raises(UserError, match=r"maps of 1 matched image\(s\) differ in size \(img03.png: 64×64 in A, "
                                        r"32×32 in B\)"):
        pair_runs(run_a, run_b)


def test_cli_names_a_missing_run_in_one_line(runs, tmp_path, capsys):
    assert main(["compare-runs", str(runs["a"]), str(tmp_path / "gone"), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gone" in err and "Traceback" not in err


def test_cli_refuses_to_write_into_a_run_folder(runs, tmp_path, capsys):
    before = sorted(p.name for p in Path(runs["a"]).iterdir())
    assert main(["compare-runs", str(runs["a"]), str(runs["b"]), "--out", str(runs["a"])]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a run folder (it holds run.json)" in err
    assert sorted(p.name for p in Path(runs["a"]).iterdir()) == before  # nothing written into run A
    with pytest.raises(UserError, match="is a run folder"):  # the library refuses it too
        write_paired(pair_runs(runs["a"], runs["b"]), runs["b"])
