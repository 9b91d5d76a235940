"""`python -m iba_core concepts RUN_DIR` as a user runs it (in-process, as tests/test_cli.py does): a JSON line per
group and a summary, matching the concept set written; a resumed call skips; bad input is one line, exit 1."""
from __future__ import annotations

import json
import shutil

import pytest

from iba_core.cli import main
from iba_core.concepts import list_sets, open_concepts


@pytest.fixture
def run_dir(hand_root, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    return run


def card_args(hand_root) -> list[str]:
    return ["--model", str(hand_root / "card" / "hand.toml"), "--trust-code"]


def test_concepts_prints_a_line_per_group_and_a_summary(run_dir, hand_root, capsys):
    argv = ["concepts", str(run_dir), *card_args(hand_root), "--per-class", "3", "--no-whole-run"]
    assert main(argv) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert len(lines) == 3
    *groups, summary = lines
    assert [g["group"] for g in groups] == ["class-0", "class-1"]
    assert [g["class_name"] for g in groups] == ["red", "green"]
    cs = open_concepts(run_dir)
    assert summary["concepts"] == str(cs.path) and cs.path.name.startswith("cells-k3-")
    assert summary["done"] == ["class-0", "class-1"] and summary["skipped"] == [] and summary["images"] == 6
    assert summary["damaged"] == [] and summary["missing"] is None and summary["unreadable"] == []
    for line in groups:
        rows = cs.concepts[cs.concepts["group"] == line["group"]]
        assert line["k"] == 3 and len(line["bits_share"]) == 3
        assert line["bits_share"] == pytest.approx(list(rows["bits_share"]), abs=1e-4)  # rounded to 4 places
        assert line["effect"] == pytest.approx(list(rows["effect"]), abs=1e-4)
        flagged = {str(c): r for c, r in zip(rows["concept"], rows["flag_reasons"]) if r}
        assert line["flagged"] == flagged
    assert "0" in groups[0]["flagged"] and "carries" in groups[0]["flagged"]["0"]  # the red square: flagged
    # resumed: every group skipped, the same lines
    assert main(argv) == 0
    again = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert again[-1]["done"] == [] and again[-1]["skipped"] == ["class-0", "class-1"]
    assert again[:-1] == groups and len(list_sets(run_dir)) == 1


def test_classes_by_name_and_index(run_dir, hand_root, capsys):
    assert main(["concepts", str(run_dir), *card_args(hand_root), "--per-class", "2", "--classes", "green", "0",
                 "--no-whole-run"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [g["group"] for g in lines[:-1]] == ["class-1", "class-0"]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    err = [line for line in err if not line.startswith("concepts:")]  # the progress bar, if any
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert "Traceback" not in err[0]
    return err[0]


@pytest.mark.parametrize("classes, words", [(["nosuch"], "No class named 'nosuch'"),
                                            (["7"], "out of range")])
def test_a_bad_class_is_one_line(run_dir, hand_root, capsys, classes, words):
    assert main(["concepts", str(run_dir), *card_args(hand_root), "--classes", *classes]) == 1
    assert words in one_line_error(capsys)
    assert not (run_dir / "concepts").exists()


@pytest.mark.parametrize("where, words", [("data", "is not a run folder"), ("nowhere", "Run folder not found")])
def test_a_folder_that_is_not_a_run_is_one_sentence(hand_root, capsys, where, words):
    assert main(["concepts", str(hand_root / where), *card_args(hand_root)]) == 1
    assert words in one_line_error(capsys)


def test_a_cards_run_without_model_says_to_give_the_card(run_dir, capsys):
    """The run names its network "card:hand": only the card's file can load it."""
    assert main(["concepts", str(run_dir), "--trust-code"]) == 1
    assert "give the path of the card" in one_line_error(capsys)


def test_another_network_is_one_sentence(run_dir, capsys, tmp_path):
    from run_fixtures import write_card

    card = write_card(tmp_path / "tiny", ["red", "green"])
    assert main(["concepts", str(run_dir), "--model", str(card), "--trust-code"]) == 1
    assert "Concepts need the run's own network" in one_line_error(capsys)


def test_words_from_a_clip_model_are_stored_and_shown(run_dir, hand_root, capsys, clip_folder):
    """--words-model names each concept with the CLIP model's closest prompts (the built-in list and --prompt); the
    set keeps them and the atlas shows them; a model that is not CLIP is refused before any work."""
    from iba_core.app import dataset_concepts as dc

    card = str(hand_root / "card" / "hand.toml")
    assert main(["concepts", str(run_dir), "--model", card, "--trust-code", "--words-model", card]) == 1
    assert "--words-model needs a CLIP model" in capsys.readouterr().err and not list_sets(run_dir)
    args = ["concepts", str(run_dir), "--model", card, "--trust-code", "--per-class", "2", "--no-whole-run",
            "--words-model", f"clip:{clip_folder}", "--prompt", "a red square"]
    assert main(args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    groups = [line for line in lines if "group" in line]
    assert groups and all(len(line["words"]) == 2 and all(len(w) == 3 for w in line["words"].values())
                          for line in groups)
    found = open_concepts(run_dir)
    words = found.words
    assert set(words["group"]) == {"class-0", "class-1"} and "a red square" in set(words["word"])
    row = found.concepts.iloc[0]
    best = found.words_of(int(row["target"]), int(row["concept"]))[0]
    assert dc.words_text(found, row).startswith(f"Looks like (CLIP, score above the other concepts'): “{best[0]}”")
