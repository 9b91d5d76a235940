"""Folder runs with text prompts (a CLIP model, issue #30): a row per image × method × prompt with a `prompt` column
and the prompt's index in the run as the target; resume; a later run adds a prompt; refusals; the CLI."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iba_core import open_run
from iba_core.cli import main
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.runs import FolderSettings, finish_run, list_images, run_folder

#: Quick Per-Sample settings (2 steps, 2 noisy copies); statistics from 16 crops.
QUICK = {"steps": 2, "batch": 2, "precision": "fp32", "stats_samples": 16}
CLI_QUICK = ["--steps", "2", "--batch", "2", "--precision", "fp32", "--n", "16", "--no-progress"]


@pytest.fixture
def images(tmp_path):
    """Four random 40-px PNGs (one in a class folder: its name must not become a label of a prompt run)."""
    folder = tmp_path / "images"
    (folder / "cats").mkdir(parents=True)
    rng = np.random.default_rng(3)
    for i, name in enumerate(["a.png", "b.png", "c.png", "cats/d.png"]):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(folder / name)
    return folder


def iba(**overrides):
    return get_method("iba_10", **{**QUICK, "beta_k": 0.1, **overrides})


def crop(network, path: Path) -> torch.Tensor:
    pre = network.preprocess
    return pre.normalise(pre.crop(pre.load(path)))


def test_a_prompt_run_has_a_row_per_image_method_and_prompt(clip_net, images, tmp_path):
    root, items = list_images(images)
    out = tmp_path / "run"
    summary = run_folder(clip_net, items, [iba(), get_method("gradient")], out,
                         FolderSettings(prompts=(" a cat ", "a  dog")), root=root)
    assert summary.rows == 4 * 2 * 2 and summary.errors == 0
    table = finish_run(out)
    info = json.loads((out / "run.json").read_text())
    assert info["prompts"] == ["a cat", "a dog"] and info["settings"]["targets"] == "prompts"
    assert len(table) == 16 and set(table["prompt"]) == {"a cat", "a dog"}
    assert (table["target"] == table["prompt"].map({"a cat": 0, "a dog": 1})).all()
    assert (table["class_name"] == table["prompt"]).all()
    assert table["label"].isna().all() and table["correct"].isna().all()  # the class folder names no prompt
    run = open_run(out)
    for _, row in run.table.iterrows():
        x = crop(clip_net, run.image_path(row))
        with torch.no_grad():
            cosines = clip_net.model(x)[0]
        index = clip_net.prompt_index(row["prompt"])
        # p_target is the image's cosine with the row's prompt; predicted the run's prompt nearest the image
        assert row["p_target"] == pytest.approx(float(cosines[index]), rel=1e-4, abs=1e-6)
        best = max(info["prompts"], key=lambda p: float(cosines[clip_net.prompt_index(p)]))
        assert row["predicted_name"] == best and row["predicted"] == info["prompts"].index(best)
        if row["method"] == "gradient":  # the stored map is the method's own for the prompt (float16 kept)
            expected = get_method("gradient").attribute(clip_net, x, index).values
            np.testing.assert_allclose(run.heatmap(row), expected, rtol=2e-3, atol=np.abs(expected).max() * 2e-3)
        else:
            assert row["total_bits"] > 0 and row["p_without"] == row["p_target"]
    bits = run.table[(run.table["method"] == "iba_0_1") & (run.table["image"] == "a.png")].set_index("prompt")
    cat, dog = (run.heatmap(bits.loc[p]) for p in ("a cat", "a dog"))
    assert not np.allclose(cat, dog)  # each prompt its own map


def test_a_rerun_with_another_prompt_adds_only_its_rows(clip_net, images, tmp_path):
    root, items = list_images(images)
    out = tmp_path / "run"
    methods = [get_method("gradient")]
    first = run_folder(clip_net, items, methods, out, FolderSettings(prompts=("a ruler",)), root=root)
    assert first.rows == 4
    before = open_run(out).table.set_index("image")["finished"]
    again = run_folder(clip_net, items, methods, out, FolderSettings(prompts=("a ruler",)), root=root)
    assert again.rows == 0 and again.skipped == 4  # resumed: nothing to do
    more = run_folder(clip_net, items, methods, out, FolderSettings(prompts=("a watermark", "a ruler")), root=root)
    assert more.rows == 4  # only the new prompt's rows
    table = finish_run(out)
    assert json.loads((out / "run.json").read_text())["prompts"] == ["a ruler", "a watermark"]
    assert len(table) == 8
    assert (table["target"] == table["prompt"].map({"a ruler": 0, "a watermark": 1})).all()
    ruler = table[table["prompt"] == "a ruler"].set_index("image")["finished"]
    assert ruler.sort_index().equals(before.sort_index())  # the first prompt's rows were not made again


def test_prompt_runs_refuse_what_cannot_work(clip_net, tiny_net, images, tmp_path):
    root, items = list_images(images)
    gradient = [get_method("gradient")]
    with pytest.raises(UserError, match="Text prompts need a CLIP model"):
        run_folder(tiny_net, items, gradient, tmp_path / "a", FolderSettings(prompts=("a cat",)), root=root)
    with pytest.raises(UserError, match="empty"):
        run_folder(clip_net, items, gradient, tmp_path / "b", FolderSettings(prompts=("   ",)), root=root)
    with pytest.raises(UserError, match="prompts or a class"):
        run_folder(clip_net, items, gradient, tmp_path / "c", FolderSettings(prompts=("a cat",), target=0),
                   root=root)
    with pytest.raises(UserError, match="A CLIP model explains text prompts"):  # no prompt: nothing to explain
        run_folder(clip_net, items, gradient, tmp_path / "d", FolderSettings(), root=root)
    assert not (tmp_path / "d").exists()
def test_the_cli_runs_a_folder_with_prompts(clip_folder, images, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["attribute", str(images), "--model", f"clip:{clip_folder}", "--prompt", "a cat", "--prompt", "a dog",
            "--out", str(out), "--methods", "gradient", *CLI_QUICK]
    assert main(args) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["prompts"] == ["a cat", "a dog"] and line["rows"] == 8 and line["errors"] == 0
    assert main(args) == 0  # resumed
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["new_rows"] == 0
    (images / "labels.txt").write_text("a.png,0\n")
    assert main([*args, "--labels", str(images / "labels.txt")]) != 0
    assert "--labels names the images' classes" in capsys.readouterr().err
    # without --methods and --beta-k: the Per-Sample Bottleneck at the head's β·k (M2IB's 0.1 for a CLIP model)
    assert main(["attribute", str(images), "--model", f"clip:{clip_folder}", "--prompt", "a cat", "--limit", "1",
                 "--out", str(tmp_path / "default"), *CLI_QUICK]) == 0
    info = json.loads((tmp_path / "default" / "run.json").read_text())
    assert list(info["methods"]) == ["iba_0_1"] and info["methods"]["iba_0_1"]["settings"]["beta_k"] == 0.1
