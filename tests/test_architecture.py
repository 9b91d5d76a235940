"""House rules that code review would otherwise have to remember: no import cycles in iba_core, no UI in
the library, modules named for what they hold, the pages that app.py lists are the pages there are."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "iba_core"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """Modules of the package that `path` imports, at module level or inside functions."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c in known)
    # A submodule may read names its own package re-exports: that is the package's interface, not a cycle.
    return {m for m in found if m != name and not name.startswith(m + ".")}


def import_graph(package: Path) -> dict[str, set[str]]:
    files = {module_name(p): p for p in package.rglob("*.py")}
    return {name: imported_modules(path, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_reads_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    files = {module_name(p, tmp_path): p for p in pkg.rglob("*.py")}
    graph = {name: imported_modules(p, set(files), tmp_path) for name, p in files.items()}
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) is not None


def test_iba_core_has_no_import_cycle():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_library_does_not_import_streamlit():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "streamlit" for n in names), path


def test_modules_are_named_for_what_they_hold():
    vague = [p for p in ROOT.rglob("*.py") if p.stem.endswith("_support") or p.stem in ("utils", "helpers", "misc")]
    assert not vague and not (ROOT / "app_pages").exists()


def test_app_lists_exactly_the_pages_in_pages_folder():
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    listed = {node.args[0].value for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Page"}
    present = {f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py") if not p.name.startswith("_")}
    assert listed == present


@pytest.mark.parametrize("folder", ["readout"])
def test_split_packages_keep_files_short(folder):
    long = {p.name: n for p in (PACKAGE / folder).rglob("*.py") if (n := len(p.read_text().splitlines())) > 420}
    assert not long, long
