"""House rules that code review would otherwise have to remember: no import cycles in iba_core, imports only
down the layers of docs/architecture.md, every module named there, no UI in the library, modules named for what
they hold, the pages that app.py lists are the pages there are, modules and functions of a size a person reads."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "iba_core"
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`): a block that never runs."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def imported_modules(path: Path, known: set[str], root: Path = ROOT, runtime_only: bool = False) -> set[str]:
    """Modules of the package that `path` imports, at module level or inside functions.

    runtime_only leaves out the imports under `if TYPE_CHECKING:` (type hints only, never run).
    """
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if runtime_only:
        for node in ast.walk(tree):
            for field, value in ast.iter_fields(node):
                if isinstance(value, list) and any(_is_type_checking(v) for v in value):
                    setattr(node, field, [v for v in value if not _is_type_checking(v)])
    found: set[str] = set()
    for node in ast.walk(tree):
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


def import_graph(package: Path, runtime_only: bool = False) -> dict[str, set[str]]:
    files = {module_name(p, package.parent): p for p in package.rglob("*.py")}
    return {name: imported_modules(path, set(files), package.parent, runtime_only) for name, path in files.items()}


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


def test_the_page_widgets_have_no_import_cycle():
    """pages/widgets/ too, counting imports for type hints: a circle there means two modules that each need the
    other to be read (progress.py names what it reads of a page's inputs as a Protocol instead)."""
    graph = import_graph(ROOT / "pages")  # names as imported: pages.widgets.…
    widgets = {name: {m for m in imported if m.startswith("pages.widgets")}
               for name, imported in graph.items() if name.startswith("pages.widgets")}
    assert len(widgets) > 5 and any(widgets.values())  # the graph was read (not empty by a naming slip)
    cycle = find_cycle(widgets)
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_iba_core_has_no_import_cycle():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


# ---- the architecture document: layers and modules ------------------------------------------------


def documented_layers(text: str) -> list[tuple[str, list[str]]]:
    """(layer, [paths inside iba_core]) of the '## Layers' table, top to bottom; a folder's path ends in '/'."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # past the header and |---|
    layers = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        layers.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return layers


def documented_modules(text: str) -> set[str]:
    """The paths the '## Modules' section names (each in backticks at the start of a list item)."""
    section = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)`", section, flags=re.MULTILINE))


def module_paths(package: Path) -> dict[str, Path]:
    """{path inside the package: file} for every module and package (a package: 'name/', its __init__.py)."""
    out = {}
    for file in package.rglob("*.py"):
        rel = file.relative_to(package)
        is_package = file.name == "__init__.py" and rel.parent != Path(".")
        out[f"{rel.parent.as_posix()}/" if is_package else rel.as_posix()] = file
    return out


def layer_of(path: str, layers: list[tuple[str, list[str]]]) -> int | None:
    """Index (0 = top) of the layer whose `where` holds `path`: the longest matching file or folder."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            hit = path.startswith(prefix) if prefix.endswith("/") else path == prefix
            if hit and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def _path_of(module: str, paths: set[str]) -> str:
    """'iba_core.render.comparison' → 'render/comparison.py'; a package → 'render/'; the root → '__init__.py'."""
    rel = module.split(".")[1:]
    if not rel:
        return "__init__.py"
    folder = "/".join(rel) + "/"
    return folder if folder in paths else "/".join(rel) + ".py"


def layering_errors(package: Path, text: str) -> list[str]:
    """One sentence per module missing from the document, outside every layer, or importing a higher layer."""
    layers = documented_layers(text)
    named = documented_modules(text)
    paths = module_paths(package)
    errors = []
    for path in sorted(paths):
        layer = layer_of(path, layers)
        if layer is None:
            errors.append(f"iba_core/{path} is in no layer of docs/architecture.md: add `{path}` (or its folder) to "
                          "the `where` cell of its row in '## Layers', and a line for it under '## Modules'.")
        elif path not in named:
            errors.append(f"iba_core/{path} is not in docs/architecture.md: add a line '- `{path}`: what it holds' "
                          f"under '## Modules', in the list '{layers[layer][0].capitalize()}'.")
    errors += [f"docs/architecture.md names `{path}` under '## Modules', which is not in iba_core/ any more: "
               "remove or rename its line." for path in sorted(named - set(paths))]
    graph = import_graph(package, runtime_only=True)
    for module in sorted(graph):
        source = _path_of(module, set(paths))
        here = layer_of(source, layers)
        for imported in sorted(graph[module]):
            there = layer_of(_path_of(imported, set(paths)), layers)
            if here is not None and there is not None and there < here:
                errors.append(f"{module} ({layers[here][0]}) imports {imported} ({layers[there][0]}), a higher "
                              "layer: pass the data or a function in instead, or move the module "
                              "(docs/architecture.md, '## Layers').")
    return errors


def test_the_layer_table_is_read_as_written():
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    names = [name for name, _ in layers]
    assert names[0] == "front ends" and names[-1] == "foundation" and len(names) == len(set(names))
    assert layer_of("render/comparison.py", layers) == names.index("drawing")
    assert layer_of("cli/", layers) == layer_of("__main__.py", layers) == 0
    assert layer_of("no_such_module.py", layers) is None


def test_every_module_is_in_the_architecture_document_and_imports_only_down_the_layers():
    errors = layering_errors(PACKAGE, ARCHITECTURE.read_text(encoding="utf-8"))
    assert not errors, "\n".join(errors)


def _throwaway_package(tmp_path: Path) -> Path:
    """A copy of iba_core's modules under `tmp_path`, for a test to add a throwaway module to."""
    pkg = tmp_path / "iba_core"
    for path, file in module_paths(PACKAGE).items():
        target = pkg / file.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(file.read_text(encoding="utf-8"), encoding="utf-8")
    return pkg


def test_the_document_check_names_a_missing_module_and_an_import_up_the_layers(tmp_path):
    text = ARCHITECTURE.read_text(encoding="utf-8")
    pkg = _throwaway_package(tmp_path)
    (pkg / "render" / "throwaway.py").write_text("from ..methods import get_method\n", encoding="utf-8")
    errors = layering_errors(pkg, text)
    assert any("iba_core/render/throwaway.py is not in docs/architecture.md" in e and "'Drawing'" in e
               for e in errors), errors
    assert any(e.startswith("iba_core.render.throwaway (drawing) imports iba_core.methods (analyses)")
               for e in errors), errors
    # Type hints only are not an import at run time.
    (pkg / "render" / "throwaway.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..methods import Method\n", encoding="utf-8")
    assert not any("imports" in e for e in layering_errors(pkg, text))


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
    """Every .py file directly in pages/ is a page app.py lists: Streamlit shows each such file in the sidebar
    until `st.navigation` has run on a fresh server, so a helper there (even `_name.py`) would flash as a page;
    helpers live in pages/widgets/, which Streamlit does not scan."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    listed = {node.args[0].value for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Page"}
    present = {f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py") if p.name != "__init__.py"}
    assert listed == present


@pytest.mark.parametrize("folder", ["readout"])
def test_split_packages_keep_files_short(folder):
    long = {p.name: n for p in (PACKAGE / folder).rglob("*.py") if (n := len(p.read_text().splitlines())) > 420}
    assert not long, long


def test_only_settings_reads_the_environment():
    """settings.py holds every environment setting (ours, Hugging Face's, torchrun's): no other module reads one."""
    readers = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
               if p.name != "settings.py" or p.parent != PACKAGE
               if re.search(r"\bos\.environ\b|\bgetenv\(|\benviron\.get\(", p.read_text(encoding="utf-8"))]
    assert not readers, f"read the environment through iba_core/settings.py instead: {readers}"


# ---- rooms of a size a person reads (#38, item 6) ------------------------------------------------

#: A module longer than this, or a function longer than that, needs a reason in its docstring.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
#: The reason: a sentence of the docstring that starts "Long because", up to its full stop (or the docstring's end).
_LONG_BECAUSE = re.compile(r"(?:\A|(?<=[.!?:;)])\s|\n)\s*(Long because\b.*?)(?:\.(?=\s|\Z)|\Z)", re.DOTALL)
_SPLIT_IT = "split it, or say 'Long because …' in its {}docstring"


def long_because(docstring: str | None) -> str | None:
    """The docstring's sentence that starts 'Long because' (its stated reason to be long), on one line; None without."""
    found = _LONG_BECAUSE.search(docstring or "")
    return " ".join(found.group(1).split()) + "." if found else None


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method in `tree`, nested ones included."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    found.append((name, child))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def size_findings(roots: list[Path], base: Path) -> tuple[list[str], list[str]]:
    """(offenders, exceptions) among the modules under `roots`: one line for each module over MAX_MODULE_LINES lines
    and each function over MAX_FUNCTION_LINES (end_lineno − lineno + 1 of its def, docstring included); those whose
    docstring says 'Long because …' are exceptions, listed with that reason, the others offenders."""
    offenders, exceptions = [], []
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        where = path.relative_to(base).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            reason = long_because(ast.get_docstring(tree))
            if reason:
                exceptions.append(f"{where} ({lines} lines): {reason}")
            else:
                offenders.append(f"{where} has {lines} lines (at most {MAX_MODULE_LINES}): "
                                 + _SPLIT_IT.format("module "))
        for name, node in _functions(tree):
            length = node.end_lineno - node.lineno + 1
            if length <= MAX_FUNCTION_LINES:
                continue
            reason = long_because(ast.get_docstring(node))
            if reason:
                exceptions.append(f"{where}:{node.lineno} {name} ({length} lines): {reason}")
            else:
                offenders.append(f"{where}:{node.lineno} {name} has {length} lines (at most {MAX_FUNCTION_LINES}): "
                                 + _SPLIT_IT.format(""))
    return offenders, exceptions


def test_modules_and_functions_are_a_size_a_person_reads():
    """No module in iba_core/ or pages/ over MAX_MODULE_LINES lines and no function over MAX_FUNCTION_LINES without
    a reason in its docstring; the exceptions and their reasons are printed (pytest -s) and listed on failure."""
    offenders, exceptions = size_findings([PACKAGE, ROOT / "pages"], ROOT)
    listed = "Long, with a reason:\n" + ("\n".join(f"  {e}" for e in exceptions) or "  (none)")
    print(listed)
    assert not offenders, "Too long to read:\n" + "\n".join(f"  {o}" for o in offenders) + "\n" + listed


def test_the_size_check_catches_a_long_function_and_module_and_reads_their_reasons(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "    x = 1\n"
    source = ('"""A throwaway module."""\n\n\n'
              + "def fits():\n" + body * (MAX_FUNCTION_LINES - 1) + "\n\n"  # exactly the limit
              + "def too_long():\n" + body * MAX_FUNCTION_LINES + "\n\n"
              + "class Holder:\n    def method(self):\n" + ("    " + body) * MAX_FUNCTION_LINES + "\n\n"
              + 'def excused():\n    """Draws a thing.\n\n    Long because its steps share\n    ten names. More words."""\n'
              + body * MAX_FUNCTION_LINES)
    (pkg / "throwaway.py").write_text(source, encoding="utf-8")
    line = {name: source.splitlines().index(f"{indent}def {name}(self):" if name == "method" else f"def {name}():") + 1
            for name, indent in [("too_long", ""), ("method", "    "), ("excused", "")]}
    offenders, exceptions = size_findings([pkg], tmp_path)
    assert [o.split(" has ")[0] for o in offenders] == [f"pkg/throwaway.py:{line['too_long']} too_long",
                                                       f"pkg/throwaway.py:{line['method']} Holder.method"], offenders
    assert all("split it, or say 'Long because …' in its docstring" in o for o in offenders), offenders
    assert f"too_long has {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})" in offenders[0]
    assert exceptions == [f"pkg/throwaway.py:{line['excused']} excused ({MAX_FUNCTION_LINES + 5} lines): "
                          "Long because its steps share ten names."]
    # A long module: an offender, until its module docstring gives the reason (a word like "Longer" does not).
    (pkg / "big.py").write_text('"""Longer because of nothing."""\n' + "x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    offenders, _ = size_findings([pkg], tmp_path)
    assert any(o.startswith(f"pkg/big.py has {MAX_MODULE_LINES + 1} lines") and "module docstring" in o
               for o in offenders), offenders
    (pkg / "big.py").write_text('"""Holds data. Long because it is a table.\n"""\n' + "x = 1\n" * MAX_MODULE_LINES,
                                encoding="utf-8")
    offenders, exceptions = size_findings([pkg], tmp_path)
    assert not any(o.startswith("pkg/big.py") for o in offenders)
    assert f"pkg/big.py ({MAX_MODULE_LINES + 2} lines): Long because it is a table." in exceptions
