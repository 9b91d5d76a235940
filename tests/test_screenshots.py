"""The pictures the README and the docs show are current (issue #38, item 3): each picture scripts/screenshots.py
makes is in docs/images/manifest.json, exists, has the size the manifest says (1280 × 800 for an app page), and
was made from the code the page or command has now (the fingerprint rule: the script's docstring); an app page's
title and heading still match app.py and the page's `st.title`; every picture README.md and docs/**/*.md show
exists. No browser and no git: the files alone decide, so a clean clone checks the same."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("screenshots_script", ROOT / "scripts" / "screenshots.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


shots = _load_script()
MANIFEST = json.loads(shots.MANIFEST.read_text(encoding="utf-8")) if shots.MANIFEST.is_file() else {}
ENTRIES: dict = MANIFEST.get("pictures", {})


def refresh(name: str) -> str:
    return f"run `python scripts/screenshots.py --pages {name}` to refresh"


def navigation_pages() -> list[str]:
    """The page modules app.py's navigation lists (`st.Page("pages/<page>.py", …)`), by their stem."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    return [Path(node.args[0].value).stem for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Page"
            and node.args and isinstance(node.args[0], ast.Constant)]


def test_every_page_of_the_app_has_a_picture() -> None:
    pages = navigation_pages()
    assert len(pages) >= 6, pages  # the parse found the navigation
    missing = [p for p in pages if p not in shots.PICTURES]
    assert not missing, f"app pages without a picture in scripts/screenshots.py: {missing} (add them to PICTURES)"


@pytest.mark.parametrize("name", list(shots.PICTURES))
def test_the_picture_is_current(name: str) -> None:
    picture = shots.PICTURES[name]
    if name not in ENTRIES:
        pytest.fail(f"{picture.file} is not in docs/images/manifest.json: {refresh(name)}")
    entry = ENTRIES[name]
    path = ROOT / entry["file"]
    assert path == shots.IMAGES / picture.file, f"the manifest names {entry['file']}: {refresh(name)}"
    assert path.is_file(), f"{entry['file']} is missing: {refresh(name)}"
    with Image.open(path) as image:
        size = image.size
    assert size == (entry["width"], entry["height"]), (
        f"{entry['file']} is {size[0]}×{size[1]}, the manifest says {entry['width']}×{entry['height']}: "
        f"{refresh(name)}")
    if path.suffix == ".png" and picture.page is not None:
        assert size == (shots.VIEWPORT["width"], shots.VIEWPORT["height"]), (
            f"{entry['file']} is {size[0]}×{size[1]}, not 1280×800: {refresh(name)}")
    limit = shots.MAX_GIF_BYTES if path.suffix == ".gif" else shots.MAX_BYTES
    assert path.stat().st_size <= limit, f"{entry['file']} is over {limit // 1000} kB: {refresh(name)}"

    if picture.page is not None:
        assert entry.get("title") == shots.page_title(picture.page), (
            f"{entry['file']} shows the page titled {entry.get('title')!r}; app.py now calls it "
            f"{shots.page_title(picture.page)!r}: {refresh(name)}")
        assert entry.get("heading") == shots.page_heading(picture.page), (
            f"{entry['file']} shows the heading {entry.get('heading')!r}; pages/{picture.page}.py's st.title now "
            f"says {shots.page_heading(picture.page)!r}: {refresh(name)}")
    files = shots.sources(picture.entries)
    if shots.fingerprint(files) != entry["fingerprint"]:
        recorded = entry.get("sources", {})
        now = shots.file_digests(files)
        changed = sorted({f for f in now if recorded.get(f) != now[f]} | (set(recorded) - set(now)))
        pytest.fail(f"{entry['file']} was made from other code than today's (changed, added or no longer "
                    f"imported: {', '.join(changed) or 'see the fingerprint rule'}): {refresh(name)}")


def test_the_manifest_names_no_other_picture() -> None:
    stray = sorted(set(ENTRIES) - set(shots.PICTURES))
    assert not stray, f"the manifest names pictures the script no longer makes: {stray} (delete their entries)"


# Markdown images and links to pictures, and HTML <img src>.
PICTURE_REF = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+\.(?:png|gif|jpe?g|svg|webp))>?(?:\s+\"[^\"]*\")?\s*\)"
                         r"|<img[^>]+src=[\"']([^\"']+)[\"']", re.IGNORECASE)


