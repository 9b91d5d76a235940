"""README.md stays true: its layout block names every top-level module and package of iba_core and nothing else,
and its page table names every page the app lists (as tests/test_architecture.py keeps docs/architecture.md)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "iba_core"
README = ROOT / "README.md"

#: A name in the layout block: `module.py` or `package/` (not a path with a folder before it, nor a dotted name).
_NAME = re.compile(r"(?<![\w./])(\w+\.py|\w+/)(?![\w.])")


def layout_block(text: str) -> str:
    """The README's code block that starts with the line 'iba_core/', without that line."""
    match = re.search(r"^```\niba_core/\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    assert match, "README.md has no layout block (a code block starting with the line 'iba_core/')"
    return match.group(1)


def top_level(package: Path) -> set[str]:
    """The package's top-level modules ('name.py') and packages ('name/')."""
    modules = {p.name for p in package.glob("*.py")}
    packages = {f"{p.name}/" for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return modules | packages


def layout_errors(package: Path, text: str) -> list[str]:
    """One sentence per top-level module the layout block leaves out, and per name it gives that is not there."""
    named = set(_NAME.findall(layout_block(text)))
    present = top_level(package)
    return ([f"README.md's layout block does not name iba_core/{name}: add it (a line, or beside a related one)."
             for name in sorted(present - named)]
            + [f"README.md's layout block names {name}, which is not a top-level module or package of iba_core: "
               "remove or rename it." for name in sorted(named - present)])


def test_the_layout_block_names_every_top_level_module_and_nothing_else():
    errors = layout_errors(PACKAGE, README.read_text(encoding="utf-8"))
    assert not errors, "\n".join(errors)


def test_the_layout_check_finds_a_module_left_out_and_a_name_that_is_gone(tmp_path):
    pkg = tmp_path / "iba_core"
    (pkg / "render").mkdir(parents=True)
    for name in ("__init__.py", "settings.py", "new_module.py", "render/__init__.py"):
        (pkg / name).write_text("", encoding="utf-8")
    text = "intro\n```\niba_core/\n  __init__.py  the API\n  render/  pictures (render/colours.py)\n" \
           "  settings.py  every setting; gone.py\n```\n"
    errors = layout_errors(pkg, text)
    assert len(errors) == 2, errors
    assert "does not name iba_core/new_module.py" in errors[0] and "names gone.py" in errors[1]


def test_the_page_table_lists_every_page_of_the_app():
    """Each page's title, as app.py gives it to st.Page, has a row in the table under '## What is inside'."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    titles = {kw.value.value for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Page"
              for kw in node.keywords if kw.arg == "title" and isinstance(kw.value, ast.Constant)}
    section = README.read_text(encoding="utf-8").split("## What is inside", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")}
    assert len(titles) >= 6, titles
    assert titles <= rows, f"pages without a row in README's table: {sorted(titles - rows)}"
