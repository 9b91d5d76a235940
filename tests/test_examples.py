"""The shipped examples agree with the current code: the Home page's example (assets/home_example.*) and the
docs' CLI example (assets/cli_example.json, and the block between the cli-example markers of
docs/guide/cli/attribute.md), both
written by scripts/make_home_example.py.

A fresh run must match the shipped numbers within the cross-process tolerance of fp32 (kernel choices move
results by ~0.1 %, amplified by the ten Adam steps): total bits within 1 %, p within 0.01, heatmaps with a
Pearson correlation of at least 0.99. When the code changes what these examples show, rerun
`python scripts/make_home_example.py`.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "assets"
BITS_REL, P_ABS, MIN_PEARSON = 0.01, 0.01, 0.99


def load_script():
    spec = importlib.util.spec_from_file_location("make_home_example", ROOT / "scripts" / "make_home_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return load_script()


def docs_example() -> str:
    """The text between the docs page's cli-example markers, without the ```json fence."""
    text = (ROOT / "docs" / "guide" / "cli" / "attribute.md").read_text(encoding="utf-8")
    start, end = "<!-- cli-example -->", "<!-- /cli-example -->"
    assert text.count(start) == 1 and text.count(end) == 1, "docs/guide/cli/attribute.md needs one cli-example block"
    block = text[text.index(start) + len(start):text.index(end)].strip()
    assert block.startswith("```json\n") and block.endswith("\n```"), block
    return block[len("```json\n"):-len("\n```")]


def test_docs_show_the_shipped_cli_example(script) -> None:
    assert script.DOCS_PAGE == ROOT / "docs" / "guide" / "cli" / "attribute.md"  # the page the script rewrites
    shipped = (ASSETS / "cli_example.json").read_text(encoding="utf-8")
    assert shipped.endswith("\n") and shipped.count("\n") == 1  # one JSON line, as the CLI prints it
    assert docs_example() == shipped.rstrip("\n")
    line = json.loads(shipped)
    assert line["precision"] == "fp32" and line["image"] == "chelsea.jpg"


def test_script_writes_the_docs_block(script, tmp_path) -> None:
    page = tmp_path / "attribute.md"
    page.write_text(f"before\n{script.docs_block('old')}\nafter\n")
    line = '{"new": 1}'
    assert script.update_docs(line, page)
    assert page.read_text() == "before\n" + script.docs_block(line) + "\nafter\n"
    plain = tmp_path / "plain.md"
    plain.write_text("no markers")
    assert not script.update_docs("x", plain) and plain.read_text() == "no markers"


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def test_home_example_matches_a_fresh_run(script, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))  # as the script runs: the shipped statistics, nothing older
    shipped = json.loads((ASSETS / "home_example.json").read_text(encoding="utf-8"))
    assert shipped["settings"]["precision"] == "fp32"  # "auto" could pick bf16: not reproducible
    fresh, result, _ = script.home_run()
    for key in ("image", "model", "layer", "target", "settings", "statistics", "threshold_bits"):
        assert fresh[key] == shipped[key], key
    new, old = fresh["results"], shipped["results"]
    assert new["total_bits"] == pytest.approx(old["total_bits"], rel=BITS_REL)
    for key in ("p_target_without_bottleneck", "p_target_with_bottleneck"):
        assert new[key] == pytest.approx(old[key], abs=P_ABS), key
    assert fresh["not_needed_fraction"] == pytest.approx(shipped["not_needed_fraction"], abs=0.01)
    assert fresh["heatmap_pooled"]["pool"] == shipped["heatmap_pooled"]["pool"]
    assert pearson(fresh["heatmap_pooled"]["values"], shipped["heatmap_pooled"]["values"]) >= MIN_PEARSON
    # The pooled map in the file is the run's heatmap: it sums to the run's total bits.
    pool = shipped["heatmap_pooled"]["pool"]
    assert np.sum(shipped["heatmap_pooled"]["values"]) * pool**2 == pytest.approx(old["total_bits"], rel=1e-3)
    assert (ASSETS / "home_example.png").stat().st_size < script.MAX_BYTES


def test_cli_example_matches_a_fresh_run(script, tmp_path) -> None:
    shipped = json.loads((ASSETS / "cli_example.json").read_text(encoding="utf-8"))
    fresh = json.loads(script.cli_line(tmp_path / "run", tmp_path / "cache"))
    assert set(fresh) == set(shipped)
    for key in set(shipped) - {"p_without", "p_with", "total_bits", "seconds"}:
        assert fresh[key] == shipped[key], key
    assert fresh["total_bits"] == pytest.approx(shipped["total_bits"], rel=BITS_REL)
    for key in ("p_without", "p_with"):
        assert fresh[key] == pytest.approx(shipped[key], abs=P_ABS), key
