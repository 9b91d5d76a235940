"""The documentation stays true: the MkDocs site builds in strict mode (a broken link, a page missing from the nav, a
missing picture or a cross-reference to a renamed function fails the build), the API reference lists every public
name of iba_core with its docstring, the site fetches nothing from the internet (so `mkdocs serve` works offline),
and the README stays a short landing page whose links all lead somewhere."""
from __future__ import annotations

import html
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import iba_core
from iba_core import bottleneck, per_sample, results

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The README is a landing page: what the tool answers, the set-up, three tours, two tables, links.
README_MAX_LINES = 250
#: A Markdown link or image target: ](target) — the target up to the first space or ")".
_LINK = re.compile(r"\]\(([^)\s]+)")


def plain_text(page: str) -> str:
    """A built HTML page's visible text: tags dropped, entities decoded, whitespace collapsed."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def docstring_words(obj: object) -> str:
    """The first paragraph of `obj`'s docstring as the site shows it in text: Markdown's backticks and emphasis gone,
    whitespace collapsed."""
    first = (inspect.getdoc(obj) or "").split("\n\n")[0]
    return " ".join(re.sub(r"[`*]", "", first).split())


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # NO_MKDOCS_2_WARNING: Material's banner about MkDocs 2 on every build; noise, not a warning of ours
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings or [done.stderr[-3000:]])
    return out


def test_the_site_builds_in_strict_mode_with_every_page(site):
    for page in ("index", "getting-started", "guide/per_sample", "guide/cli/attribute", "science/fidelity",
                 "operations/serving", "performance", "api/index", "architecture"):
        assert (site / f"{page}.html").is_file(), page


def test_the_api_reference_lists_every_public_name_of_iba_core(site):
    ids = set()
    for page in (site / "api").glob("*.html"):
        ids |= set(re.findall(r'id="(iba_core\.[\w.]+)"', page.read_text(encoding="utf-8")))
    missing = [name for name in iba_core.__all__ if not any(i.endswith(f".{name}") for i in ids)]
    assert not missing, f"public names of iba_core without an entry in the API reference: {missing}"
    # and the reference's index links each one (docs/api/index.md), so a new public name is listed there too
    index = (ROOT / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    unlisted = [name for name in iba_core.__all__ if f"[`{name}`][" not in index]
    assert not unlisted, f"docs/api/index.md does not list: {unlisted}"


def test_the_api_reference_shows_the_docstrings_of_per_sample(site):
    """Every public class and function that iba_core.per_sample defines, and the result types and settings it hands
    out (defined lower, in iba_core.results and iba_core.bottleneck), is on the Bottlenecks page with the first
    paragraph of its docstring."""
    page = (site / "api" / "bottlenecks.html").read_text(encoding="utf-8")
    # compared without spaces: a tag inside a sentence (`code`) leaves a space where the docstring has none
    text = re.sub(r"[`*\s]", "", plain_text(page))
    public = [obj for module in (per_sample, results, bottleneck) for name, obj in vars(module).items()
              if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
              and obj.__module__ == module.__name__]
    assert {"PerSampleBottleneck", "BottleneckSettings", "AttributionResult"} <= {o.__name__ for o in public}
    for obj in public:
        assert f'id="{obj.__module__}.{obj.__name__}"' in page, obj.__name__
        words = docstring_words(obj)
        assert words and re.sub(r"\s", "", words) in text, f"{obj.__name__}'s docstring is not shown: {words[:80]!r}"


def test_the_site_fetches_nothing_from_the_internet(site):
    """Material loads Google fonts unless `font: false`; any script, stylesheet, font or picture from another host
    would break `mkdocs serve` offline."""
    external = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.IGNORECASE)
    found = []
    for page in site.rglob("*.html"):
        found += [f"{page.relative_to(site)}: {m.group(0)}" for m in external.finditer(page.read_text("utf-8"))]
    for sheet in site.rglob("*.css"):
        if re.search(r"@import\s+url\(\s*[\"']?(?:https?:)?//|fonts\.googleapis", sheet.read_text("utf-8")):
            found.append(str(sheet.relative_to(site)))
    assert not found, found[:10]


def test_the_readme_is_a_short_landing_page_whose_links_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md is a landing page: move reference text to docs/"
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address or an anchor of the README itself
        if not (ROOT / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"README.md links to files that do not exist: {broken}"
    assert "docs/images/screenshots/per_sample.png" in text  # the current picture of a live run


def test_the_readme_link_pattern_reads_images_links_and_addresses():
    """The pattern the check above relies on picks up images and links, and leaves web addresses aside."""
    text = "![a](docs/x.png) and [b](docs/y.md#part) and [c](https://example.org) and [d](#here)"
    assert _LINK.findall(text) == ["docs/x.png", "docs/y.md#part", "https://example.org", "#here"]


def test_the_serving_page_quotes_the_budgets_refusal_as_the_code_words_it():
    """The refusal quoted in docs/operations/serving.md is what `iba_core.budget` says for the issue's case:
    Saliency's yardsticks at 1 pixel a step on the 224 × 224 crop, in an app served with the default budget."""
    from iba_core import settings
    from iba_core.app.evaluation import yardsticks_cost
    from iba_core.budget import Cost, RequestTooLarge, check_budget
    from iba_core.errors import user_message
    from iba_core.metrics.insertion_deletion import protocol_from

    cost = Cost.part("maps", 2) + yardsticks_cost(1, 224 * 224, protocol_from("rise", step=1))
    try:
        check_budget(cost, settings.DEFAULT_MAX_REQUEST_PASSES, "These yardsticks",
                     "choose fewer methods or a larger pixels-per-step")  # the Evaluate page's words
    except RequestTooLarge as refused:
        said = user_message(refused, "app")
    quoted = re.search(r"\n> (These yardsticks.*?)\n\n", (ROOT / "docs/operations/serving.md").read_text(), re.S)
    assert quoted is not None and " ".join(quoted.group(1).replace("\n> ", " ").split()) == said


