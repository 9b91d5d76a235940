"""The README's screenshots: every page of the app at 1280 × 800, after its main action.

Starts `streamlit run app.py` (headless, a free port, a fresh cache folder), opens each page in Chromium through
Playwright, runs what the page is for (with small settings where the defaults would take long on a CPU) and saves
assets/screenshots/<page>.png, each at most 300 KB (full colour when it fits, else a dithered palette). From the
repository root:

    python scripts/screenshots.py [--pages home per_sample beta_layer compare evaluate] [--out DIR]

- home: the explanation and the precomputed example;
- per_sample: a run with the paper's defaults, the replay panel (step slider) beside the image;
- beta_layer: a grid with the paper's settings: the β row on one bits/pixel scale, each layer map on its own, the lost class;
- compare: the default methods and the shipped Readout, the bits maps on one scale;
- evaluate: degradation curves (9 points per curve) for the default methods, with the table.
"""
from __future__ import annotations

import argparse
import io
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 800}
MAX_BYTES = 300_000
STARTUP_S = 120
RUN_MS = 600_000  # a cold CPU run (a grid of ten bottlenecks) can take minutes


# ---- the server --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cache: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` on a free port with its own cache folder; returns (process, url) once healthy."""
    port = free_port()
    env = {**os.environ, "IBA_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--theme.base", "light"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"streamlit did not answer within {STARTUP_S} s:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- small PNGs --------------------------------------------------------------------------------------------


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def small_png(png: bytes, limit: int = MAX_BYTES) -> bytes:
    """The screenshot as a PNG of at most `limit` bytes, at full size: full colour if it fits, else a palette
    (dithered, which keeps the heatmaps' gradients) of 256, then fewer colours."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    data = _png(image)
    for colours in (256, 192, 128, 96, 64):
        if len(data) <= limit:
            break
        palette = image.quantize(colours, method=Image.Quantize.FASTOCTREE)
        data = _png(image.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG))
    return data


# ---- the pages ---------------------------------------------------------------------------------------------


def wait_idle(page, extra_ms: int = 800) -> None:
    """Wait until the script run is over (no "Running…" status widget) and Plotly has drawn."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=RUN_MS)
    page.wait_for_timeout(extra_ms)


def scroll_to(page, locator, offset: int = 70) -> None:
    """Scroll the app's main area so that `locator` sits just under the top bar."""
    locator.first.scroll_into_view_if_needed()
    locator.first.evaluate(
        f"(el) => {{ const box = el.getBoundingClientRect();"
        f" const main = document.querySelector('[data-testid=\"stMain\"]') || document.scrollingElement;"
        f" main.scrollBy(0, box.top - {offset}); window.scrollBy(0, box.top - {offset}); }}")
    page.wait_for_timeout(400)


def set_number(page, label: str, value: int) -> None:
    field = page.get_by_role("spinbutton", name=label)
    field.fill(str(value))
    field.press("Tab")


def home(page, url: str, expect) -> str:
    page.goto(url)
    expect(page.get_by_text("Information used")).to_be_visible()
    wait_idle(page)
    scroll_to(page, page.get_by_text("Explore", exact=True), offset=20)
    return ""


def per_sample(page, url: str, expect) -> str:
    page.goto(f"{url}/per_sample")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text("Information used")).to_be_visible(timeout=RUN_MS)
    wait_idle(page)
    slider = page.get_by_role("slider", name="Replay step")
    if slider.count() == 0:
        note = "no replay slider on the Per-Sample page yet"
    else:
        note = ""
        slider.first.focus()
        for _ in range(3):  # back to step 7 of 10: the replay, not just the end state
            slider.first.press("ArrowLeft")
        wait_idle(page)
    scroll_to(page, page.get_by_role("heading", name="Per-Sample Bottleneck"), offset=20)
    return note


def beta_layer(page, url: str, expect) -> str:
    page.goto(f"{url}/beta_layer")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Compute grid").click()  # the paper's settings: ten runs, ~1 min on a CPU
    expect(page.get_by_text("The grid is ready below.")).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    # From the grid's caption down: the checkbox, the lost-class warning and both rows with their colour bars.
    scroll_to(page, page.get_by_text("steps × batch"), offset=16)
    return ""


def compare(page, url: str, expect) -> str:
    page.goto(f"{url}/compare")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.get_by_role("button", name="Download grid (PNG)")).to_be_visible(timeout=RUN_MS)
    wait_idle(page)
    scroll_to(page, page.get_by_role("heading", name="Maps"))
    return ""


def evaluate(page, url: str, expect) -> str:
    page.goto(f"{url}/evaluate")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    set_number(page, "Points per curve", 9)
    page.get_by_role("button", name="Compute curves").click()
    expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    scroll_to(page, page.get_by_role("heading", name="Degradation (MoRF / LeRF)"))
    return ""


PAGES: dict[str, Callable] = {"home": home, "per_sample": per_sample, "beta_layer": beta_layer,
                              "compare": compare, "evaluate": evaluate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", nargs="+", choices=list(PAGES), default=list(PAGES))
    parser.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} not found: install Debian's chromium package")
    from playwright.sync_api import expect, sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="iba-screens-") as tmp:
        proc, url = start_server(Path(tmp) / "cache", Path(tmp) / "streamlit.log")
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                            args=["--no-sandbox", "--disable-background-networking"])
                try:
                    for name in args.pages:
                        page = browser.new_page(viewport=VIEWPORT)
                        page.set_default_timeout(180_000)
                        expect.set_options(timeout=180_000)
                        start = time.monotonic()
                        note = PAGES[name](page, url, expect)
                        errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
                        if errors.count():
                            note = (note + "; " if note else "") + f"errors on the page: {errors.all_inner_texts()}"
                        page.mouse.move(VIEWPORT["width"] - 5, VIEWPORT["height"] - 5)  # no hover tool bars in the picture
                        page.wait_for_timeout(300)
                        data = small_png(page.screenshot())
                        path = args.out / f"{name}.png"
                        path.write_bytes(data)
                        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                              f"{len(data) / 1000:.0f} kB, {time.monotonic() - start:.0f} s"
                              + (f" — {note}" if note else ""))
                        if note:
                            notes.append(f"{name}: {note}")
                        page.close()
                finally:
                    browser.close()
        finally:
            stop_server(proc)
    if notes:
        print("Notes:\n  " + "\n  ".join(notes))


if __name__ == "__main__":
    main()
