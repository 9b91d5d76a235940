"""iba_core.app.maps: attribution maps and grids kept across reruns."""
from __future__ import annotations

import pytest
import torch

from app_helpers import fake_map, fake_network
from iba_core.app import maps
from iba_core.methods.base import Method
from iba_core.networks import get_spec
from iba_core.per_sample import BottleneckSettings

X = torch.zeros(1, 3, 224, 224)


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, dict]]:
    """Every method's `attribute` records (key, settings) and returns a fake map instead of computing."""
    seen: list[tuple[str, dict]] = []

    def attribute(self, network, x, target):
        seen.append((self.key, dict(self.settings)))
        return fake_map(self.key)

    monkeypatch.setattr(Method, "attribute", attribute)
    return seen


def test_map_cache_computes_each_map_once(calls) -> None:
    network = fake_network()
    cache = maps.MapCache()
    seen = []
    first = cache.maps(network, X, "img", 3, ["saliency", "gradient"],
                       on_map=lambda k, e, cached: seen.append((k, cached)))
    assert list(first) == ["saliency", "gradient"] and [k for k, _ in calls] == ["saliency", "gradient"]
    assert first["saliency"].png.startswith(b"\x89PNG")
    cache.maps(network, X, "img", 3, ["saliency", "gradient", "grad_cam"],
               on_map=lambda k, e, cached: seen.append((k, cached)))
    assert [k for k, _ in calls] == ["saliency", "gradient", "grad_cam"] and cache.computed == 3
    assert seen[2:] == [("saliency", True), ("gradient", True), ("grad_cam", False)]
    cache.maps(network, X, "img", 4, ["saliency"])  # other class: new map
    assert calls[-1][0] == "saliency" and cache.computed == 4


def test_map_cache_reports_progress_for_computed_maps(calls) -> None:
    progress = []
    maps.MapCache().maps(fake_network(), X, "img", 0, ["saliency", "gradient"],
                         progress=lambda *a: progress.append(a))
    assert progress == [(0, 2, "Saliency"), (1, 2, "Gradient"), (2, 2, "done")]


def test_map_cache_passes_settings_and_renames(calls) -> None:
    cache = maps.MapCache()
    out = cache.maps(fake_network(), X, "img", 0, ["readout"], settings={"readout": {"checkpoint": "a.pt"}},
                     names={"readout": "Readout (a.pt)"})
    assert calls == [("readout", {"checkpoint": "a.pt"})]
    assert out["readout"].amap.name == "Readout (a.pt)"
    # Another checkpoint is another map; the same one is cached.
    cache.maps(fake_network(), X, "img", 0, ["readout"], settings={"readout": {"checkpoint": "b.pt"}})
    cache.maps(fake_network(), X, "img", 0, ["readout"], settings={"readout": {"checkpoint": "a.pt"}})
    assert [s["checkpoint"] for _, s in calls] == ["a.pt", "b.pt"]


def test_map_cache_reports_errors_and_skips(monkeypatch) -> None:
    def attribute(self, network, x, target):
        raise RuntimeError("boom")

    monkeypatch.setattr(Method, "attribute", attribute)
    errors = []
    out = maps.MapCache().maps(fake_network(), X, "i", 0, ["saliency"], on_error=lambda k, e: errors.append(k))
    assert out == {} and errors == ["saliency"]
    with pytest.raises(RuntimeError):
        maps.MapCache().maps(fake_network(), X, "i", 0, ["saliency"])
    errors.clear()
    maps.MapCache().maps(fake_network(), X, "i", 0, ["nope"], on_error=lambda k, e: errors.append(k))
    assert errors == ["nope"]  # an unknown key is an error of that method, not of the page


def test_missing_lists_the_maps_not_cached_yet(calls) -> None:
    network, cache = fake_network(), maps.MapCache()
    cache.maps(network, X, "img", 1, ["saliency"])
    assert cache.missing(network, "img", 1, ["saliency", "iba_10"]) == ["iba_10"]
    assert cache.missing(network, "img", 2, ["saliency"]) == ["saliency"]
    assert cache.missing(fake_network(weights_id="other"), "img", 1, ["saliency"]) == ["saliency"]


def test_cache_is_bounded_oldest_first(calls) -> None:
    cache = maps.MapCache(max_entries=2)
    for target in range(3):
        cache.maps(fake_network(), X, "img", target, ["saliency"])
    assert [k[3] for k in cache.entries] == [1, 2]


def test_map_key_depends_on_settings_not_their_order() -> None:
    network = fake_network()
    a = maps.map_key("i", network, 1, "m", {"steps": 8, "batch": 2})
    assert a == maps.map_key("i", network, 1, "m", {"batch": 2, "steps": 8})
    assert a != maps.map_key("i", network, 1, "m", {"steps": 9, "batch": 2})
    assert maps.map_key("i", network, 1, "m") == maps.map_key("i", network, 1, "m", {})
    hash(maps.map_key("i", network, 1, "m", {"stats": object()}))  # objects by their repr: still hashable


def test_keep_drops_the_oldest() -> None:
    entries: dict = {}
    for i in range(5):
        maps.keep(entries, i, str(i), max_entries=3)
    assert entries == {2: "2", 3: "3", 4: "4"}


def test_grid_key_changes_with_every_input() -> None:
    spec = get_spec("efficientnet_lite0")
    network, s = fake_network(spec=spec), BottleneckSettings(steps=3)
    key = maps.grid_key("img", network, "block3_2", 285, s, None, 32)
    assert key == maps.grid_key("img", network, "block3_2", 285, BottleneckSettings(steps=3), None, 32)
    assert key.digest == maps.grid_key("img", network, "block3_2", 285, s, None, 32).digest  # the disk cache's name
    others = [
        maps.grid_key("other", network, "block3_2", 285, s, None, 32),
        maps.grid_key("img", fake_network(weights_id="x", spec=spec), "block3_2", 285, s, None, 32),
        maps.grid_key("img", network, "stem", 285, s, None, 32),
        maps.grid_key("img", network, "block3_2", 281, s, None, 32),
        maps.grid_key("img", network, "block3_2", 285, BottleneckSettings(steps=4), None, 32),
        maps.grid_key("img", network, "block3_2", 285, s, "/photos", 32),
        maps.grid_key("img", network, "block3_2", 285, s, None, 64),
        maps.grid_key("img", network, "block3_2", 285, s, None, 32, layers=["stem", "head"]),
    ]
    assert len({k.digest for k in others}) == len(others) and key.digest not in {k.digest for k in others}
    assert key not in others and len(set(others)) == len(others)