def shown_pictures() -> list[tuple[Path, str]]:
    """(markdown file, picture reference) for every local picture README.md and docs/**/*.md show or link."""
    found = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for match in PICTURE_REF.finditer(md.read_text(encoding="utf-8")):
            ref = (match.group(1) or match.group(2)).split("#")[0]
            if not re.match(r"^[a-z]+:", ref):  # http:, https:, data: are not files here
                found.append((md, ref))
    return found


def test_the_docs_show_only_pictures_that_exist_and_are_checked() -> None:
    refs = shown_pictures()
    assert any(md.name == "README.md" for md, _ in refs), "README.md shows no picture (its first picture is gone?)"
    made = {(ROOT / e["file"]).resolve(): name for name, e in ENTRIES.items()}
    problems = []
    for md, ref in refs:
        target = (ROOT / ref.lstrip("/")) if ref.startswith("/") else (md.parent / ref)
        target = target.resolve()
        where = f"{md.relative_to(ROOT)} shows {ref}"
        if not target.is_file():
            name = next((n for n, p in shots.PICTURES.items() if (shots.IMAGES / p.file).resolve() == target), None)
            problems.append(f"{where}, which is missing" + (f": {refresh(name)}" if name else ""))
        elif target.is_relative_to(shots.IMAGES.resolve()) and target not in made:
            name = next((n for n, p in shots.PICTURES.items() if (shots.IMAGES / p.file).resolve() == target), None)
            problems.append(f"{where}, which is not in the manifest: {refresh(name)}" if name else
                            f"{where}, which scripts/screenshots.py does not make (so no test keeps it current)")
    assert not problems, "\n".join(problems)


# ---- the fingerprint rule ------------------------------------------------------------------------------------


def _tree(root: Path) -> None:
    """A small project: app.py, a page importing a widget (absolute) and two render modules (relative, and lazily
    exported by the package), and a library module the rule does not follow."""
    files = {
        "app.py": "import streamlit as st\nst.Page('pages/p.py', title='P')\n",
        "pages/__init__.py": "",
        "pages/p.py": "import streamlit as st\nfrom pages.widgets.w import w\nst.title('P')\n"
                      "def later():\n    from iba_core.render import drawn\n",
        "pages/widgets/__init__.py": "",
        "pages/widgets/w.py": "from iba_core.render.colours import c\nfrom iba_core.logic import x\ndef w(): ...\n",
        "iba_core/__init__.py": "",
        "iba_core/logic.py": "x = 1\n",
        "iba_core/render/__init__.py": "_PUBLIC = {'drawn': 'figures', 'c': 'colours'}\n",
        "iba_core/render/colours.py": "c = 1\n",
        "iba_core/render/figures.py": "from .colours import c\ndrawn = c\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "# v1\n")  # the tests change one byte here


def test_sources_follow_the_page_s_imports_into_pages_and_render_only(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert shots.sources(["app.py", "pages/p.py"], root=tmp_path) == [
        "app.py", "iba_core/render/colours.py", "iba_core/render/figures.py", "pages/p.py", "pages/widgets/w.py"]


def test_one_changed_byte_of_a_page_or_its_drawing_changes_the_fingerprint(tmp_path: Path) -> None:
    _tree(tmp_path)

    def now() -> str:
        return shots.fingerprint(shots.sources(["app.py", "pages/p.py"], root=tmp_path), root=tmp_path)

    before = now()
    assert now() == before  # read from the files alone: the same files, the same fingerprint
    for rel in ("pages/p.py", "pages/widgets/w.py", "iba_core/render/figures.py"):
        path = tmp_path / rel
        original = path.read_bytes()
        path.write_bytes(original.replace(b"# v1", b"# v2"))  # one byte
        assert now() != before, rel
        path.write_bytes(original)
        assert now() == before, rel
    (tmp_path / "iba_core/logic.py").write_text("x = 2\n# v1\n")  # logic, not drawing: not followed
    assert now() == before
    page = tmp_path / "pages/p.py"
    page.write_bytes(page.read_bytes().replace(b"\n", b"\r\n"))  # a Windows checkout of the same code
    assert now() == before


def test_titles_are_read_from_the_navigation_and_the_page(tmp_path: Path) -> None:
    _tree(tmp_path)
    assert shots.page_title("p", root=tmp_path) == "P"
    assert shots.page_heading("p", root=tmp_path) == "P"
    assert shots.page_title("home") == "Home" and shots.page_heading("home") == "IBA Explorer"
