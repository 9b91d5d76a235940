"""The Dataset page's prompt search (issue #30), without Streamlit: a CLIP run's images ranked by the bits their
map needs for one of its prompts, a prompt the run lacks refused with the command that adds it — and that command
adds it."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from iba_core.app import prompt_search as ps  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.methods import get_method  # noqa: E402
from iba_core.runs import FolderSettings, finish_run, list_images, open_run, run_folder  # noqa: E402
from iba_core.runs.store import as_table  # noqa: E402
from iba_core.runs.tables import Run  # noqa: E402

QUICK = {"steps": 2, "batch": 2, "precision": "fp32", "stats_samples": 16}


@pytest.fixture(scope="module")
def prompt_run(clip_folder, tmp_path_factory) -> Path:
    from iba_core.networks import load_network

    images = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(11)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(images / f"img{i}.png")
    root, items = list_images(images)
    out = tmp_path_factory.mktemp("runs") / "run"
    run_folder(load_network(f"clip:{clip_folder}"), items,
               [get_method("iba_10", beta_k=0.1, **QUICK), get_method("gradient")], out,
               FolderSettings(prompts=("a cat", "a dog")), root=root)
    finish_run(out)
    return out


def test_a_prompt_ranks_the_runs_images_by_bits(prompt_run):
    run = open_run(prompt_run)
    assert ps.run_prompts(run) == ["a cat", "a dog"]
    found = ps.search_prompt(run, "  A   CAT ")  # spaces and case as typed
    assert found.prompt == "a cat" and found.method == "iba_0_1" and found.by == "total_bits"
    assert len(found.rows) == 4 and set(found.rows["prompt"]) == {"a cat"}
    bits = found.rows["total_bits"].to_numpy()
    assert (np.diff(bits) <= 0).all() and bits[-1] > 0  # most bits first
    by_similarity = ps.search_prompt(run, "a dog", "gradient")  # maps not in bits: the highest similarity first
    assert by_similarity.by == "p_target" and (np.diff(by_similarity.rows["p_target"].to_numpy()) <= 0).all()
    caption = ps.prompt_caption(found.rows.iloc[0], 1, found.by)
    assert caption.startswith(f"1. {found.rows.iloc[0]['image']} · ") and " bits · similarity " in caption


def test_what_a_search_cannot_find_it_says(prompt_run):
    run = open_run(prompt_run)
    with pytest.raises(UserError, match="Type a prompt"):
        ps.search_prompt(run, "   ")
    with pytest.raises(UserError, match="holds no maps for the prompt “a watermark” \\(its prompts: a cat, a dog\\)"):
        ps.search_prompt(run, "a watermark")
    classes = Run(prompt_run, {"methods": {}}, as_table([{"image": "a.png", "method": "iba_10", "target": 3, "map_index": -1, "rank": 0, "finished": 0.0}]))
    assert ps.run_prompts(classes) == []
    with pytest.raises(UserError, match="explains classes, not text prompts"):
        ps.search_prompt(classes, "a cat")


def test_the_command_for_a_missing_prompt_adds_it(prompt_run, clip_folder, capsys):
    from iba_core.cli import main

    run = open_run(prompt_run)
    command = ps.add_prompt_command(run, "a watermark")
    # the run's network is keyed by its folder's name, which no command takes: the text says what stands for it
    assert ps.MODEL_PLACEHOLDER in command and ps.MODEL_PLACEHOLDER in ps.missing_prompt_text(run, "a watermark")
    args = shlex.split(command.replace(ps.MODEL_PLACEHOLDER, f"clip:{clip_folder}"))
    assert args[:4] == ["python", "-m", "iba_core", "attribute"]
    assert args[args.index("--steps") + 1] == "2" and args[args.index("--n") + 1] == "16"  # run.json's settings
    assert main([*args[3:], "--no-progress"]) == 0
    table = open_run(prompt_run).table
    added = table[table["prompt"] == "a watermark"]
    assert len(added) == 8 and added["error"].isna().all() and (added["target"] == 2).all()
    assert ps.run_prompts(open_run(prompt_run)) == ["a cat", "a dog", "a watermark"]


def test_a_served_page_names_the_runs_folders_relative_to_the_allowed_folder(prompt_run, monkeypatch):
    """Issue #40, item 5: the Dataset page's command that adds a prompt showed the server's absolute paths (the
    run folder, its images); a served app names them relative to the allowed folder. Item 8: the sentence is
    plain text, no Markdown emphasis (the page shows it as text, so '*' showed literally)."""
    from iba_core.trust import Trust

    base = prompt_run.parent.parent  # the session's temporary folder: images0/ and runs0/run below it
    monkeypatch.setenv("IBA_DATA_DIRS", str(base))
    served = Trust.for_app()  # not on a loopback address: a room of visitors
    run = open_run(prompt_run)
    command = ps.add_prompt_command(run, "a watermark", served)
    text = ps.missing_prompt_text(run, "a watermark", command=False, trust=served)
    for shown in (command, text):
        assert str(base) not in shown and str(prompt_run) not in shown and " /" not in shown, shown
        assert f"{base.name}/{prompt_run.parent.name}/{prompt_run.name}" in shown
    assert "*" not in text and "`" not in text and "“Start a run on a folder of the server”" in text
    assert str(prompt_run) in ps.add_prompt_command(run, "a watermark")  # the local user: the whole path
