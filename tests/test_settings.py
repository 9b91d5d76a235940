"""iba_core.settings: what the environment sets."""
from __future__ import annotations

from iba_core import settings


def test_stats_samples_reads_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(settings.STATS_SAMPLES_ENV, raising=False)
    assert settings.stats_samples() == settings.RECOMMENDED_SAMPLES == 1000
    monkeypatch.setenv(settings.STATS_SAMPLES_ENV, "32")
    assert settings.stats_samples() == 32
    for bad in ("", "zero", "-5", "0", "1.5"):
        monkeypatch.setenv(settings.STATS_SAMPLES_ENV, bad)
        assert settings.stats_samples() == 1000


def test_torch_threads_leave_a_core_for_the_server(monkeypatch) -> None:
    monkeypatch.delenv(settings.THREADS_ENV, raising=False)
    assert settings.torch_threads() >= 1
    monkeypatch.setenv(settings.THREADS_ENV, "3")
    assert settings.torch_threads() == 3
    monkeypatch.setenv(settings.THREADS_ENV, "lots")
    assert settings.torch_threads() >= 1


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(settings.CACHE_DIR_ENV, str(tmp_path))
    assert settings.cache_dir() == tmp_path
