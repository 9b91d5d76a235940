"""Watching the Per-Sample live view in a real browser: which "Step t / T" the page drew, when, and in what order.

Shared by tests/test_browser_live.py (steps drawn in order under load) and benchmarks/bench_live_view.py (the
same records turned into seconds); with `open_evaluate`, a long Evaluate request beside the live run
(tests/test_browser_turns.py, benchmarks/bench_taking_turns.py). Timing lives in the benchmark; tests assert order and completeness only.
"""
from __future__ import annotations

import statistics

#: Records, with performance.now(), the click on Run, each new "Step t / T" of the live progress bar and each
#: live bits map's load, and the browser's long tasks; page.evaluate(WATCH_LIVE) once per page.
WATCH_LIVE = """
() => {
  const w = window;
  const fresh = (click) => ({click, steps: [], maps: {}, waitsGone: [], waiting: false, busy: []});
  w.__ibaLive = fresh(null);
  w.__ibaFresh = fresh;
  document.addEventListener('click', (e) => {
    const b = e.target.closest && e.target.closest('button');
    if (b && b.innerText.trim().endsWith('Run')) w.__ibaLive = fresh(performance.now());
  }, true);
  // The browser's own stalls: tasks over 50 ms on its main thread (messages wait behind them).
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) w.__ibaLive.busy.push([e.startTime, e.duration]);
  }).observe({type: 'longtask'});
  const look = () => {
    const live = w.__ibaLive;
    for (const bar of document.querySelectorAll('[data-testid="stProgress"]')) {
      const m = bar.innerText.match(/Step (\\d+) \\/ (\\d+)/);
      if (!m) continue;
      const last = live.steps[live.steps.length - 1];
      if (!last || last.text !== m[0] || last.full !== bar.innerText && +m[1] === 0) {
        live.steps.push({text: m[0], step: +m[1], of: +m[2], t: performance.now(), full: bar.innerText});
      }
    }
    for (const img of document.querySelectorAll('img[alt^="Bits per pixel"]')) {
      const m = img.alt.match(/step (\\d+) of (\\d+)/);
      if (!m || img.__ibaSeen) continue;
      img.__ibaSeen = true;
      const mark = () => { if (!(m[1] in live.maps)) live.maps[m[1]] = performance.now(); };
      if (img.complete && img.naturalWidth > 0) mark(); else img.addEventListener('load', mark, {once: true});
    }
    const waiting = document.body.innerText.includes('Waiting for another run to finish');
    if (live.waiting && !waiting) live.waitsGone.push(performance.now());
    live.waiting = waiting;
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                      attributes: true, attributeFilter: ['src', 'alt']});
}
"""


def live_record(page) -> dict:
    """What WATCH_LIVE recorded for the last run on `page`."""
    return page.evaluate("window.__ibaLive")


def steps_in_order(record: dict, steps: int) -> tuple[bool, list[int]]:
    """(every step 1..T drawn, in order; the drawn step numbers after 0) from a WATCH_LIVE record."""
    seen = [s["step"] for s in record["steps"] if s["of"] == steps and s["step"] > 0]
    return seen == list(range(1, steps + 1)), seen


def preparing_texts(record: dict) -> list[str]:
    """The texts the progress bar showed at step 0 (preparing; the precision notice where a run measures)."""
    return [s["full"] for s in record["steps"] if s["step"] == 0]


