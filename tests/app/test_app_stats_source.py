"""iba_core.app.stats_source: which feature statistics a run uses."""
from __future__ import annotations

import pytest
from PIL import Image

from iba_core.app import stats_source


@pytest.fixture
def random_net(tmp_path, monkeypatch):
    from iba_core.networks import load_network

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return load_network("efficientnet_lite0", weights="random")


def test_choose_stats_prefers_folder_then_best_cached(tmp_path, random_net, monkeypatch) -> None:
    monkeypatch.setenv("IBA_STATS_SAMPLES", "1000")
    with pytest.raises(FileNotFoundError, match="not found"):
        stats_source.choose_stats(random_net, "stem", folder=tmp_path / "missing")
    assert "Not estimated yet for stem" in stats_source.stats_status(random_net, "stem")

    calls = []
    fresh = stats_source.choose_stats(random_net, "stem", n=4, progress=lambda d, t, label: calls.append((d, t)))
    assert fresh.n == 4 and calls[-1] == (4, 4)
    monkeypatch.setenv("IBA_STATS_SAMPLES", "4")
    assert stats_source.stats_status(random_net, "stem").startswith("Ready:")

    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(3):
        Image.new("RGB", (64, 48), (40 * i, 90, 200)).save(folder / f"{i}.png")
    from_folder = stats_source.choose_stats(random_net, "stem", folder=str(folder), n=10)
    assert from_folder.n == 3 and "folder" in from_folder.source

    again = stats_source.choose_stats(random_net, "stem", n=2)  # cached ones with ≥ 2 samples: the largest wins
    assert again.n == 4 and again.source == fresh.source


def test_stats_for_methods_only_when_a_method_needs_them(random_net, monkeypatch) -> None:
    monkeypatch.setenv("IBA_STATS_SAMPLES", "3")
    assert stats_source.stats_for_methods(random_net, ["saliency", "grad_cam"]) is None
    assert stats_source.stats_for_methods(random_net, []) is None
    calls = []
    stats = stats_source.stats_for_methods(random_net, ["saliency", "iba_10"], progress=lambda d, t, label: calls.append(t))
    assert stats.n == 3 and stats.layer == random_net.spec.default_layer and calls


def test_the_progress_line_shows_the_time_left() -> None:
    assert stats_source.seconds_left(0, 100, 5.0) is None
    assert stats_source.seconds_left(25, 100, 10.0) == pytest.approx(30.0)
    assert stats_source.stats_progress_text("stem", 25, 100, 10.0) == (
        "Estimating feature statistics for stem: 25 / 100 images, about 30 s left")
    assert stats_source.stats_progress_text("stem", 10, 100, 60.0).endswith("about 9 min left")
    assert stats_source.stats_progress_text("stem", 100, 100, 60.0).endswith("100 / 100 images")


def test_the_out_of_domain_warning_says_how_many_samples_and_how_to_get_more(random_net, monkeypatch) -> None:
    from iba_core.feature_stats import PHOTO_SAMPLES

    monkeypatch.setattr(stats_source, "is_card_network", lambda network: True)
    monkeypatch.delenv("IBA_STATS_SAMPLES", raising=False)
    text = stats_source.domain_warning(random_net)
    assert f"{PHOTO_SAMPLES} augmented crops" in text and "IBA_STATS_SAMPLES" in text and "stats_images" in text
    monkeypatch.setenv("IBA_STATS_SAMPLES", "300")
    assert "300 augmented crops" in stats_source.domain_warning(random_net)
    assert stats_source.domain_warning(random_net, "/some/folder") is None