def test_the_concepts_page_states_the_thresholds_the_code_uses():
    """docs/concepts.md gives each threshold as `NAME` (value): each such name is a constant of a module of
    iba_core.concepts with that value, and the default `k_max` is ConceptSettings' (a changed threshold changes the
    page, or this fails)."""
    concepts = pytest.importorskip("iba_core.concepts")
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    stated = {name: float(value.replace(",", ""))
              for name, value in re.findall(r"`([A-Z][A-Z_]+)`\s+\((\d[\d,]*(?:\.\d+)?)\)", text)}
    assert {"USE_SHARE", "LARGE_SHARE", "LARGE_EFFECT"} <= set(stated), stated
    found: dict[str, object] = {}
    for info in pkgutil.iter_modules(concepts.__path__):
        module = importlib.import_module(f"{concepts.__name__}.{info.name}")
        found.update({name: getattr(module, name) for name in stated if hasattr(module, name)})
    wrong = {name: (value, found.get(name)) for name, value in stated.items()
             if found.get(name) != pytest.approx(value)}
    assert not wrong, f"docs/concepts.md states (page, code): {wrong}"
    k_max = re.search(r"`k_max`\s+\(default (\d+)\)", text)
    assert k_max and int(k_max.group(1)) == concepts.ConceptSettings().k_max


def documented_columns(text: str, table: str) -> set[str]:
    """The column names of the table of columns that follows the line naming `table` (**`name`**) on a page."""
    after = text.split(f"**`{table}`**", 1)[1].split("\n\n", 2)[1]
    return {m.group(1) for line in after.splitlines() if (m := re.match(r"\| `(\w+)` \|", line))}


def test_the_concepts_page_lists_the_columns_the_tables_have(tmp_path):
    """docs/concepts.md's column tables name exactly the columns of the tables a concept set holds (as
    open_concepts reads them, and as concepts.parquet and concept_images.parquet are written from them)."""
    concepts = pytest.importorskip("iba_core.concepts")
    text = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    empty = tmp_path / "run" / "concepts" / "a-set"
    empty.mkdir(parents=True)
    (empty / "concepts.json").write_text('{"format": 1, "created": 0}', encoding="utf-8")
    found = concepts.open_concepts(tmp_path / "run")
    for table, frame in (("concepts.parquet", found.concepts), ("concept_images.parquet", found.images)):
        page, code = documented_columns(text, table), set(frame.columns)
        assert page == code, f"{table}: the page lacks {sorted(code - page)}, has {sorted(page - code)} too many"


def test_the_column_reader_reads_the_table_after_the_file_name():
    text = "**`a.parquet`**, rows:\n\n| column | what |\n| --- | --- |\n| `x` | one |\n| `y` | two |\n\n" \
           "**`b.parquet`**:\n\n| column | what |\n| --- | --- |\n| `z` | three |\n"
    assert documented_columns(text, "a.parquet") == {"x", "y"} and documented_columns(text, "b.parquet") == {"z"}