def figures(record: dict, steps: int) -> dict:
    """Run → step 1 (counter, map), gaps between drawn steps, completeness, in seconds. After a wait for
    another session, "Run" counts from the end of the wait (the turn). busy: the browser's long tasks
    between the turn and the last step (seconds)."""
    times = {s["step"]: s["t"] for s in record["steps"] if s["of"] == steps}
    drawn = [times[t] for t in range(1, steps + 1) if t in times]
    first_seen = min((s["t"] for s in record["steps"] if s["step"] > 0), default=float("inf"))
    waits = [t for t in record["waitsGone"] if t < first_seen]
    start = waits[-1] if waits else record["click"]
    end = drawn[-1] if drawn else float("inf")
    gaps = [(b - a) / 1000 for a, b in zip(drawn, drawn[1:])]
    ok, seen = steps_in_order(record, steps)
    step1_map = record["maps"].get("1")
    return {
        "first": (times[1] - start) / 1000 if 1 in times else float("nan"),
        "first_map": (step1_map - start) / 1000 if step1_map is not None else float("nan"),
        "waited": (start - record["click"]) / 1000,
        "busy": sum(d for t, d in record["busy"] if start <= t <= end) / 1000,
        "busy_max": max((d for t, d in record["busy"] if start <= t <= end), default=0.0) / 1000,
        "gap_median": statistics.median(gaps) if gaps else float("nan"),
        "gap_max": max(gaps) if gaps else float("nan"),
        "in_order": ok,
        "seen": seen,
    }


def set_steps(page, steps: int) -> None:
    """Type T into the form's "Steps T" box (inside the Advanced expander)."""
    from playwright.sync_api import expect

    box = page.get_by_role("spinbutton", name="Steps T")
    if not box.is_visible():
        page.get_by_text("Advanced", exact=True).click()
    box.fill(str(steps))
    box.press("Tab")
    expect(box).to_have_value(str(steps))


def run_once(page, steps: int, timeout_ms: int = 240_000) -> None:
    """Press Run and wait until the run's replay ("Last run:") is drawn."""
    from playwright.sync_api import expect

    page.get_by_role("button", name="Run").click()
    page.wait_for_function(f"window.__ibaLive.steps.some(s => s.step === {steps} && s.of === {steps})",
                           timeout=timeout_ms)
    settle(page, timeout_ms)


def settle(page, timeout_ms: int = 240_000) -> None:
    """Wait until the run's result is drawn (the replay, the result below and its Plotly charts), then one quiet
    second, as a person would: a browser session's first Plotly chart is a 1.4–1.7 s task on the browser's
    main thread (2 cores, load 3); steps that arrive meanwhile are drawn only as the last of them."""
    from playwright.sync_api import expect

    expect(page.get_by_text("Last run:").first).to_be_visible(timeout=timeout_ms)
    expect(page.get_by_text("Information used").first).to_be_visible(timeout=timeout_ms)
    charts = page.locator('[data-testid="stPlotlyChart"]')
    for i in range(charts.count()):
        expect(charts.nth(i).locator(".main-svg").first).to_be_attached(timeout=timeout_ms)
    page.wait_for_timeout(1000)


def open_page(browser, url: str, steps: int, width: int = 1280, height: int = 800):
    """The Per-Sample page in a new browser session (its own context: its own cookies and renderer, as
    another person's), watched (WATCH_LIVE), with T = steps."""
    from playwright.sync_api import expect

    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{url}/per_sample")
    expect(page.get_by_text("Top prediction")).to_be_visible(timeout=180_000)
    page.evaluate(WATCH_LIVE)
    set_steps(page, steps)
    return page


def open_evaluate(browser, url: str, step: int):
    """The Evaluate page in a new browser session with its default methods and the yardsticks' insertion /
    deletion step typed in (pixels a step: a small one makes a long request)."""
    from playwright.sync_api import expect

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(180_000)
    page.goto(f"{url}/evaluate")
    expect(page.get_by_text("Top prediction")).to_be_visible(timeout=180_000)
    box = page.get_by_role("spinbutton", name="Pixels per step")
    box.fill(str(step))
    box.press("Tab")
    # the page's rerun with the new step has ended once it says the step's cost (every step below ~100 px costs
    # more than a thousand passes): a click during that rerun could be lost
    expect(page.get_by_text("forward passes per method").first).to_be_visible(timeout=180_000)
    return page
