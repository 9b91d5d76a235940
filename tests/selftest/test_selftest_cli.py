"""`python -m iba_core selftest FOLDER --mark … --out DIR` (issue #42, item 2): the reaction and the ranking as JSON
lines on the tiny network built to react to a red top-left square; mistakes in one line, before the network loads."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selftest_fixtures import CLASSES, train_mark_net, write_background, write_object_folder  # noqa: E402
from run_fixtures import write_card  # noqa: E402

from iba_core.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def card_and_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("selftest-cli")
    write_background(root / "background")
    card = write_card(root / "card", CLASSES, model=train_mark_net(), stats_images="../background")
    write_object_folder(root / "data", 6)
    return card, root / "data"


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.strip().splitlines()]


def test_the_cli_prints_the_reaction_and_the_ranking(card_and_folder, tmp_path, capsys):
    card, folder = card_and_folder
    code = main(["selftest", str(folder), "--model", str(card), "--trust-code", "--mark", "patch", "--where",
                 "top-left", "--size", "0.125", "--methods", "iba_10,saliency", "--steps", "5", "--n", "32",
                 "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 0
    lines = _lines(capsys.readouterr().out)
    reaction, methods, last = lines[0], lines[1:-1], lines[-1]
    assert reaction["reacts"] and reaction["toward"] == "marked" and reaction["changed_share"] == 1.0
    assert reaction["verdict"].startswith("your model reacts to this mark: p(marked) ×")
    assert reaction["box"] == [0, 0, 8, 8] and reaction["images"] == 6
    ranked = [m for m in methods if m["rank"] is not None]
    assert [m["rank"] for m in ranked] == [1, 2] and {m["target"] for m in ranked} == {"toward"}
    assert [m["method"] for m in ranked] == last["ranking"] and sorted(last["ranking"]) == ["iba_10", "saliency"]
    assert len(methods) == 4  # two methods × (own class, toward "marked"), the ranked ones first
    assert last["caution"] is None and Path(last["files"]["summary"]).is_file()
    assert Path(last["paired"]["toward"]["iba_10"], "paired_report.html").is_file()


def test_the_cli_shows_the_caution_for_an_ignored_mark(card_and_folder, tmp_path, capsys):
    card, folder = card_and_folder
    code = main(["selftest", str(folder), "--model", str(card), "--trust-code", "--mark", "patch", "--where",
                 "top-left", "--colour", "blue", "--methods", "saliency", "--out", str(tmp_path / "out"),
                 "--no-progress"])
    assert code == 0
    lines = _lines(capsys.readouterr().out)
    assert not lines[0]["reacts"] and "hardly reacts to this mark" in lines[0]["verdict"]
    assert lines[-1]["ranking"] == [] and lines[-1]["caution"] == lines[0]["verdict"]
    assert lines[1]["rank"] is None


def test_a_bad_mark_is_one_line_before_the_network_loads(card_and_folder, tmp_path, capsys):
    card, folder = card_and_folder
    not_png = tmp_path / "logo.png"
    not_png.write_text("hello")
    code = main(["selftest", str(folder), "--model", str(card), "--mark", str(not_png), "--out",
                 str(tmp_path / "out")])  # no --trust-code: the card's code would be refused if it loaded
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "logo.png is not a PNG that can be read" in err
    code = main(["selftest", str(folder), "--model", str(card), "--mark", "patch", "--where", "2,2", "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "The mark's place '2,2' is neither a place nor x,y between 0 and 1" in err
