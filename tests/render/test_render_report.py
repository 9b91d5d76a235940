"""iba_core.render.report: the JSON report, the heatmap as .npy, and the folder report's concept section."""
from __future__ import annotations

import io
import json

import numpy as np
import pytest

from iba_core.render.report import heatmap_npy_bytes, run_report
from render_helpers import blob, result


def test_run_report_is_json_and_complete() -> None:
    res = result()
    report = run_report(res.settings, res, "efficientnet_lite0", "block3_2", "chelsea", "Egyptian cat",
                        stats_description="32 samples")
    text = json.dumps(report, allow_nan=False)  # numpy scalars and NaN would fail here
    back = json.loads(text)
    assert back["target"] == {"index": 285, "name": "Egyptian cat"}
    assert back["settings"]["beta_k"] == 10.0 and back["settings"]["steps"] == 4
    assert back["results"]["total_bits"] == pytest.approx(res.total_bits)
    assert back["results"]["p_target_with_bottleneck"] == pytest.approx(0.6)
    assert back["results"]["heatmap_shape"] == [224, 224]
    assert len(back["history"]) == 4 and back["statistics"] == "32 samples"
    assert not any(isinstance(v, list) and len(v) > 100 for v in back["results"].values())  # no arrays


def test_the_report_says_the_precision_that_ran_not_auto() -> None:
    """The page says "bits in fp32"; the report said "auto" (what was asked for): now the precision that ran, and
    the one asked for beside it; the result's own summary alike."""
    import dataclasses

    res = result()
    res = dataclasses.replace(res, settings=dataclasses.replace(res.settings, precision="auto"), precision="bf16")
    report = run_report(res.settings, res, "efficientnet_lite0", "block3_2", "chelsea", "Egyptian cat")
    assert report["settings"]["precision"] == "bf16" and report["settings"]["precision_asked"] == "auto"
    summary = res.summary()
    assert summary["settings"]["precision"] == "bf16" == summary["precision"]
    assert summary["settings"]["precision_asked"] == "auto"


def test_run_report_replaces_nan_by_null() -> None:
    res = result()
    res.p_with = float("nan")
    report = run_report(res.settings, res, "m", "l", "i", "c")
    assert report["results"]["p_target_with_bottleneck"] is None
    json.dumps(report, allow_nan=False)


def test_heatmap_npy_round_trip() -> None:
    heat = blob().astype(np.float64)
    back = np.load(io.BytesIO(heatmap_npy_bytes(heat)), allow_pickle=False)
    assert back.dtype == np.float32 and back.shape == (224, 224)
    assert np.allclose(back, heat, atol=1e-6)


def test_run_report_carries_the_target_note() -> None:
    """A class the network hardly predicts is said in the report too, with the network's own top-1."""
    res = result()
    fine = run_report(res.settings, res, "m", "l", "i", "c")["results"]
    assert fine["target_note"] == "" and fine["predicted"] is None
    res.p_without, res.predicted, res.p_predicted = 0.034, 722, 0.41
    back = json.loads(json.dumps(run_report(res.settings, res, "m", "l", "i", "c"), allow_nan=False))["results"]
    assert back["target_note"] == res.target_note
    assert "3.4 %" in back["target_note"] and "not the network's top prediction" in back["target_note"]
    assert "rises to 60.0 %" in back["target_note"]  # p(target) 3.4 % → 60 % with the bottleneck, explained
    assert back["predicted"] == {"index": 722, "p": pytest.approx(0.41)}


def test_the_folder_report_has_a_concept_section_only_with_a_concept_set() -> None:
    """Issue #41: the concepts come right after what stands out, a group's shortcut candidate first and flagged in
    words, its strip's pictures embedded, every text from the run escaped; a run without a concept set: none."""
    from iba_core.render.report import dataset_report_html

    summary = {"run": "r", "network": "n", "layer": "l", "method": "m", "images": 2, "rows": 2, "errors": 0}
    concepts = {"groups": [{"name": "class <b>marked</b>", "concepts": [
        {"title": "Concept 2", "caption": "40% of the bits", "flag": "small (3% of the crop)", "flagged": True,
         "cells": [{"image": "a.png", "caption": "a.png · 80% of its activations", "png": b"\x89PNG"}]},
        {"title": "Concept 1", "caption": "10% of the bits", "flag": "", "flagged": False, "cells": []}]}],
        "missing": ""}
    html = dataset_report_html(summary, [], [], [], None, concepts)
    section = html.split('<h2 id="concepts">', 1)[1]
    assert html.index('id="stands-out"') < html.index('id="concepts"') < html.index("<h2>Classes")
    assert section.index("Concept 2") < section.index("Concept 1")
    assert "shortcut candidate: small (3% of the crop)" in section and "class &lt;b&gt;marked&lt;/b&gt;" in section
    assert section.count("data:image/png;base64,") == 1
    assert 'id="concepts"' not in dataset_report_html(summary, [], [], [], None, None)
