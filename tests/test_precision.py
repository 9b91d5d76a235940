"""Precision of the network passes: hardware checks, the measured `auto` choice, fidelity of bf16.

Every test holds on every machine: those that depend on the hardware run once per kind of CPU (AVX2 only,
AVX-512, AVX512-BF16, AMX) and with and without a bf16 GPU, faked through `precision.cpu_flags` and
`precision.cuda_bf16` (the `machine` fixture); the fidelity tests that need real bf16 arithmetic skip,
saying why, where the CPU has none.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from iba_core import precision as prec
from iba_core.errors import UserError
from iba_core.network_cache import NetworkCache

from hardware import CPU_KINDS, HAS_BF16


@pytest.fixture(params=[(cpu, gpu) for cpu in CPU_KINDS for gpu in (False, True)],
                ids=lambda p: f"{p[0]}-{'bf16gpu' if p[1] else 'nogpu'}")
def machine(request, monkeypatch) -> tuple[str, bool]:
    """A faked machine: (kind of CPU, whether a bf16 GPU is there)."""
    cpu, gpu = request.param
    monkeypatch.setattr(prec, "cpu_flags", lambda: set(CPU_KINDS[cpu]))
    monkeypatch.setattr(prec, "cuda_bf16", lambda: gpu)
    return cpu, gpu


@pytest.fixture(params=list(CPU_KINDS))
def cpu_kind(request, monkeypatch) -> str:
    """A faked CPU (for tests on the CPU, where a GPU changes nothing)."""
    monkeypatch.setattr(prec, "cpu_flags", lambda: set(CPU_KINDS[request.param]))
    return request.param


def test_the_faked_hardware_decides_what_auto_may_measure(machine):
    cpu, gpu = machine
    assert prec.candidates("cpu") == (["bf16"] if HAS_BF16[cpu] else [])
    assert (prec.unsupported("bf16", "cpu") is None) == HAS_BF16[cpu]
    assert (prec.unsupported("fp16", "cpu") is None) == (cpu == "amx")
    assert prec.candidates("cuda") == (["bf16", "fp16"] if gpu else ["fp16"])
    assert (prec.unsupported("bf16", "cuda") is None) == gpu


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
    monkeypatch.setattr(prec, "cpu_flags", lambda: set(CPU_KINDS["avx2"]))
    assert prec.candidates("cpu") == []
    assert "bf16" in prec.unsupported("bf16", "cpu")
    assert prec.resolve("auto", "cpu", workload=lambda p: (lambda: None)) == "fp32"
    with pytest.raises(UserError, match="not available"):
        prec.resolve("bf16", "cpu")


def test_unknown_precision_is_a_clear_error():
    with pytest.raises(UserError, match="choose one of"):
        prec.unsupported("fp8", "cpu")


def test_fp32_autocast_changes_nothing():
    lin = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    with prec.autocast("fp32", "cpu"):
        assert lin(x).dtype == torch.float32


@pytest.fixture
def real_bf16() -> None:
    """Skip where bf16 cannot run (asked when the test runs, so a faked --cpu-kind counts)."""
    reason = prec.unsupported("bf16", "cpu")
    if reason is not None:
        pytest.skip(f"bf16 cannot run here: {reason}")


@pytest.mark.usefixtures("real_bf16")
def test_bf16_autocast_runs_matmuls_in_bf16():
    lin = torch.nn.Linear(4, 2)
    with prec.autocast("bf16", "cpu"):
        assert lin(torch.randn(3, 4)).dtype == torch.bfloat16


@pytest.mark.usefixtures("real_bf16")
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


def test_auto_records_what_it_chose(cpu_kind, offline_model, offline_stats, chelsea_x):
    """On every kind of machine "auto" records its choice: measured where a lower precision exists, fp32
    (nothing to measure) where none does."""
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    layer = offline_model.spec.default_layer
    res = PerSampleBottleneck.for_network(offline_model, layer, offline_stats,
                                          BottleneckSettings(steps=1)).attribute(chelsea_x, 285)
    assert res.settings.precision == "auto" and res.precision in prec.candidates("cpu") + ["fp32"]
    assert offline_model.memo.precision[("precision", offline_model.key, offline_model.weights_id, layer,
                                         tuple(offline_stats.mean.shape), 10, "cpu")] == res.precision
    if not HAS_BF16[cpu_kind]:
        assert res.precision == "fp32"


def test_auto_is_recorded_even_without_a_lower_precision(cpu_kind):
    memo: dict = {}
    timer = FakeTimer()
    timer.costs = {"fp32": 1.0, "bf16": 0.5, "fp16": 0.7}
    chosen = prec.resolve("auto", "cpu", workload=timer.work, memo=memo, key=("k",), timer=timer)
    assert memo == {("precision", "k"): chosen}
    assert chosen == ("bf16" if HAS_BF16[cpu_kind] else "fp32")


# ---- the memo on disk ---------------------------------------------------------------------------------


@pytest.fixture
def memo_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prec, "candidates", lambda device: ["bf16"])
    return tmp_path / "precision.json"


def _measured(timer_costs: dict, calls: list):
    timer = FakeTimer()
    timer.costs = timer_costs

    def workload(p):
        calls.append(p)
        return timer.work(p)

    return workload, timer


def test_the_disk_memo_saves_a_measurement_across_processes(memo_file):
    calls: list = []
    workload, timer = _measured({"fp32": 1.0, "bf16": 0.5}, calls)
    assert prec.resolve("auto", "cpu", workload, key=("net",), timer=timer, persist=True) == "bf16"
    assert calls == ["fp32", "bf16"] and memo_file.is_file()
    assert prec.resolve("auto", "cpu", workload, key=("net",), timer=timer, persist=True) == "bf16"
    assert calls == ["fp32", "bf16"]  # read from the memo: not measured again


@pytest.mark.parametrize("garbage", ["{not json", "[1, 2]", json.dumps({"net | x": 5}),
                                     json.dumps({"version": 1, "checksum": "0", "data": {"a": "bf16"}})])
def test_a_garbled_memo_is_measured_again_and_repaired(memo_file, garbage):
    memo_file.write_text(garbage)
    calls: list = []
    workload, timer = _measured({"fp32": 1.0, "bf16": 0.5}, calls)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert prec.resolve("auto", "cpu", workload, key=("net",), timer=timer, persist=True) == "bf16"
    assert calls == ["fp32", "bf16"]  # never a crash: measured again
    assert any("precision.json" in str(w.message) for w in seen)
    from iba_core.cache import load_json

    assert set(load_json(memo_file).values()) == {"bf16"}  # rewritten, sound


def test_wrong_types_in_a_sound_memo_are_ignored_and_dropped(memo_file):
    from iba_core.cache import load_json, save_json

    save_json(memo_file, {"other": 7, "else": "fp64", "kept": "fp32"})
    calls: list = []
    workload, timer = _measured({"fp32": 1.0, "bf16": 0.5}, calls)
    assert prec.resolve("auto", "cpu", workload, key=("net",), timer=timer, persist=True) == "bf16"
    assert calls and set(load_json(memo_file)) == {"kept", next(k for k in load_json(memo_file) if k != "kept")}
    assert all(v in ("fp32", "bf16") for v in load_json(memo_file).values())


# ---- saying beforehand whether a run measures -----------------------------------------------------------


@pytest.mark.parametrize("state", ["fresh", "in memory", "on disk", "garbled disk memo", "fp32 asked"])
def test_would_measure_is_true_exactly_when_resolve_then_measures(memo_file, state):
    """The app's notice ("this first run also measures which precision is fastest") follows would_measure:
    it must say True exactly when resolve goes on to measure, and False once a choice is remembered."""
    memo: dict = {}
    precision = "fp32" if state == "fp32 asked" else "auto"
    if state == "in memory":
        memo[("precision", "net")] = "bf16"
    if state == "on disk":
        workload, timer = _measured({"fp32": 1.0, "bf16": 0.5}, [])
        prec.resolve("auto", "cpu", workload, key=("net",), timer=timer, persist=True)  # another process
    if state == "garbled disk memo":
        memo_file.write_text("{not json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the garbled memo is warned about (tested above)
        predicted = prec.would_measure(precision, "cpu", memo=memo, key=("net",), persist=True)
        calls: list = []
        workload, timer = _measured({"fp32": 1.0, "bf16": 0.5}, calls)
        prec.resolve(precision, "cpu", workload, memo=memo, key=("net",), timer=timer, persist=True)
    assert predicted == bool(calls)
    assert predicted == (state in ("fresh", "garbled disk memo"))
    assert not prec.would_measure(precision, "cpu", memo=memo, key=("net",), persist=True)  # remembered now


def test_would_measure_is_false_without_a_lower_precision(cpu_kind):
    assert prec.would_measure("auto", "cpu") == HAS_BF16[cpu_kind]
    assert not prec.would_measure("fp32", "cpu")


def test_a_bottleneck_says_whether_its_run_will_measure(cpu_kind, offline_model, offline_stats, chelsea_x,
                                                        monkeypatch, tmp_path):
    """PerSampleBottleneck.measures_precision: True before the first "auto" run where the CPU has bf16, False
    after it (memo), in a new process (disk memo), for fp32, and on a CPU without bf16."""
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(offline_model, "memo", NetworkCache())  # nothing measured in this "process" yet
    measured: list = []

    def fastest(options, timer=None, repeats=3):  # the choice without the seconds of timing it
        measured.append(sorted(options))
        return "fp32", {}

    monkeypatch.setattr(prec, "fastest", fastest)
    layer = offline_model.spec.default_layer

    def bottleneck(precision: str = "auto") -> PerSampleBottleneck:
        return PerSampleBottleneck.for_network(offline_model, layer, offline_stats,
                                               BottleneckSettings(steps=1, precision=precision))

    assert not bottleneck("fp32").measures_precision()
    before = bottleneck().measures_precision()
    assert before == HAS_BF16[cpu_kind]
    bottleneck().attribute(chelsea_x, 285)
    assert bool(measured) == before  # it measured exactly when it said it would
    assert not bottleneck().measures_precision()
    monkeypatch.setattr(offline_model, "memo", NetworkCache())  # a new process: the disk memo remembers
    assert not bottleneck().measures_precision()
    # a folder's batch of images runs under the one image's choice: nothing more to measure
    bottleneck().attribute_batch(torch.cat([chelsea_x, chelsea_x]), [285, 285])
    assert len(measured) == int(before)
