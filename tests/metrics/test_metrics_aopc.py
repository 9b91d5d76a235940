"""MoRF AOPC (metrics/aopc.py), the metric added through the registry: its number on a hand-built case, and that the
one registration line makes it appear in the CLI's choices and records, a folder run's table and the folder report
(the Evaluate page: tests/pages/test_evaluate_yardsticks.py)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.metrics import registry
from iba_core.metrics.aopc import MORF_AOPC, aopc_curve, region_size

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))


class MeanProbability(nn.Module):
    """One sigmoid output whose probability is the image's mean value: p(target) = mean(x), linear in the pixels."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))  # a parameter, so the model has a device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = (self.scale * x).mean(dim=(1, 2, 3))
        return torch.log(m / (1 - m))[:, None]


def four_regions() -> torch.Tensor:
    """A 4 × 4 image of four 2 × 2 regions, values 0.9, 0.7 (top) and 0.3, 0.1 (bottom), in all 3 channels:
    its mean, the fill of a removed region, is 0.5."""
    plane = torch.tensor([[0.9, 0.9, 0.7, 0.7], [0.9, 0.9, 0.7, 0.7],
                          [0.3, 0.3, 0.1, 0.1], [0.3, 0.3, 0.1, 0.1]], dtype=torch.float64)
    return plane.expand(1, 3, 4, 4).float().clone()


def test_aopc_by_hand_on_four_regions():
    x = four_regions()
    ranked = x[0, 0].double().numpy()  # the map ranks the regions 0.9 > 0.7 > 0.3 > 0.1
    # p: 0.5 intact; 0.9 → 0.5: 0.4; then 0.7 → 0.5: 0.35; then 0.3 → 0.5: 0.4; all removed: 0.5.
    # drops 0, 0.1, 0.15, 0.1, 0; L = 2: (0 + 0.1 + 0.15) / 3; L = 4: 0.35 / 5
    two = aopc_curve(MeanProbability(), x, ranked, 0, tile=2, steps=2, head="sigmoid")
    assert two.aopc == pytest.approx(0.25 / 3, abs=1e-6)
    np.testing.assert_allclose(two.p, [0.5, 0.4, 0.35], atol=1e-6)
    four = aopc_curve(MeanProbability(), x, ranked, 0, tile=2, steps=4, head="sigmoid")
    assert four.aopc == pytest.approx(0.07, abs=1e-6)
    # L beyond the 4 regions stops at 4; the reverse ranking removes the dark regions first: p rises, AOPC < 0
    capped = aopc_curve(MeanProbability(), x, ranked, 0, tile=2, steps=99, head="sigmoid")
    assert capped.removed.tolist() == [0, 1, 2, 3, 4]
    reverse = aopc_curve(MeanProbability(), x, -ranked, 0, tile=2, steps=2, head="sigmoid")
    assert reverse.aopc == pytest.approx(-0.25 / 3, abs=1e-6)


def test_the_metric_object_measures_the_same_and_counts_its_passes():
    from metric_helpers import Counting

    x, ranked = four_regions(), four_regions()[0, 0].double().numpy()
    model = Counting(MeanProbability())
    from iba_core.metrics.yardsticks import YardstickOptions

    (got,) = MORF_AOPC.measure(registry.MapBatch(model, x, [ranked], 0, "sigmoid"), YardstickOptions())
    # a 4 × 4 image: regions of 4 px (the largest side ≤ 14 dividing 4), 4 regions, L = min(40, 4)
    assert region_size(4, 4) == 4 and got.values["aopc_morf"] == pytest.approx(0.0, abs=1e-6)  # one region: the mean
    assert model.images == MORF_AOPC.forward_passes(16, YardstickOptions()) == 2
    assert region_size(224, 224) == 14 and MORF_AOPC.forward_passes(224 * 224, YardstickOptions()) == 41
    assert region_size(30, 45) == 5 and region_size(7, 11) == 1


def test_one_registration_line_makes_it_a_metric_everywhere():
    from iba_core.metrics.yardsticks import COLUMN_TEXT, COLUMNS, HIGHER_IS_BETTER, YARDSTICKS
    from iba_core.runs.store import COLUMNS as TABLE_COLUMNS

    assert "aopc:MORF_AOPC" in registry.REGISTERED and registry.get("aopc") is MORF_AOPC
    assert "aopc" in YARDSTICKS and "aopc_morf" in COLUMNS and HIGHER_IS_BETTER["aopc_morf"] is True
    assert "higher is better" in COLUMN_TEXT["aopc_morf"] and TABLE_COLUMNS["aopc_morf"] == "float64"
    assert registry.column("aopc_morf").titled == "MoRF AOPC ↑"
    from iba_core.app.folder_job import PAGE_METRICS

    assert "aopc" in PAGE_METRICS and "pointing" not in PAGE_METRICS  # the Dataset page's choices (no boxes there)
    for metric in registry.metrics():  # every registered metric describes itself
        assert metric.name and metric.title and metric.measures and metric.units
        assert all(c.help and ("higher is better" if c.higher_is_better else "lower is better") in c.help
                   for c in metric.columns)


def test_the_cli_offers_it_and_writes_its_records_and_table(tmp_path, capsys):
    from iba_core.cli import main
    from iba_core.images import load_sample
    from iba_core.metrics.results import read_records

    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "aopc" in capsys.readouterr().out  # among the metric choices
    folder = tmp_path / "photos"
    folder.mkdir()
    load_sample("chelsea").save(folder / "chelsea.jpg")
    out = tmp_path / "aopc.jsonl"
    argv = ["evaluate", "aopc", "--images", str(folder), "--methods", "random", "saliency", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    records = read_records(out)
    assert sorted(r["method"] for r in records) == ["random", "saliency"]
    assert all(r["metric"] == "aopc" and math.isfinite(r["aopc_morf"]) for r in records)
    assert records[0]["identity"] == {"aopc": {"tile": 14, "steps": 40, "fill": "channel mean"}}
    table = capsys.readouterr().out
    assert "### MoRF AOPC" in table and "MoRF AOPC ↑" in table and "40 most relevant 14 × 14-pixel" in table
    assert main(argv) == 0 and len(read_records(out)) == 2  # resumed: nothing measured twice


def test_a_folder_run_has_its_column_and_the_report_its_mean(tmp_path, capsys):
    from run_fixtures import load_card, write_card, write_noise_images

    from iba_core import open_run
    from iba_core.cli import main
    from iba_core.methods import get_method
    from iba_core.runs import FolderSettings, finish_run, list_images, run_folder

    write_noise_images(tmp_path / "images", 3)
    network = load_card(write_card(tmp_path / "card", ["a", "b", "c"]))
    root, items = list_images(tmp_path / "images")
    run_folder(network, items, [get_method("gradient")], tmp_path / "run", FolderSettings(metrics=("aopc",)),
               root=root)
    table = finish_run(tmp_path / "run")
    assert np.isfinite(table["aopc_morf"].to_numpy(float)).all() and table["insertion_auc"].isna().all()
    assert set(table["metrics"]) == {"aopc"}
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["settings"]["yardsticks"]["aopc"] == {"tile": 14, "steps": 40, "fill": "channel mean"}
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "run"), "--out", str(out)]) == 0
    section = out.read_text(encoding="utf-8").split('id="metrics"', 1)[1].split("<h2>", 1)[0]
    mean = float(open_run(tmp_path / "run").table["aopc_morf"].mean())
    assert "aopc_morf ↑" in section and f"{mean:.3g}" in section and "MoRF AOPC: the 40 most relevant" in section
