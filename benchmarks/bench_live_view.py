"""Is the Per-Sample live view live? Run → first drawn step, and every step drawn in order, idle and under load.

Starts `streamlit run app.py` on a free localhost port (a private cache seeded with the shipped statistics),
opens the Per-Sample page in Debian's Chromium (Playwright, headless) at the offline network's default layer,
and records in the page, with a MutationObserver and the browser's own clock, when each "Step t / T" of the
live progress bar appears and when each live bits map has loaded. Per load it prints, for every run:

- Run → step 1: from the click on Run to the counter showing "Step 1 / T", and to step 1's bits map loaded;
- the gaps between drawn steps (median and largest): a page starved by the computation shows steps late and
  in bursts (the largest gap then approaches the whole run);
- whether every step 1..T was drawn, in order (no step skipped or shown out of order).

Loads (--loads, comma-separated):
  idle     nothing else running (the goal: step 1 within 1 s at the default layer on 2 cores);
  burners  --burners processes spinning on the CPU (`python3 -c "while True: pass"`), like other programs;
  session  a second browser session presses Run right after the first: it waits for the network (polling
           "Waiting for another run to finish"), then runs while the first session's page draws its result;
           the second session's steps are checked too.
The server's first run is reported apart: it pays one-time costs (cutting the network at the layer, first
kernel calls; on hardware with bf16 the precision measurement, `auto`, once per layer and machine).
Timing figures depend on the machine's other work: the load average is printed with each load.

    python3 benchmarks/bench_live_view.py                              # idle, burners, session; 10 steps; 3 runs
    python3 benchmarks/bench_live_view.py --steps 20 --repeats 5 --loads idle,burners --burners 2
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the tests' private server and live-view watcher


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def burn(n: int) -> list[subprocess.Popen]:
    """n processes that spin on the CPU until stopped."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    """End the processes `burn` started (these, by their ids; nothing else)."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=10)


def report(label: str, rows: list[dict], steps: int) -> None:
    """Print each run's figures (live_watch.figures), then a summary line."""
    for i, r in enumerate(rows, 1):
        waited = f" (from the turn, after waiting {r['waited']:.2f} s)" if r["waited"] > 0 else ""
        print(f"  {label} run {i}: Run → step 1 {r['first']:.2f} s, its map {r['first_map']:.2f} s{waited}; "
              f"gaps median {r['gap_median']:.2f} s, max {r['gap_max']:.2f} s; browser busy {r['busy']:.2f} s "
              f"(longest task {r['busy_max']:.2f} s); steps 1..{steps} in order: "
              f"{'yes' if r['in_order'] else 'NO ' + str(r['seen'])}", flush=True)
    firsts = [r["first"] for r in rows]
    print(f"  {label}: median Run → step 1 {statistics.median(firsts):.2f} s (max {max(firsts):.2f} s), largest gap "
          f"{max(r['gap_max'] for r in rows):.2f} s, all steps in order in {sum(r['in_order'] for r in rows)}"
          f"/{len(rows)} runs", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10, help="optimisation steps T per run (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per load (default 3)")
    parser.add_argument("--loads", default="idle,burners,session", help="comma-separated: idle, burners, session")
    parser.add_argument("--burners", type=int, default=2, help="CPU-spinning processes for the 'burners' load")
    args = parser.parse_args()
    loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    unknown = set(loads) - {"idle", "burners", "session"}
    if unknown:
        parser.error(f"unknown load(s): {', '.join(sorted(unknown))}")

    import torch
    from playwright.sync_api import sync_playwright

    from browser_helpers import CHROMIUM, streamlit_server
    from live_watch import figures, live_record, open_page, run_once, settle

    from iba_core.settings import torch_threads

    print(f"CPU: {cpu_model()} · {len(os.sched_getaffinity(0))} usable cores · torch {torch.__version__} · the app's "
          f"runs use {torch_threads()} torch thread(s) (IBA_TORCH_THREADS) · load average at start {loadavg()}")
    print(f"offline network, default layer, {args.steps} steps, {args.repeats} runs per load", flush=True)
    with tempfile.TemporaryDirectory(prefix="iba-bench-live-") as tmp, \
            streamlit_server(Path(tmp), stats_samples="1000") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-background-networking"])
        try:
            a = open_page(browser, url, args.steps)
            run_once(a, args.steps)  # the server's first run: one-time costs (the layer's split, first kernels)
            report("first run after the server started", [figures(live_record(a), args.steps)], args.steps)
            for load in loads:
                rows, other = [], []
                burners = burn(args.burners) if load == "burners" else []
                b = open_page(browser, url, args.steps) if load == "session" else None
                try:
                    if burners:
                        a.wait_for_timeout(1000)  # let the burners get going
                    print(f"{load}: load average {loadavg()}" + (f" ({args.burners} burners)" if burners else ""),
                          flush=True)
                    for _ in range(args.repeats):
                        if b is None:
                            run_once(a, args.steps)
                        else:
                            a.get_by_role("button", name="Run").click()
                            b.get_by_role("button", name="Run").click()
                            for page in (a, b):
                                page.wait_for_function(
                                    "window.__ibaLive.steps.some(s => s.step === %d && s.of === %d)"
                                    % (args.steps, args.steps), timeout=240_000)
                            for page in (a, b):
                                settle(page)
                            other.append(figures(live_record(b), args.steps))
                        rows.append(figures(live_record(a), args.steps))
                    report(load, rows, args.steps)
                    if other:
                        report(f"{load} (second session, from its turn)", other, args.steps)
                    print(f"{load}: load average at the end {loadavg()}", flush=True)
                finally:
                    stop(burners)
                    if b is not None:
                        b.context.close()
        finally:
            browser.close()


if __name__ == "__main__":
    main()
