"""Does a long request let others in? A second visitor's Per-Sample run while a long Evaluate request runs, then Stop.

Starts `streamlit run app.py` on a free localhost port (a private cache seeded with the shipped statistics; on
localhost no request budget applies, so the long request runs), and opens two browser sessions in Debian's
Chromium (Playwright, headless; separate contexts, as two people):

- session A, the Evaluate page: the field's yardsticks of its default methods with a small insertion / deletion
  step (--step px, default 24: 2 × 2,092 passes a method, many minutes on 2 cores);
- session B, the Per-Sample page at the offline network's default layer: once A's bar shows its insertion curve,
  B presses Run.

Printed: B's Run → step 1 and → its last step (the issue's goal: B starts within ~10 s; before, B waited for A's
whole request, since A held the network throughout), whether A was still measuring when B's run ended, the
seconds A's bar said "Paused while another visitor's run goes first"; then A presses Stop: seconds until A's bar
is gone and the "Stopped" note shows. Timing depends on the machine's other work: the CPU and the load average are
printed with the figures.

    python3 benchmarks/bench_taking_turns.py
    python3 benchmarks/bench_taking_turns.py --step 8 --steps 10
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' private server and live-view watcher

#: The text A's page shows while B's run goes first (pages/widgets/progress.MADE_WAY_MESSAGE's start).
PAUSED = "Paused while another visitor"


def loadavg() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step", type=int, default=24, help="A's insertion / deletion step in pixels (default 24)")
    parser.add_argument("--steps", type=int, default=10, help="B's optimisation steps T (default 10)")
    args = parser.parse_args()

    import torch
    from playwright.sync_api import expect, sync_playwright

    from browser_helpers import CHROMIUM, streamlit_server
    from live_watch import figures, live_record, open_evaluate, open_page

    from iba_core.app.state import SharedModel
    from iba_core.settings import torch_threads

    print(f"CPU: {cpu_model()} · {len(os.sched_getaffinity(0))} usable cores · torch {torch.__version__} · "
          f"{torch_threads()} torch thread(s) for the app · load average at start {loadavg()}")
    print(f"A: yardsticks of the Evaluate page's default methods at {args.step} px a step; B: a Per-Sample run of "
          f"{args.steps} steps; a long request makes way after holding the network {SharedModel.SHARE_AFTER_S:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="iba-bench-turns-") as tmp, \
            streamlit_server(Path(tmp), stats_samples="1000") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-background-networking"])
        try:
            b = open_page(browser, url, args.steps)
            a = open_evaluate(browser, url, args.step)
            chips = a.locator('[data-testid="stMultiSelect"]').first.inner_text().replace("\n", ", ")
            print(f"A's methods (the page's default): {chips}", flush=True)
            a.get_by_role("button", name="Measure yardsticks").click()
            bar = a.locator('[data-testid="stProgress"]').first
            expect(bar).to_contain_text("Insertion", timeout=600_000)
            print(f"A is measuring: {bar.inner_text()!r}; load average {loadavg()}", flush=True)
            paused_since: list[float] = []
            b.get_by_role("button", name="Run").click()
            start = time.monotonic()
            while not b.evaluate(f"window.__ibaLive.steps.some(s => s.step === {args.steps} && s.of === "
                                 f"{args.steps})"):
                if not paused_since and PAUSED in a.inner_text("body"):
                    paused_since.append(time.monotonic() - start)
                if time.monotonic() - start > 600:
                    raise SystemExit("B's run did not end within 600 s")
                time.sleep(0.2)
            record = figures(live_record(b), args.steps)
            a_still = bar.is_visible() and "Insertion" in bar.inner_text() or "Deletion" in a.inner_text("body")
            print(f"B: Run → step 1 {record['waited'] + record['first']:.1f} s (waiting for its turn "
                  f"{record['waited']:.1f} s); Run → step {args.steps} {time.monotonic() - start:.1f} s; all steps "
                  f"drawn in order: {record['in_order']}; A still measuring then: {'yes' if a_still else 'no'}")
            if paused_since:
                print(f"A's bar said it paused for B {paused_since[0]:.1f} s after B's Run")
            stop = time.monotonic()
            a.locator('.st-key-ev_yard_stop [data-testid^="stBaseButton"]').first.click()
            expect(a.get_by_text("Stopped.", exact=False).first).to_be_visible(timeout=300_000)
            expect(bar).to_be_hidden(timeout=300_000)
            print(f"A: Stop → its request ended and said so in {time.monotonic() - stop:.1f} s")
            print(f"load average at the end {loadavg()}")
        finally:
            browser.close()


if __name__ == "__main__":
    main()
