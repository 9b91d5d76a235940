"""Precision of the network passes: hardware checks, the measured `auto` choice, fidelity of bf16."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from iba_core import precision as prec


class FakeTimer:
    """perf_counter stand-in: each measured call of option `name` takes `costs[name]` seconds."""

    def __init__(self):
        self.now = 0.0
        self.current = None
        self.costs: dict[str, float] = {}

    def __call__(self) -> float:
        return self.now

    def work(self, name: str):
        def run():
            self.now += self.costs[name]
        return run


@pytest.mark.parametrize("fp32, bf16", [(1.0, 0.4), (1.0, 1.2), (1.0, 1.0)])
def test_auto_never_picks_a_precision_that_measured_slower(monkeypatch, fp32, bf16):
    monkeypatch.setattr(prec, "candidates", lambda device: ["bf16"])
    timer = FakeTimer()
    timer.costs = {"fp32": fp32, "bf16": bf16}
    memo: dict = {}
    chosen = prec.resolve("auto", "cpu", workload=timer.work, memo=memo, key=("net", "layer"), timer=timer)
    assert chosen == ("bf16" if bf16 < fp32 else "fp32")
    timer.costs = {"fp32": 9.0, "bf16": 0.1}  # measured once: the memo answers from now on
    assert prec.resolve("auto", "cpu", workload=timer.work, memo=memo, key=("net", "layer"), timer=timer) == chosen


def test_auto_is_fp32_without_hardware_support(monkeypatch):
    monkeypatch.setattr(prec, "cpu_flags", lambda: {"avx2", "fma"})
    assert prec.candidates("cpu") == []
    assert "bf16" in prec.unsupported("bf16", "cpu")
    assert prec.resolve("auto", "cpu", workload=lambda p: (lambda: None)) == "fp32"
    with pytest.raises(ValueError, match="not available"):
        prec.resolve("bf16", "cpu")


def test_unknown_precision_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of"):
        prec.unsupported("fp8", "cpu")


def test_fp32_autocast_changes_nothing():
    lin = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with prec.autocast("fp32", "cpu"):
        assert lin(x).dtype == torch.float32


BF16 = prec.unsupported("bf16", "cpu")


@pytest.mark.skipif(BF16 is not None, reason=f"bf16 cannot run here: {BF16}")
def test_bf16_autocast_runs_matmuls_in_bf16():
    lin = torch.nn.Linear(4, 2)
    with prec.autocast("bf16", "cpu"):
        assert lin(torch.randn(3, 4)).dtype == torch.bfloat16


@pytest.mark.skipif(BF16 is not None, reason=f"bf16 cannot run here: {BF16}")
def test_bf16_heatmaps_match_fp32_on_the_offline_network(offline_model, offline_stats, chelsea_x):
    """Fidelity guard: the bottleneck's noise dwarfs bf16 rounding (Pearson ≥ 0.99, total bits within 2 %)."""
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    layer = offline_model.spec.default_layer
    runs = {p: PerSampleBottleneck.for_network(offline_model, layer, offline_stats,
                                               BottleneckSettings(seed=0, precision=p)).attribute(chelsea_x, 285)
            for p in ("fp32", "bf16")}
    assert runs["bf16"].precision == "bf16" and runs["fp32"].precision == "fp32"
    r = np.corrcoef(runs["fp32"].heatmap.ravel(), runs["bf16"].heatmap.ravel())[0, 1]
    assert r >= 0.99
    assert runs["bf16"].total_bits == pytest.approx(runs["fp32"].total_bits, rel=0.02)


def test_auto_records_what_it_chose(offline_model, offline_stats, chelsea_x):
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    layer = offline_model.spec.default_layer
    res = PerSampleBottleneck.for_network(offline_model, layer, offline_stats,
                                          BottleneckSettings(steps=1)).attribute(chelsea_x, 285)
    assert res.settings.precision == "auto" and res.precision in prec.candidates("cpu") + ["fp32"]
    assert offline_model.memo[("precision", offline_model.key, offline_model.weights_id, layer,
                               tuple(offline_stats.mean.shape), 10, "cpu")] == res.precision
