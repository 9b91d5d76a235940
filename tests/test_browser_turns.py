"""Taking turns, in a real browser (issue #40.1): while one visitor's long Evaluate request runs, another visitor's
Per-Sample run gets the network between the request's steps and runs to its end, every step drawn; the first
visitor's page says it paused for the other's run; Stop ends the long request and gives the network back, keeping
nothing of it.

Order and outcome only: the seconds (Run → step 1 of the second visitor, Stop → ended) are the benchmark's,
benchmarks/bench_taking_turns.py, which drives the pages the same way (tests/live_watch.py).
"""
from __future__ import annotations

from typing import Iterator

import pytest

from browser_helpers import chromium_browser, streamlit_server
from live_watch import live_record, open_evaluate, open_page, steps_in_order

STEPS = 3
#: 8 pixels a step: 2 × 6,273 passes a method for insertion and deletion alone (tens of minutes on 2 cores), so
#: the request still runs when the other visitor's short run has ended.
LONG_STEP = 8


#: Records whether the page ever said that its request let another visitor's run go first (the note goes again
#: once the request has the network back).
WATCH_PAUSED = """
() => {
  window.__ibaPaused = false;
  new MutationObserver(() => {
    if (document.body.innerText.includes("Paused while another visitor's run goes first")) window.__ibaPaused = true;
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The app on localhost (no request budget: the long request may run) with the shipped statistics."""
    with streamlit_server(tmp_path_factory.mktemp("turns"), stats_samples="1000") as url:
        yield url


def test_a_second_visitor_runs_during_a_long_request_which_then_stops(server: str, tmp_path) -> None:
    from playwright.sync_api import expect

    shots = tmp_path
    with chromium_browser() as browser:
        b = open_page(browser, server, STEPS)
        a = open_evaluate(browser, server, LONG_STEP)
        a.get_by_role("button", name="Measure yardsticks").click()
        bar = a.locator('[data-testid="stProgress"]').first
        expect(bar).to_contain_text("Insertion", timeout=300_000)  # the maps are done; the long part runs

        a.evaluate(WATCH_PAUSED)
        b.get_by_role("button", name="Run").click()
        b.wait_for_function(f"window.__ibaLive.steps.some(s => s.step === {STEPS} && s.of === {STEPS})",
                            timeout=300_000)
        in_order, seen = steps_in_order(live_record(b), STEPS)
        assert in_order, f"the second visitor's run drew steps {seen}, not 1..{STEPS} in order"
        assert bar.is_visible() and "Insertion" in bar.inner_text(), "the long request ended before the other run"
        assert a.evaluate("window.__ibaPaused"), "the long request's page never said it let the other run go first"

        a.locator('.st-key-ev_yard_stop [data-testid^="stBaseButton"]').first.click()
        expect(a.get_by_text("Stopped: nothing of that request is shown").first).to_be_visible(timeout=300_000)
        expect(bar).to_be_hidden(timeout=60_000)
        assert a.locator('[data-testid="stDataFrame"]').count() == 0  # no yardstick table: nothing was kept

        # the network is free again: a new visitor's run ends without waiting for A (a page that still waited would
        # say "Waiting for another run to finish")
        c = open_page(browser, server, STEPS)
        c.get_by_role("button", name="Run").click()
        try:
            c.wait_for_function(f"window.__ibaLive.steps.some(s => s.step === {STEPS} && s.of === {STEPS})",
                                timeout=180_000)
        except Exception:
            c.screenshot(path=str(shots / "turns_c.png"), full_page=True)
            a.screenshot(path=str(shots / "turns_a.png"), full_page=True)
            raise AssertionError(f"a run after Stop did not end; pictures in {shots}") from None
