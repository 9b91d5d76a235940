"""Bad cache files: statistics that are truncated, tampered with (checksum kept or recomputed) or implausible,
and a garbled precision memo. Each is warned about in one sentence, rebuilt, and never a crash — through the
library and through the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from bad_input_helpers import assert_one_sentence, page_errors, run_cli
from iba_core import cache
from iba_core import feature_stats as fs
from iba_core import precision as prec


class Small(nn.Module):
    """conv → ReLU → conv → pool → linear: a network whose statistics take a moment to estimate."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.relu = nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()
        self.conv2, self.pool, self.fc = nn.Conv2d(4, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.pool(self.conv2(self.relu(self.conv1(x)))).flatten(1))


@pytest.fixture
def network(tmp_path, monkeypatch):
    from iba_core.networks import network_from_module

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return network_from_module(Small().eval(), "small")


LAYER, N = "relu", 8


@pytest.fixture
def cached(network):
    """(the statistics as first estimated, their cache file)."""
    stats = fs.get_stats(network, LAYER, n=N)
    path = fs.stats_cache_path(network.key, network.weights_id, LAYER, fs.stats_source_key(None, N))
    assert path.is_file()
    return stats, path


def _rebuilt(network, first, path, match: str, monkeypatch):
    """get_stats after damage: one warning sentence, estimated again (equal to the first), saved sound."""
    calls = []
    real = fs.compute_all_stats
    monkeypatch.setattr(fs, "compute_all_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytest.warns(UserWarning, match=match) as seen:
        again = fs.get_stats(network, LAYER, n=N)
    assert calls == [1]
    for w in seen:
        assert_one_sentence(str(w.message))
    torch.testing.assert_close(again.mean, first.mean, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(again.std, first.std, rtol=1e-4, atol=1e-6)
    assert fs.FeatureStats.load(path).n == N  # the rebuilt file is sound


def test_a_truncated_statistics_file_is_rebuilt(network, cached, monkeypatch):
    first, path = cached
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    _rebuilt(network, first, path, "unreadable", monkeypatch)


def test_zeroed_std_with_a_recomputed_checksum_fails_validation(network, cached, monkeypatch):
    """A file whose checksum is right but whose σ is zero: 13.2 billion bits before; now rebuilt."""
    first, path = cached
    arrays, meta = cache.load_arrays(path)
    cache.save_arrays(path, {**arrays, "std": np.zeros_like(arrays["std"])}, meta)  # a fresh, matching checksum
    _rebuilt(network, first, path, "σ is zero", monkeypatch)


def test_scaled_statistics_with_the_old_checksum_fail_the_checksum(network, cached, monkeypatch):
    """μ and σ ×10 (79,116 bits instead of 90,013 before): the contents no longer match their checksum."""
    first, path = cached
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["mean"], arrays["std"] = arrays["mean"] * 10, arrays["std"] * 10
    with open(path, "wb") as f:
        np.savez(f, **arrays)  # __meta__ (and its checksum) kept as it was
    _rebuilt(network, first, path, "checksum", monkeypatch)


def test_statistics_of_another_layer_under_this_name_are_rebuilt(network, cached, monkeypatch):
    first, path = cached
    arrays, meta = cache.load_arrays(path)
    cache.save_arrays(path, arrays, {**meta, "layer": "conv2"})
    _rebuilt(network, first, path, "another layer", monkeypatch)


def test_a_damaged_shipped_copy_is_rebuilt_in_the_cache_and_assets_stay(offline_model, tmp_path, monkeypatch):
    """Shipped statistics are copied into the cache before use: a damaged copy is removed from the cache only."""
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    layer = "block6_4"
    key = fs.stats_source_key(None, fs.RECOMMENDED_SAMPLES)
    path = fs.stats_cache_path(offline_model.key, offline_model.weights_id, layer, key)
    shipped = fs.SHIPPED_STATS_DIR / path.name
    assert fs.stored_stats(offline_model, layer) is not None and path.is_file()
    path.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unusable"):
        assert fs.stored_stats(offline_model, layer, n=fs.RECOMMENDED_SAMPLES) is None
    assert shipped.is_file() and not path.exists()
    assert fs.stored_stats(offline_model, layer) is not None  # copied in again


def test_the_stats_command_rebuilds_a_damaged_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    argv = ["stats", "--model", "efficientnet_lite0", "--random-weights", "--layer", "stem", "--n", "4"]
    first = run_cli(argv)
    assert first.code == 0, first.err
    files = list((tmp_path / "stats").glob("*.npz"))
    assert len(files) == 1
    files[0].write_bytes(files[0].read_bytes()[:100])
    with pytest.warns(UserWarning, match="unusable") as seen:
        again = run_cli(argv)
    assert again.code == 0, again.err
    assert json.loads(again.out.strip().splitlines()[-1])["samples"] == 4
    assert_one_sentence(str(seen[0].message))


@pytest.mark.parametrize("garbage", ["{\"truncated", "\x00\x01binary", json.dumps(["a", "list"]),
                                     json.dumps({"version": 1, "checksum": "x", "data": {"k": 3}})])
def test_a_garbled_precision_memo_is_repaired_on_the_next_write(tmp_path, monkeypatch, garbage):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(prec, "candidates", lambda device: ["bf16"])
    memo = tmp_path / "precision.json"
    memo.write_text(garbage)
    with pytest.warns(UserWarning, match="precision.json") as seen:
        chosen = prec.resolve("auto", "cpu", lambda p: (lambda: None), key=("net",), persist=True)
    assert chosen in ("fp32", "bf16")
    assert_one_sentence(str(seen[0].message))
    assert cache.load_json(memo) is not None and set(cache.load_json(memo).values()) == {chosen}


def test_the_app_runs_on_after_its_cached_files_are_damaged(open_page, tmp_path, monkeypatch) -> None:
    """Per-Sample page on a private cache: run once (statistics copied in from the shipped ones, the
    precision memo written), then truncate every cached file; the next run rebuilds them with a warning
    in the log, shows a fresh result and no error."""
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(1)
    at.button(key="ps_run_button").click().run()
    assert not page_errors(at)
    first = at.session_state["ps_run"]
    damaged = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert any(p.suffix == ".npz" for p in damaged)  # the statistics are cached files here
    for path in damaged:
        path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 3)])
    with pytest.warns(UserWarning, match="unusable"):
        at.button(key="ps_run_button").click().run()
    assert not page_errors(at) and not at.exception
    again = at.session_state["ps_run"]
    assert again is not first and again.result.total_bits > 0
