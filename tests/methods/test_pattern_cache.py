"""PatternAttribution's caches: patterns on disk through `iba_core.cache` (safe names, identity checked,
damaged files rebuilt) and the graph analysis in `network.memo`, never in module state."""
from __future__ import annotations

import re
import shutil
import weakref
from types import ModuleType, SimpleNamespace

import pytest
import torch
from torch import nn

from iba_core.methods.pattern import Patterns, get_patterns, pattern_graph, patterns_cache_path, source_key
from iba_core.networks import network_from_module


def _toy(key: str):
    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 4, 5, stride=4), nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(2),
                          nn.Flatten(), nn.Linear(16, 3))
    return network_from_module(model, key, categories=["a", "b", "c"], weights_id="w1")


@pytest.fixture
def estimations(monkeypatch):
    """Counts the estimations `get_patterns` runs."""
    from iba_core.methods.pattern import estimation

    calls = []
    real = estimation.compute_patterns

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(estimation, "compute_patterns", counted)
    return calls


# ---- on disk -----------------------------------------------------------------------------------


def test_card_and_torchvision_keys_give_valid_distinct_file_names():
    paths = [patterns_cache_path(key, "w1", source_key(None, 3))
             for key in ("card:/some/dir/card.toml", "torchvision:resnet18", "card:/some/dir/other.toml")]
    assert len({p.name for p in paths}) == 3 and len({p.parent for p in paths}) == 1
    for path in paths:
        assert path.parent.name == "patterns" and re.fullmatch(r"[A-Za-z0-9._-]+\.npz", path.name), path.name
    assert "card" in paths[0].name and "resnet18" in paths[1].name  # readable


def test_a_card_network_saves_and_reloads_its_patterns(estimations):
    key = "card:/some/dir/card.toml"
    first = get_patterns(_toy(key), n=2)
    path = patterns_cache_path(key, "w1", source_key(None, 2))
    assert path.is_file() and len(estimations) == 1
    again = get_patterns(_toy(key), n=2)  # a new network object: from disk
    assert len(estimations) == 1 and again.n == 2 and again.source == first.source
    assert list(again.tensors) == list(first.tensors)
    for name, tensor in first.tensors.items():
        torch.testing.assert_close(again.tensors[name], tensor, rtol=0, atol=0)


def test_a_truncated_file_is_warned_about_and_rebuilt_with_the_same_numbers(estimations):
    first = get_patterns(_toy("toy_truncated"), n=2)
    path = patterns_cache_path("toy_truncated", "w1", source_key(None, 2))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="unusable"):
        rebuilt = get_patterns(_toy("toy_truncated"), n=2)
    assert len(estimations) == 2
    for name, tensor in first.tensors.items():  # same seed, same photos: the same patterns
        torch.testing.assert_close(rebuilt.tensors[name], tensor, rtol=0, atol=0)
    assert Patterns.load(path).n == 2  # the rebuilt file is whole again


def test_identity_is_checked_on_load(estimations, tmp_path):
    get_patterns(_toy("toy_identity"), n=2)
    path = patterns_cache_path("toy_identity", "w1", source_key(None, 2))
    expect = {"network": "toy_identity", "weights": "w1", "source_key": source_key(None, 2)}
    assert Patterns.load(path, expect=expect) is not None
    for other in ({"weights": "w2"}, {"source_key": source_key(None, 3)}, {"network": "torchvision:resnet18"}):
        copy = tmp_path / "copy.npz"
        shutil.copy(path, copy)
        with pytest.warns(UserWarning, match="another " + next(iter(other))):
            assert Patterns.load(copy, expect={**expect, **other}) is None
        assert not copy.exists()
    assert len(estimations) == 1


def test_another_architecture_under_the_same_key_is_estimated_again(estimations):
    get_patterns(_toy("toy_architecture"), n=2)
    assert len(estimations) == 1

    other = _toy("toy_architecture")
    other.model[5] = nn.Linear(16, 5)  # the same layer names, another shape: the file belongs to another network
    with pytest.warns(UserWarning, match="another network"):
        patterns = get_patterns(other, n=2)
    assert len(estimations) == 2 and tuple(patterns.tensors["5"].shape) == (5, 16)

    renamed = network_from_module(nn.Sequential(nn.Conv2d(3, 4, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(3),
                                                nn.Flatten(), nn.Linear(36, 3)), "toy_architecture",
                                  categories=["a", "b", "c"], weights_id="w1")
    with pytest.warns(UserWarning, match="another layers"):  # other layer names: another identity
        get_patterns(renamed, n=2)
    assert len(estimations) == 3


# ---- the graph analysis in network.memo --------------------------------------------------------


def test_the_graph_lives_in_each_networks_memo():
    a, b = _toy("toy_memo_a"), _toy("toy_memo_b")
    graph_a = pattern_graph(a)
    assert pattern_graph(a) is graph_a  # kept
    assert a.memo.pattern_graph[()][1] is graph_a
    graph_b = pattern_graph(b)
    assert graph_b is not graph_a and b.memo.pattern_graph[()][1] is graph_b
    twin = network_from_module(a.model, "toy_memo_a", weights_id="w1")  # the same model, another network
    assert pattern_graph(twin) is not graph_a
    a.memo.clear()
    assert pattern_graph(a) is not graph_a  # it went with the memo

    a.model[1] = nn.GELU()  # the structure changed: analysed again, and now refused
    with pytest.raises(ValueError, match="GELU"):
        pattern_graph(a)
    bare = SimpleNamespace(model=_toy("toy_memo_bare").model, device=torch.device("cpu"))  # no memo
    assert pattern_graph(bare) is not pattern_graph(bare)


def _module_state(package: ModuleType) -> dict[str, object]:
    """Every mutable container at module level in the package's modules, as a comparable snapshot."""
    import sys

    state = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == package.__name__ or name.startswith(package.__name__ + ".")):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, (weakref.WeakKeyDictionary, weakref.WeakValueDictionary)):
                state[f"{name}.{attr}"] = ("weak", len(value))
            elif isinstance(value, (dict, list, set)) and not attr.startswith("__"):
                state[f"{name}.{attr}"] = repr(value)
    return state


def test_the_package_keeps_no_cache_in_module_state():
    from iba_core.methods import pattern

    before = _module_state(pattern)
    assert not [k for k, v in before.items() if isinstance(v, tuple) and v[0] == "weak"]
    assert len([k for k in before if ".estimation." in k or ".graph." in k or ".layer_kinds." in k]) >= 3
    for i in range(2):
        network = _toy(f"toy_state_{i}")
        pattern_graph(network)
        get_patterns(network, n=2)
        pattern_graph(SimpleNamespace(model=network.model, device=torch.device("cpu")))
    assert _module_state(pattern) == before
