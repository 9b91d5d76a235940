"""The replay slider in a real browser: its arrow keys move one step per press, and it keeps the focus across the
reruns they cause (issue #38, item 7: "the replay slider's keys skip"). Each rerun sent an st.empty again above
the page's controls and the replay, which cleared their place first, so the slider was mounted anew and lost its
focus after one press; the next arrow keys moved the page, not the step. AppTest cannot see a remount or a focus."""
from __future__ import annotations

import time
from pathlib import Path

from browser_helpers import chromium_browser, streamlit_server
from live_watch import open_page, run_once

STEPS = 4
ACTIVE = "() => document.activeElement.getAttribute('aria-label') || document.activeElement.tagName"


def _step_line(page) -> str:
    return page.locator(f"text=/^Step \\d+ \\/ {STEPS} ·/").first.inner_text()


def test_the_replay_sliders_arrow_keys_move_one_step_each_and_keep_the_focus(tmp_path: Path) -> None:
    with streamlit_server(tmp_path, stats_samples="1000") as url, chromium_browser() as browser:
        page = open_page(browser, url, STEPS)
        run_once(page, STEPS)
        assert _step_line(page).startswith(f"Step {STEPS} / {STEPS}")
        page.locator('[data-testid="stSlider"] input[aria-label="Replay step"]').first.focus()
        for step in range(STEPS - 1, 0, -1):
            page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                f"() => [...document.querySelectorAll('p, strong')].some(e => e.innerText.startsWith('Step {step} / "
                f"{STEPS}'))", timeout=60_000)
            time.sleep(1.0)  # the rerun ends: the slider must still hold the focus for the next press
            assert page.evaluate(ACTIVE) == "Replay step", f"the slider lost the focus at step {step}"
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"() => [...document.querySelectorAll('p, strong')].some(e => "
                               f"e.innerText.startsWith('Step 2 / {STEPS}'))", timeout=60_000)
        assert _step_line(page).startswith(f"Step 2 / {STEPS}")
