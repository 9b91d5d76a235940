"""A private `streamlit run app.py` and a headless Chromium for the real-browser tests (tests/test_browser*.py)."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
STARTUP_TIMEOUT = 90  # s for the server to answer its health check


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"streamlit did not become healthy within {STARTUP_TIMEOUT} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def streamlit_server(tmp_path: Path, stats_samples: str = "32") -> Iterator[str]:
    """The app on a free localhost port with a private cache; always terminated afterwards."""
    port = free_port()
    env = {**os.environ, "IBA_CACHE_DIR": str(tmp_path / "cache"), "IBA_STATS_SAMPLES": stats_samples}
    log = tmp_path / "streamlit.log"
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.headless", "true", "--server.port", str(port), "--server.address", "127.0.0.1",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def chromium_browser() -> Iterator:
    """Debian's Chromium, headless, through Playwright: a `playwright.sync_api.Browser`, closed afterwards (also when
    the test fails). Skips the test where Chromium is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: the browser test needs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-background-networking"])
        try:
            yield browser
        finally:
            browser.close()


@contextlib.contextmanager
def chromium_page(viewport: tuple[int, int] = (1400, 1200), timeout_ms: int = 120_000) -> Iterator:
    """A page of `chromium_browser` with its timeouts (and `expect`'s) set to `timeout_ms`: loading a network on a
    busy 2-core machine takes a while."""
    from playwright.sync_api import expect

    with chromium_browser() as browser:
        page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        page.set_default_timeout(timeout_ms)
        expect.set_options(timeout=timeout_ms)
        yield page
