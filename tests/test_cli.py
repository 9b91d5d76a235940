"""`python -m iba_core …` as a user runs it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iba_core.cli import main
from iba_core.images import load_sample

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def chelsea_jpg(tmp_path_factory):
    path = tmp_path_factory.mktemp("img") / "chelsea.jpg"
    load_sample("chelsea").save(path, quality=95)
    return path


def test_attribute_subprocess_prints_one_correct_json_line(chelsea_jpg, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out, png = tmp_path / "h.npy", tmp_path / "o.png"
    proc = subprocess.run(
        [sys.executable, "-m", "iba_core", "attribute", str(chelsea_jpg), "--n", "96", "--out", str(out),
         "--png", str(png)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary["model"] == "efficientnet_lite0" and summary["layer"] == "block3_2"
    assert summary["target"] == 285 and summary["class_name"] == "Egyptian cat"
    assert 0 < summary["p_without"] <= 1 and 0 <= summary["p_with"] <= 1
    heatmap = np.load(out)
    assert heatmap.shape == (224, 224)
    assert summary["total_bits"] == pytest.approx(float(heatmap.sum()), rel=1e-3)
    width, height = Image.open(png).size
    assert width == 224 and height > 224  # the crop, and the legend of its scale below it


def test_attribute_with_named_target_and_settings(chelsea_jpg, capsys):
    code = main(["attribute", str(chelsea_jpg), "--n", "96", "--target", "tabby", "--steps", "2",
                 "--beta-k", "100", "--seed", "1"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["target"] == 281 and summary["beta_k"] == 100
    # tabby is the runner-up: the JSON names the network's own top-1 and says the target is not it
    assert (summary["predicted"], summary["predicted_name"]) == (285, "Egyptian cat")
    assert "not the network's top prediction" in summary["target_note"]


def test_attribute_json_has_no_note_for_a_recognised_image(chelsea_jpg, capsys):
    assert main(["attribute", str(chelsea_jpg), "--n", "96", "--steps", "1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["predicted"] == summary["target"] == 285 and "target_note" not in summary
    # the precision that ran, as the page says it (never "auto"), and the one asked for beside it, as the reports
    assert summary["precision"] in ("fp32", "bf16", "fp16") and summary["precision_asked"] == "auto"
    assert main(["attribute", str(chelsea_jpg), "--n", "96", "--steps", "1", "--batch", "2",
                 "--precision", "fp32"]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert (summary["precision"], summary["precision_asked"]) == ("fp32", "fp32")


def test_progress_bar_only_while_statistics_are_computed(chelsea_jpg, capsys, tmp_path, monkeypatch):
    # a cache of its own: statistics of block4_1 that an earlier test estimated (CoIBA's ranges) would be found
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    argv = ["attribute", str(chelsea_jpg), "--layer", "block4_1", "--n", "12", "--steps", "1"]
    assert main(argv) == 0
    assert "statistics efficientnet_lite0/block4_1" in capsys.readouterr().err  # computed: a bar
    assert main(argv) == 0
    assert "statistics" not in capsys.readouterr().err  # cached: silent, no empty bar


def test_models_lists_every_network(capsys):
    assert main(["models", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["model"] for r in rows} == {"efficientnet_lite0", "resnet50", "vgg16"}
    lite = next(r for r in rows if r["model"] == "efficientnet_lite0")
    assert "weights found" in lite["weights"] and "block3_2" in lite["layers"]


def test_stats_command(capsys):
    assert main(["stats", "--layer", "block2_2", "--n", "24"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["samples"] == 24 and row["rough"] and row["shape"] == [24, 56, 56]


def test_stats_command_says_when_a_folder_gave_fewer_samples_than_asked_for(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    assert main(["stats", "--layer", "block2_2", "--images", str(tmp_path), "--n", "200"]) == 0
    out = capsys.readouterr()
    row = json.loads(out.out.strip().splitlines()[-1])
    assert row["samples"] == 3 and row["samples_asked"] == 200
    assert "200 samples were asked for, but the folder gave only 3 usable images, so all 3 were used" in out.err


@pytest.mark.parametrize("argv, words", [
    (["attribute", "missing.jpg"], "not found"),
    (["attribute", "{bad}", "--layer", "conv3_4"], "no layer"),
    (["attribute", "{img}", "--target", "no such class"], "No class named"),
])
def test_user_errors_are_one_line_not_a_traceback(argv, words, chelsea_jpg, tmp_path, capsys):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"hello")
    argv = [a.replace("{bad}", str(chelsea_jpg)).replace("{img}", str(chelsea_jpg)) for a in argv]
    assert main(argv + ["--n", "24"]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_corrupt_image_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"hello")
    assert main(["attribute", str(bad)]) == 1
    assert "error:" in capsys.readouterr().err


def test_offline_network_without_weights_explains(tmp_path, monkeypatch, chelsea_jpg, capsys):
    from iba_core.networks import weights

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(weights, "_reachable", lambda url, timeout=3.0: False)
    assert main(["attribute", str(chelsea_jpg), "--model", "resnet50"]) == 1
    err = capsys.readouterr().err
    assert "resnet50-0676ba61.pth" in err and "EfficientNet-Lite0" in err and "--weights FILE" in err


def test_attribute_with_the_shipped_readout(chelsea_jpg, capsys):
    assert main(["attribute", str(chelsea_jpg), "--method", "readout"]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["method"] == "readout" and summary["layer"] == "block2_2"
    assert summary["target"] == 285 and summary["total_bits"] > 0 and summary["stats_samples"] is None


def test_mismatched_readout_checkpoint_is_a_clear_error(chelsea_jpg, capsys):
    from pathlib import Path as _P

    ckpt = _P(__file__).resolve().parents[1] / "assets" / "readout_efficientnet_lite0.pt"
    assert main(["attribute", str(chelsea_jpg), "--method", "readout", "--readout", str(ckpt),
                 "--model", "resnet50", "--random-weights"]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_every_offline_layer_runs_without_estimating_statistics(chelsea_jpg, monkeypatch, capsys):
    """Fresh cache: the shipped statistics cover every layer, so no `attribute --layer L` estimates any."""
    from iba_core import feature_stats as stats_mod
    from iba_core.networks import get_spec

    monkeypatch.setattr(stats_mod, "compute_all_stats", lambda *a, **k: pytest.fail("estimated statistics"))
    # `attribute IMG` honours IBA_STATS_SAMPLES like every run (issue #26.2); the suite sets it to 96
    monkeypatch.delenv("IBA_STATS_SAMPLES", raising=False)
    for layer in get_spec("efficientnet_lite0").layers:
        assert main(["attribute", str(chelsea_jpg), "--layer", layer, "--steps", "1", "--batch", "2",
                     "--precision", "fp32"]) == 0
        record = json.loads(capsys.readouterr().out.strip())
        assert record["layer"] == layer and record["stats_samples"] == 1000


# ---- report RUN_DIR --out report.html (issue #28) -----------------------------------------------------------


@pytest.mark.parametrize("make, words", [
    (lambda d: None, "Run folder not found"),
    (lambda d: d.mkdir(), "is not a run folder"),
    (lambda d: (d.mkdir(), (d / "run.json").write_text('{"format": 1, "network": "card:tin')), "is damaged"),
    (lambda d: (d.mkdir(), (d / "run.json").write_bytes(b"\xff\xfe\x00garbage")), "is damaged"),
])
def test_report_of_a_missing_or_damaged_run_is_one_sentence(make, words, tmp_path, capsys):
    run_dir = tmp_path / "run"
    make(run_dir)
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and words in err and len(err.splitlines()) == 1
    assert "Traceback" not in err and "Error)" not in err and "JSONDecodeError" not in err
    assert not out.exists()


def test_report_is_a_listed_command():
    from iba_core.cli import build_parser

    args = build_parser().parse_args(["report", "RUN", "--out", "r.html"])
    assert args.run_dir == "RUN" and args.out == "r.html" and args.method is None


def test_compare_all_counts_the_methods_it_runs(chelsea_jpg, tmp_path, capsys):
    """`--methods all`: the progress bar's total is the number of methods run on this network (4 here: one of
    the five registered cannot run on it), not len("all") = 3."""
    from iba_core.methods import METHODS, Method

    class NeverHere(Method):
        key = "never_here"
        name = "Never here"
        description = "A method no network can run (for this test)."

        def available_for(self, network) -> str | None:
            return "This method runs on no network."

        def _compute(self, network, x, target):
            raise AssertionError("an unavailable method must not run")

    kept = ("random", "gradient", "saliency", "grad_cam")
    registered = dict(METHODS)  # restored as it was, order included (the order is the grids' display order)
    METHODS.clear()
    METHODS.update({key: registered[key] for key in kept}, never_here=NeverHere)
    try:
        assert main(["compare", str(chelsea_jpg), "--methods", "all", "--out", str(tmp_path / "out")]) == 0
    finally:
        METHODS.clear()
        METHODS.update(registered)
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])["methods"] == list(kept)
    # tqdm redraws the bar with \r; its last state is after the last \r: "compare: 100%|…| 4/4 […]"
    last = captured.err.replace("\n", "\r").split("\r")
    last = [line for line in last if line.startswith("compare")][-1]
    assert f"{len(kept)}/{len(kept)} " in last and "100%" in last, last


# ---- CoIBA: --method coiba / --methods … coiba with --layer-range FIRST:LAST (issue #30) ----------------------
#: Two 7 × 7 layers of the offline network: a short range keeps each CoIBA fit quick on a CPU.
SHORT_RANGE = "block6_4:block7_1"
#: CoIBA's key at that range (the method's key names settings other than its defaults: the range here).
SHORT_KEY = "coiba_1__block6_4-block7_1"


@pytest.mark.parametrize("text, expected", [
    ("block3_2:block7_1", ("block3_2", "block7_1")),
    (" stem : head ", ("stem", "head")),
    ("vision_model.encoder.layers.3:vision_model.encoder.layers.11",
     ("vision_model.encoder.layers.3", "vision_model.encoder.layers.11")),
])
def test_layer_range_parses_first_and_last(text, expected):
    from iba_core.cli.common import layer_range_arg

    assert layer_range_arg(text) == expected


@pytest.mark.parametrize("text", ["block3_2", "block3_2:", ":block7_1", "a:b:c", ""])
def test_a_layer_range_not_first_colon_last_is_refused_with_an_example(text, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["attribute", "x.jpg", "--method", "coiba", "--layer-range", text])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "FIRST:LAST" in err and "block3_2:block7_1" in err and "Traceback" not in err


def test_help_says_in_one_line_what_coiba_is(capsys):
    for command in ("attribute", "compare", "evaluate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
        assert "coiba: CoIBA (Hong et al., CVPR 2025), one mask shared by bottlenecks at every layer" in text
        assert "--layer-range FIRST:LAST" in text


def test_attribute_coiba_over_a_range(chelsea_jpg, tmp_path, capsys):
    out = tmp_path / "coiba.npy"
    assert main(["attribute", str(chelsea_jpg), "--method", "coiba", "--layer-range", SHORT_RANGE, "--steps", "2",
                 "--batch", "2", "--n", "96", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    assert summary["method"] == "coiba"
    assert summary["layers"] == ["block6_4", "block7_1"] and summary["layer"] == "block6_4"
    assert summary["target"] == 285 and summary["beta_k"] == 1  # the authors' β (coiba.CoIBASettings)
    heatmap = np.load(out)
    assert heatmap.shape == (224, 224) and (heatmap >= 0).all()
    assert summary["total_bits"] == pytest.approx(float(heatmap.sum()), rel=1e-3)
    assert 0 < summary["p_without"] <= 1 and 0 <= summary["p_with"] <= 1


def test_attribute_coiba_default_range_names_every_layer(chelsea_jpg, capsys):
    from iba_core.coiba import default_range, layer_range
    from iba_core.networks import load_network

    assert main(["attribute", str(chelsea_jpg), "--method", "coiba", "--steps", "1", "--batch", "1",
                 "--n", "96"]) == 0
    summary = json.loads(capsys.readouterr().out.strip())
    network = load_network("efficientnet_lite0")
    assert summary["layers"] == layer_range(network, *default_range(network))
    assert len(summary["layers"]) > 2 and summary["layer"] == summary["layers"][0]


@pytest.mark.parametrize("argv, words", [
    (["--method", "coiba", "--layer", "block3_2"], "CoIBA spans a range of layers"),
    (["--layer-range", SHORT_RANGE], "--layer-range sets CoIBA's layers, but --method is per-sample"),
    (["--method", "coiba", "--layer-range", "block7_1:block6_4"], "block7_1"),
    (["--method", "coiba", "--layer-range", "block6_4:no_such_layer"], "no layer 'no_such_layer'"),
])
def test_coiba_layer_mistakes_are_one_sentence(argv, words, chelsea_jpg, capsys):
    assert main(["attribute", str(chelsea_jpg), "--n", "24", "--steps", "1", *argv]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and words in err and "Traceback" not in err


def test_compare_runs_coiba_over_the_given_range(chelsea_jpg, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(chelsea_jpg), "--methods", "saliency,coiba", "--layer-range", SHORT_RANGE,
                 "--layer", "block4_1", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["methods"] == ["saliency", SHORT_KEY]
    summary = json.loads((out / "summary.json").read_text())
    coiba = next(m for m in summary["methods"] if m["key"] == SHORT_KEY)
    assert coiba["extra"]["layers"] == ["block6_4", "block7_1"] and coiba["unit"] == "bits/pixel"
    assert np.load(out / coiba["file"]).sum() == pytest.approx(coiba["extra"]["total_bits"], rel=1e-3)


def test_compare_refuses_a_range_no_chosen_method_takes(chelsea_jpg, tmp_path, capsys):
    assert main(["compare", str(chelsea_jpg), "--methods", "saliency,iba_10", "--layer-range", SHORT_RANGE,
                 "--out", str(tmp_path / "cmp")]) == 1
    err = capsys.readouterr().err
    assert "none of the chosen methods is CoIBA" in err and not (tmp_path / "cmp").exists()


def test_evaluate_insertion_with_coiba(chelsea_jpg, tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    (images / "chelsea.jpg").write_bytes(chelsea_jpg.read_bytes())
    out = tmp_path / "ev.jsonl"
    assert main(["evaluate", "insertion", "--images", str(images), "--methods", "coiba", "--layer-range",
                 SHORT_RANGE, "--out", str(out), "--no-progress", "--step", "3136"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and {r["method"] for r in rows} == {SHORT_KEY}
    assert main(["evaluate", "insertion", "--images", str(images), "--methods", "saliency", "--layer-range",
                 SHORT_RANGE, "--out", str(tmp_path / "ev2.jsonl")]) == 1
    assert "none of the chosen methods is CoIBA" in capsys.readouterr().err


def test_folder_run_with_coiba(chelsea_jpg, tmp_path, capsys):
    from iba_core.runs import open_run

    images = tmp_path / "images"
    images.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (images / name).write_bytes(chelsea_jpg.read_bytes())
    run_dir = tmp_path / "run"
    assert main(["attribute", str(images), "--out", str(run_dir), "--methods", "iba_10", "coiba", "--layer-range",
                 SHORT_RANGE, "--steps", "2", "--batch", "2", "--n", "96", "--no-progress"]) == 0
    record = json.loads(capsys.readouterr().out.strip())
    assert record["methods"] == ["iba_10", SHORT_KEY] and record["rows"] == 4 and record["errors"] == 0
    run = open_run(run_dir)
    coiba = run.table[run.table["method"] == SHORT_KEY]
    assert len(coiba) == 2 and (coiba["total_bits"] > 0).all()
    assert run.info["methods"][SHORT_KEY]["settings"]["layers"] == ["block6_4", "block7_1"]
    assert run.info["layer"] == "block3_2"  # iba_10's, the first bottleneck method
    heatmap = run.heatmap(coiba.iloc[0])
    assert float(heatmap.sum()) == pytest.approx(float(coiba.iloc[0]["total_bits"]), rel=1e-2)  # float16 maps


def test_folder_run_with_the_m2ib_preset_takes_the_commands_settings(chelsea_jpg, tmp_path, capsys):
    """`--methods m2ib` (a preset beside the registry's keys) gets --steps and --batch like every bottleneck."""
    from iba_core.runs import open_run

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(chelsea_jpg.read_bytes())
    run_dir = tmp_path / "run"
    assert main(["attribute", str(images), "--out", str(run_dir), "--methods", "m2ib", "--steps", "2", "--batch",
                 "2", "--no-progress"]) == 0
    record = json.loads(capsys.readouterr().out.strip())
    assert record["methods"] == ["m2ib"] and record["rows"] == 1 and record["errors"] == 0
    settings = open_run(run_dir).info["methods"]["m2ib"]["settings"]
    assert (settings["steps"], settings["batch"], settings["prior"]) == (2, 2, "standard_normal")


def test_folder_run_with_method_coiba(chelsea_jpg, tmp_path, capsys):
    from iba_core.runs import open_run

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(chelsea_jpg.read_bytes())
    run_dir = tmp_path / "run"
    assert main(["attribute", str(images), "--out", str(run_dir), "--method", "coiba", "--layer-range",
                 SHORT_RANGE, "--steps", "1", "--batch", "1", "--beta-k", "100", "--no-progress"]) == 0
    methods = json.loads(capsys.readouterr().out.strip())["methods"]
    run = open_run(run_dir)
    (key,) = run.info["methods"]
    assert methods == [key] and key.startswith("coiba") and key != "coiba"  # its key names the settings
    assert run.info["methods"][key]["settings"]["beta_k"] == 100
    assert run.info["layer"] == "block6_4"  # CoIBA's first layer, where its information is counted


@pytest.mark.parametrize("metric, option, value, words", [
    ("insertion", "--step", "123456789012345678901234567890", "at most 100,000,000 pixels a step"),
    ("insertion", "--blur-sigma", "1e-200", "between 0.1 and 1000 pixels"),
    ("road", "--noise", "1e308", "from 0 to 100"),
])
def test_evaluate_refuses_numbers_that_give_no_finite_result(tmp_path, capsys, metric, option, value, words):
    """Issue #40, no silent numbers: each was an empty table with exit 0, or an internal error (exit 70)."""
    code = main(["evaluate", metric, "--images", str(tmp_path), "--out", str(tmp_path / "out"), option, value])
    err = capsys.readouterr().err
    assert code == 1 and words in err and err.count("\n") <= 2, err


# ---- --methods: one reading for every command (#38: `compare --methods a,b` and `evaluate --methods a b` differed) --


@pytest.mark.parametrize("given", [["random,gradient"], ["random", "gradient"], ["random,", "gradient"],
                                   ["random, gradient"], ["random", "gradient,random"]])
def test_every_command_reads_methods_the_same_way(given):
    from iba_core.cli import build_parser
    from iba_core.cli.common import method_keys_arg

    parser = build_parser()
    for command in (["compare", "x.jpg", "--out", "o"], ["evaluate", "insertion", "--out", "o.jsonl"],
                    ["attribute", "folder", "--out", "run"]):
        args = parser.parse_args([*command, "--methods", *given])
        assert method_keys_arg(args.methods) == ["random", "gradient"], (command, given)


def test_methods_naming_no_key_is_one_sentence(chelsea_jpg, tmp_path, capsys):
    from iba_core.cli.common import names_all

    assert names_all(["all"]) and names_all(["saliency", "all"]) and not names_all(["saliency"])
    assert not names_all(None)
    assert main(["compare", str(chelsea_jpg), "--methods", ",", "--out", str(tmp_path / "cmp")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --methods names no method.") and "Traceback" not in err


def test_compare_takes_methods_separated_by_spaces(chelsea_jpg, tmp_path, capsys):
    assert main(["compare", str(chelsea_jpg), "--methods", "random", "gradient", "--out", str(tmp_path / "cmp")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["methods"] == ["random", "gradient"]


def test_evaluate_takes_methods_separated_by_commas(chelsea_jpg, tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    (images / "chelsea.jpg").write_bytes(chelsea_jpg.read_bytes())
    out = tmp_path / "ev.jsonl"
    assert main(["evaluate", "insertion", "--images", str(images), "--methods", "random,gradient", "--out", str(out),
                 "--no-progress", "--step", "3136"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["method"] for r in rows} == {"random", "gradient"}


def test_compare_names_a_failing_method_a_bug_or_a_mistake(chelsea_jpg, tmp_path, monkeypatch, capsys):
    """A method that fails by a bug is said to be one in summary.json (its traceback on stderr); one that fails by
    the user's choice keeps its sentence."""
    from iba_core.errors import UserError
    from iba_core.methods import get_method

    def broken(self, network, x, target, *args, **kwargs):
        raise RuntimeError("injected bug")

    def refused(self, network, x, target, *args, **kwargs):
        raise UserError("This method needs something you did not give.")

    monkeypatch.setattr(type(get_method("random")), "attribute", broken)
    monkeypatch.setattr(type(get_method("gradient")), "attribute", refused)
    out = tmp_path / "cmp"
    assert main(["compare", str(chelsea_jpg), "--methods", "random", "gradient", "saliency", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    failed = json.loads((out / "summary.json").read_text())["failed"]
    assert "this is a bug" in failed["random"] and "injected bug" not in failed["random"]
    assert "Traceback" in err and "RuntimeError: injected bug" in err
    assert failed["gradient"] == "This method needs something you did not give."


def test_attribute_builds_one_request_the_page_builds_too(tmp_path):
    """`attribute`'s options are read once into one request; its bottleneck is the library's BottleneckRequest, equal
    to what the Per-Sample page builds from the same choices, so both reach the same method."""
    from iba_core.cli import build_parser
    from iba_core.cli.attribute import request_of
    from iba_core.coiba import CoIBASettings
    from iba_core.methods import BottleneckRequest
    from iba_core.per_sample import BottleneckSettings

    args = build_parser().parse_args(["attribute", "cat.png", "--method", "coiba", "--layer-range", "block3_2:block7_1",
                                      "--beta-k", "3", "--steps", "4", "--stats-images", str(tmp_path)])
    request = request_of(args)
    page = BottleneckRequest(CoIBASettings(beta_k=3, steps=4), layer_range=("block3_2", "block7_1"),
                             stats_images=str(tmp_path))
    assert request.bottleneck == page and request.beta_k_given
    mine, theirs = request.bottleneck.method(), page.method()
    assert (mine.key, mine.settings) == (theirs.key, theirs.settings) and mine.key.startswith("coiba")
    plain = request_of(build_parser().parse_args(["attribute", "cat.png", "--layer", "block4_1"]))
    assert plain.bottleneck == BottleneckRequest(BottleneckSettings(), layer="block4_1") and not plain.beta_k_given
    assert request_of(build_parser().parse_args(["attribute", "cat.png", "--method", "readout"])).bottleneck is None
