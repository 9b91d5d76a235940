"""Names and sentences shown as written (issue #40, item 8): a line break in a model card's title joined the words
on either side; a warning showed literal asterisks, because a library sentence held Markdown emphasis and the page
shows library text as text (`plain`). The library's sentences are plain text, the pages escape them."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import make_card_folder  # noqa: E402

from iba_core.networks import read_card  # noqa: E402

PACKAGE = Path(__file__).resolve().parents[2] / "iba_core"
#: Markdown emphasis in a sentence: *words* or **words** or _words_ at word edges (not `**kwargs`, not 2 * 3).
EMPHASIS = re.compile(r"(?<![\w*])(\*{1,2}|_)(?=[A-Za-z“])[^*_\n]{1,80}(?<=[\w”.])\1(?![\w*])")


def test_a_line_break_in_a_cards_title_is_a_space(tmp_path) -> None:
    from iba_core.app.models import find_cards, network_label

    folder = make_card_folder(tmp_path / "models" / "fruit")
    card = folder / "fruit.toml"
    card.write_text(card.read_text() + 'title = "Fruit\\nResNet  18\\r\\nfine-tuned"\n')
    assert read_card(card).title == "Fruit ResNet 18 fine-tuned"
    found = find_cards(tmp_path / "models")
    assert network_label(found[0].key, found) == "Fruit ResNet 18 fine-tuned (your network)"


def _message_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings (messages, captions, hints), with their lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_the_library_s_sentences_hold_no_markdown_emphasis() -> None:
    """The pages show the library's sentences as text (`plain`), so emphasis would show as asterisks: the exact
    case was the prompt search's "with *Start a run on a folder of the server*"."""
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text.strip()[:80]}"
             for path in sorted(PACKAGE.rglob("*.py")) for line, text in _message_strings(path)
             if EMPHASIS.search(text)]
    assert found == [], "\n".join(found)
    assert EMPHASIS.search("under *Feature statistics* on the page") and EMPHASIS.search("a **bold** word")
    assert not EMPHASIS.search("f(**kwargs) and 2 * 3 * 4 and stats_images and IBA_DATA_DIRS")


def test_the_prompt_sentence_shows_without_asterisks_on_the_page() -> None:
    from iba_core.app.prompt_search import missing_prompt_text
    from iba_core.runs.store import as_table
    from iba_core.runs.tables import Run
    from pages.widgets.text import plain

    run = Run(Path("run"), {"methods": {"iba_10": {}}, "network": "resnet50", "source": "images"},
              as_table([{"image": "a.png", "method": "iba_10", "target": 0, "prompt": "a cat", "map_index": -1,
                         "rank": 0, "finished": 0.0}]))
    shown = plain(missing_prompt_text(run, "a dog", command=False))
    assert "\\*" not in shown and "*" not in shown and "Start a run on a folder of the server" in shown


def test_a_served_visitor_sees_a_broken_cards_reason_without_the_servers_path(tmp_path, monkeypatch) -> None:
    """Issue #40, item 5: a card's error names the card by its path; a visitor of a served app (IBA_DATA_DIRS set,
    no loopback address) sees it relative to the models folder, in the menu's list and in a page's error."""
    from iba_core.app.error_log import error_text
    from iba_core.app.models import find_cards
    from iba_core.networks import ModelCardError
    from iba_core.trust import Trust, visitor_text

    models = tmp_path / "models"
    models.mkdir()
    (models / "broken.toml").write_text('arch = "torchvision:resnet18"\nhead = "nonsense"\n')
    monkeypatch.setenv("IBA_MODELS_DIR", str(models))
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path / "data"))
    served = Trust.for_app()
    error = next(c.error for c in find_cards(trust=served) if c.name == "broken")
    assert str(models) in error  # the library's sentence names the file…
    for shown in (visitor_text(error, served), error_text(ModelCardError(error), served)):
        assert str(tmp_path) not in shown and "models/broken.toml" in shown, shown  # …a visitor sees it relative
    assert error_text(ModelCardError(error), Trust.local()) == error  # the machine's own user: as it is
