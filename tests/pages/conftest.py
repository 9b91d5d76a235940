"""Fixtures for the page tests: a private cache, small statistics, AppTest helpers."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest
from streamlit.testing.v1 import AppTest

from iba_core.methods.base import Method
from page_helpers import assert_clean, png_of_chelsea

APP = Path(__file__).resolve().parents[2] / "app.py"
#: Seconds an AppTest script run may take; generous because CI machines vary.
TIMEOUT = 180
#: Crops behind the statistics in tests (the app's default is 1000).
STATS_SAMPLES = 32


@pytest.fixture(scope="session")
def page_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One statistics cache for all page tests: computed once, shared."""
    return tmp_path_factory.mktemp("iba_page_cache")


@pytest.fixture(scope="module", autouse=True)
def app_environment(page_cache: Path) -> Iterator[Path]:
    """Private cache and small statistics for the app, undone after each module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_CACHE_DIR", str(page_cache))
        mp.setenv("IBA_STATS_SAMPLES", str(STATS_SAMPLES))
        yield page_cache


@pytest.fixture
def app() -> AppTest:
    """A fresh AppTest of app.py, already run once (Home page)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    return at.run()


@pytest.fixture
def open_page(app: AppTest) -> Callable[[str], AppTest]:
    """Switch to pages/<name>.py and run it; fails on any exception shown in the app."""

    def go(name: str) -> AppTest:
        app.switch_page(f"pages/{name}.py").run()
        assert_clean(app)
        return app

    return go


@pytest.fixture(scope="session")
def chelsea_png() -> bytes:
    return png_of_chelsea()


@pytest.fixture
def lock_waits(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per time a page takes the shared network's lock: whether it shows that it waits (through
    `pages.widgets.progress.network_turn`, which passes `on_wait`) rather than taking the lock bare."""
    from iba_core.app.state import SharedModel

    seen: list[bool] = []
    busy = SharedModel.busy

    def recording(self, on_wait=None, poll_s=None):
        seen.append(on_wait is not None)
        return busy(self, on_wait, poll_s)

    monkeypatch.setattr(SharedModel, "busy", recording)
    return seen


@pytest.fixture
def calls(monkeypatch) -> list[tuple[str, dict]]:
    """(key, settings) of every map the app computes; the maps themselves are real."""
    seen: list[tuple[str, dict]] = []
    real = Method.attribute

    def counting(self, network, x, target):
        seen.append((self.key, dict(self.settings)))
        return real(self, network, x, target)

    monkeypatch.setattr(Method, "attribute", counting)
    return seen


@pytest.fixture
def downloads(monkeypatch) -> dict:
    """What the download buttons hand out, by file name: a function giving the bytes (deferred ones are
    produced on demand, as a click would)."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    files: dict = {}
    add, add_deferred = MediaFileManager.add, MediaFileManager.add_deferred

    def record_add(self, data, mimetype, coordinates, file_name=None, is_for_static_download=False):
        if file_name:
            files[file_name] = lambda: data
        return add(self, data, mimetype, coordinates, file_name=file_name,
                   is_for_static_download=is_for_static_download)

    def record_deferred(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        if file_name:
            files[file_name] = data_callable
        return add_deferred(self, data_callable, mimetype, coordinates, file_name=file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add", record_add)
    monkeypatch.setattr(MediaFileManager, "add_deferred", record_deferred)
    return files
