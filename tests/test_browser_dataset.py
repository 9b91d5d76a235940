"""The Dataset page in a real browser: `streamlit run app.py`, Chromium (via Playwright) opens a folder run of the
shortcut data set (tests/runs/run_fixtures.py) by typing its folder, and the gallery's overlays render: as many
<img> elements with a non-zero size as the run has images, each with its link to the Per-Sample page."""
from __future__ import annotations

import sys
from pathlib import Path

from browser_helpers import chromium_browser, streamlit_server

sys.path.insert(0, str(Path(__file__).resolve().parent / "runs"))
from run_fixtures import make_shortcut_run  # noqa: E402

PER_CLASS = 3  # 6 images: one gallery view
#: Quick Per-Sample settings: the test looks at the page, not at the maps.
QUICK = {"steps": 3, "batch": 2, "stats_samples": 8}

# The gallery's pictures as drawn: per <img> its rendered size and whether it has decoded.
READ_GALLERY = """
(el) => Array.from(el.querySelectorAll('img'), (img) => ({
  w: img.getBoundingClientRect().width, h: img.getBoundingClientRect().height,
  natural: img.naturalWidth, done: img.complete,
}))
"""


def test_the_dataset_page_opens_a_run_and_draws_its_gallery(tmp_path: Path) -> None:
    run_dir, keys = make_shortcut_run(tmp_path / "data", per_class=PER_CLASS, method_settings=QUICK)
    with streamlit_server(tmp_path) as server, chromium_browser() as browser:  # on 127.0.0.1: any path may be typed
        from playwright.sync_api import expect

        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(60_000)
        expect.set_options(timeout=60_000)
        page.goto(f"{server}/dataset")
        page.get_by_role("textbox", name="Run folder on the server").fill(str(run_dir))
        page.get_by_role("button", name="Open run").click()
        gallery = page.locator(".st-key-ds_gallery")
        expect(gallery.locator("img")).to_have_count(len(keys))
        gallery.locator("img").last.scroll_into_view_if_needed()
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.st-key-ds_gallery img')).every(i => i.complete "
            "&& i.naturalWidth > 0)")
        pictures = gallery.evaluate(READ_GALLERY)
        assert len(pictures) == len(keys)
        assert all(p["w"] > 50 and p["h"] > 50 and p["natural"] > 0 for p in pictures), pictures
        assert page.locator('[data-testid="stException"]').count() == 0
        assert gallery.get_by_role("link", name="Per-Sample").count() == len(keys)
