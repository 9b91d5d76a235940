import numpy as np
import pytest
import torch

from iba_core.metrics.beta_table import INITIAL, ORIG, format_table, per_sample_row, readout_row, topk_hits
from iba_core.per_sample import BottleneckSettings


def test_topk_hits():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 1.0, 0.0]])
    assert topk_hits(logits, 1) == (0.5, 1.0)
    assert topk_hits(logits, 2) == (0.0, 1.0)


def test_rows_on_a_tiny_network(tiny_net, tiny_stats):
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        label = int(tiny_net(x).argmax())
    settings = BottleneckSettings(steps=8, batch=4)
    initial = per_sample_row(tiny_net.prefix(), tiny_net.suffix(), tiny_stats, x, label, None, settings)
    assert initial["orig_top1"] == 1.0 and initial["orig_top5"] == 1.0  # 5 classes: top-5 always hits
    assert initial["k"] == 4 * 8 * 8 and initial["info_per_k"] > 0 and "info_last_step_per_k" not in initial
    low = per_sample_row(tiny_net.prefix(), tiny_net.suffix(), tiny_stats, x, label, 0.01, settings)
    high = per_sample_row(tiny_net.prefix(), tiny_net.suffix(), tiny_stats, x, label, 1000.0, settings)
    assert high["info_per_k"] < low["info_per_k"]  # a larger β squeezes out information
    for row in (low, high):
        assert 0.0 <= row["top1"] <= row["top5"] == 1.0


def test_table_layout():
    recs = []
    for img, acc in (("a", 1.0), ("b", 0.0)):
        base = {"metric": "beta-table", "image": img, "method": "per_sample", "model": "net", "layer": "l"}
        recs.append({**base, "setting": ORIG, "column": ORIG, "top1": acc, "top5": 1.0, "info_per_k": None})
        recs.append({**base, "setting": INITIAL, "column": INITIAL, "top1": acc, "top5": 1.0, "info_per_k": 2.5})
        recs.append({**base, "setting": "b10", "column": "beta_k=10", "top1": 1.0, "top5": 1.0, "info_per_k": 0.1})
        recs.append({**base, "setting": "b0.1", "column": "beta_k=0.1", "top1": 1.0, "top5": 1.0, "info_per_k": 0.5})
    table = format_table(recs)
    header = table.splitlines()[2]
    assert header.index("Orig.") < header.index("Initial") < header.index("β=0.1/k") < header.index("β=10/k")
    assert "Per-Sample L_I / k" in table and "2.500" in table and "0.500" in table and "--" in table


def test_readout_row_from_a_checkpoint(tmp_path, offline_model, chelsea_x):
    readout = pytest.importorskip("iba_core.readout")
    rb = readout.ReadoutBottleneck.create(offline_model, beta_k=1.0)  # untrained: λ ≈ 0.993 everywhere
    path = readout.save_checkpoint(tmp_path / "readout.pt", readout.make_checkpoint(rb))
    row = readout_row(offline_model, chelsea_x, 285, path, batch=4)
    assert row["beta_k"] == 1.0 and row["info_per_k"] > 0 and row["k"] == int(np.prod(rb.config.feature_shape))
    assert 0.0 <= row["top1"] <= row["top5"] <= 1.0
