"""iba_core.network_cache: the one typed cache a network keeps, one eviction rule (the least recently used goes)."""
from __future__ import annotations

import pytest
import torch

from iba_core.network_cache import NetworkCache, Recent, cache_of


def test_recent_drops_the_least_recently_used_entry() -> None:
    kept = Recent(2)
    kept["a"], kept["b"] = 1, 2
    assert kept["a"] == 1  # read: now the most recent
    kept["c"] = 3
    assert list(kept) == ["a", "c"] and "b" not in kept
    made = []
    assert kept.get_or_make("d", lambda: made.append("d") or 4) == 4
    assert kept.get_or_make("d", lambda: made.append("again") or 5) == 4 and made == ["d"]
    assert list(kept) == ["c", "d"] and len(kept) == 2
    with pytest.raises(ValueError):
        Recent(0)


def test_every_kind_has_a_bound_and_clear_empties_all() -> None:
    cache = NetworkCache()
    for name, kept in cache.kinds().items():
        assert isinstance(kept, Recent) and kept.limit >= 1, name
        for i in range(kept.limit + 3):
            kept[i] = i
        assert len(kept) == kept.limit  # nothing grows without bound
    cache.clear()
    assert all(len(kept) == 0 for kept in cache.kinds().values())
    assert NetworkCache().splits is not NetworkCache().splits  # one per network


@pytest.fixture
def net(tmp_path, monkeypatch):
    """EfficientNet-Lite0 with random weights and a private disk cache: a fresh NetworkCache."""
    from iba_core.networks import load_network

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return load_network("efficientnet_lite0", weights="random")


def test_a_network_keeps_its_splits_and_layer_table_typed(net) -> None:
    layer = net.spec.default_layer
    assert cache_of(net) is net.memo
    split = net.fast_split(layer)
    assert net.memo.splits[("stages", layer)] is split and net.fast_split(layer) is split
    table = net.layer_table()
    assert net.memo.layer_table[()] == table
    assert cache_of(object()) is None and cache_of(type("Bare", (), {"memo": {}})()) is None


def test_bottlenecks_built_without_a_network_share_one_precision_key(net) -> None:
    """from_split twice on alike modules: one key (measured once, kept on disk), not one per instance."""
    from iba_core.feature_stats import FeatureStats
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    layer = net.spec.default_layer
    prefix, suffix = net.split(layer)
    with torch.no_grad():
        shape = tuple(prefix.eval()(torch.zeros(1, 3, net.spec.crop, net.spec.crop)).shape[1:])
    stats = FeatureStats(torch.zeros(shape), torch.ones(shape), 10)
    one, two = (PerSampleBottleneck.from_split(prefix, suffix, stats, BottleneckSettings(steps=1)) for _ in range(2))
    assert one._precision_key(torch.device("cpu")) == two._precision_key(torch.device("cpu"))
    other = PerSampleBottleneck.from_split(prefix, torch.nn.Sequential(suffix, torch.nn.Identity()), stats)
    assert other._precision_key(torch.device("cpu")) != one._precision_key(torch.device("cpu"))
