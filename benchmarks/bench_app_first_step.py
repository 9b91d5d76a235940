"""How soon after pressing Run the first live step appears in the browser (offline model, cached stats).

Starts `streamlit run app.py` on a free localhost port (fresh cache: only the shipped statistics), drives
Debian's Chromium with Playwright, presses Run on the Per-Sample page and prints, per run, the seconds from
the click to "Step 1 / 10" and to the finished result. Goals: step 1 within 1 s for every layer once
statistics are cached (they ship for all layers of the offline network). The first run at a layer also
measures the precision once (`auto`, kept on disk), so it is reported apart from the later runs.

    python benchmarks/bench_app_first_step.py [--runs 3]            # the default layer
    python benchmarks/bench_app_first_step.py --layers all --runs 2  # every layer of the offline network
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layers", default="", help="'all' or comma-separated layers (default: the default layer)")
    args = parser.parse_args()
    from iba_core.networks import DEFAULT_NETWORK, get_spec

    spec = get_spec(DEFAULT_NETWORK)
    layers = (list(spec.layers) if args.layers == "all" else [x for x in args.layers.split(",") if x]) or [None]
    from playwright.sync_api import expect, sync_playwright

    port = _free_port()
    cache = tempfile.mkdtemp(prefix="iba-bench-")
    env = {**os.environ, "IBA_CACHE_DIR": cache}  # the shipped default statistics seed this cache
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
         str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-background-networking"])
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            expect.set_options(timeout=180_000)
            page.goto(f"{url}/per_sample")
            expect(page.get_by_text("Top prediction")).to_be_visible()
            summary = []
            for layer in layers:
                if layer is not None:  # pick the layer in the form's select box
                    page.get_by_label("Layer", exact=True).click()
                    page.keyboard.type(layer)
                    page.keyboard.press("Enter")
                    page.wait_for_timeout(300)
                first, done = [], []
                for i in range(args.runs):
                    t0 = time.perf_counter()
                    page.get_by_role("button", name="Run").click()
                    step1 = page.get_by_text("Step 1 /")
                    while step1.count() == 0:  # poll: a 20 ms resolution is plenty for a ~1 s goal
                        page.wait_for_timeout(20)
                    first.append(time.perf_counter() - t0)
                    # the run is over once its last step was shown and the result ("Last run: …") drawn
                    expect(page.get_by_text("Step 10 / 10").first).to_be_visible()
                    expect(page.get_by_text("Last run:").first).to_be_visible()
                    done.append(time.perf_counter() - t0)
                    page.wait_for_timeout(500)
                    print(f"{layer or spec.default_layer} run {i + 1}: step 1 after {first[-1]:.2f} s, "
                          f"result after {done[-1]:.2f} s", flush=True)
                later = first[1:] or first
                summary.append((layer or spec.default_layer, first[0], statistics.median(later)))
            browser.close()
        print("layer, step 1 of the first run (precision measured then), median step 1 of later runs:")
        for name, first_run, median in summary:
            print(f"  {name:<10} {first_run:6.2f} s {median:6.2f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=15)


if __name__ == "__main__":
    main()
