"""House figures for a review: modules, imports that run up a layer, long functions and files.

    python scripts/house_figures.py            # iba_core/ and pages/ of this checkout

Reads the code as text (ast); runs nothing of it. The layers come from docs/architecture.md, read the way
tests/test_architecture.py reads them (its helpers are reused, so the two never disagree).
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import test_architecture as arch  # noqa: E402  (the layer reader the architecture test uses)

LONG_FUNCTION = 60
LONG_FILE = 500


def python_files(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def long_functions(files: list[Path]) -> list[tuple[str, int]]:
    out = []
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length >= LONG_FUNCTION:
                    out.append((f"{file.relative_to(ROOT)}:{node.name}", length))
    return sorted(out, key=lambda t: -t[1])


def upward_imports() -> tuple[int, int]:
    """(run-time imports that go up a layer, all such imports incl. TYPE_CHECKING-only ones)."""
    layers = arch.documented_layers(arch.ARCHITECTURE.read_text(encoding="utf-8"))
    paths = arch.module_paths(arch.PACKAGE)
    by_module = {arch.module_name(f): p for p, f in paths.items()}
    counts = []
    for runtime_only in (True, False):
        n = 0
        for path, file in paths.items():
            mine = arch.layer_of(path, layers)
            for other in arch.imported_modules(file, set(by_module), arch.ROOT, runtime_only=runtime_only):
                theirs = arch.layer_of(by_module[other], layers)
                if mine is not None and theirs is not None and theirs < mine:
                    n += 1
        counts.append(n)
    return counts[0], counts[1]


def main() -> None:
    lib, pages = python_files("iba_core"), python_files("pages")
    runtime_up, all_up = upward_imports()
    longf = long_functions(lib + pages)
    longfiles = sorted(((str(f.relative_to(ROOT)), len(f.read_text(encoding="utf-8").splitlines()))
                        for f in lib + pages), key=lambda t: -t[1])
    longfiles = [t for t in longfiles if t[1] >= LONG_FILE]
    print(f"modules in iba_core: {len(lib)}; page modules: {len(pages)}")
    print(f"imports up a layer: {runtime_up} at run time, {all_up} counting type-hint-only ones")
    print(f"functions of {LONG_FUNCTION}+ lines: {len(longf)}  " + ", ".join(f"{n} ({k})" for n, k in longf))
    print(f"files of {LONG_FILE}+ lines: {len(longfiles)}  " + ", ".join(f"{n} ({k})" for n, k in longfiles))


if __name__ == "__main__":
    main()
