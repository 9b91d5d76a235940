"""Starting a folder run on the Dataset page in a real browser (issue #28 point 8): Enter in the image folder's field
starts nothing; *Start run* does; a second press shows the session's own run as its progress, with no error."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from browser_helpers import chromium_page, streamlit_server

sys.path.insert(0, str(Path(__file__).resolve().parent / "runs"))
from run_fixtures import write_noise_images  # noqa: E402


def test_enter_starts_nothing_and_a_second_press_shows_the_own_run(tmp_path: Path) -> None:
    write_noise_images(tmp_path / "images", 4)
    # on 127.0.0.1: any path may be typed; 1280 × 800, where the progress must be in view after Start
    with streamlit_server(tmp_path) as server, chromium_page(viewport=(1280, 800)) as page:
        from playwright.sync_api import expect

        page.goto(f"{server}/dataset")
        page.get_by_text("Start a run on a folder of the server").click()
        page.get_by_role("textbox", name="Image folder on the server").fill(str(tmp_path / "images"))
        page.get_by_role("textbox", name="Run folder (created if missing)").click()
        page.keyboard.type(str(tmp_path / "run"), delay=10)  # typed as a person does, then Enter
        page.keyboard.press("Enter")  # a form submits on Enter by default; this one commits the field only
        time.sleep(15)  # a submit would have reached the server and started the run by now, even under load
        # Neither submit button was pressed by Enter (a form presses its first one, here *Estimate time*).
        assert page.get_by_text("Your folder run into").count() == 0
        assert page.get_by_text("Estimate: ").count() == 0
        assert not (tmp_path / "run").exists()
        start = page.get_by_role("button", name="Start run")
        start.click()
        expect(page.get_by_text("Your folder run into").first).to_be_visible()
        # the progress in view without scrolling (below the start form it was a screen further down, issue #38)
        expect(page.locator('[data-testid="stProgress"]').first).to_be_in_viewport()
        start.click()  # again, while it goes (4 images of the Per-Sample Bottleneck take seconds each)
        expect(page.get_by_text("is going; its progress is at the top")).to_be_visible()
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(tmp_path / "second_press.png"), full_page=True)
