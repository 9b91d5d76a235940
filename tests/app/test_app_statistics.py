"""iba_core.app.statistics: which feature statistics a run uses."""
from __future__ import annotations

import pytest
from PIL import Image

from iba_core.app import statistics


@pytest.fixture
def random_net(tmp_path, monkeypatch):
    from iba_core.networks import load_network

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return load_network("efficientnet_lite0", weights="random")


def test_choose_stats_prefers_folder_then_best_cached(tmp_path, random_net, monkeypatch) -> None:
    monkeypatch.setenv("IBA_STATS_SAMPLES", "1000")
    with pytest.raises(FileNotFoundError, match="not found"):
        statistics.choose_stats(random_net, "stem", folder=tmp_path / "missing")
    assert "Not estimated yet for stem" in statistics.stats_status(random_net, "stem")

    calls = []
    fresh = statistics.choose_stats(random_net, "stem", n=4, progress=lambda d, t, label: calls.append((d, t)))
    assert fresh.n == 4 and calls[-1] == (4, 4)
    monkeypatch.setenv("IBA_STATS_SAMPLES", "4")
    assert statistics.stats_status(random_net, "stem").startswith("Ready:")

    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (64, 48), (40 * i, 90, 200)).save(folder / f"{i}.png")
    from_folder = statistics.choose_stats(random_net, "stem", folder=str(folder), n=10)
    assert from_folder.n == 3 and "folder" in from_folder.source

    again = statistics.choose_stats(random_net, "stem", n=2)  # cached ones with ≥ 2 samples: the largest wins
    assert again.n == 4 and again.source == fresh.source


def test_stats_for_methods_only_when_a_method_needs_them(random_net, monkeypatch) -> None:
    monkeypatch.setenv("IBA_STATS_SAMPLES", "3")
    assert statistics.stats_for_methods(random_net, ["saliency", "grad_cam"]) is None
    assert statistics.stats_for_methods(random_net, []) is None
    calls = []
    stats = statistics.stats_for_methods(random_net, ["saliency", "iba_10"], progress=lambda d, t, label: calls.append(t))
    assert stats.n == 3 and stats.layer == random_net.spec.default_layer and calls
