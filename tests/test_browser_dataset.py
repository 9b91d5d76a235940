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


def opened_run(browser, server: str, run_dir: Path, viewport: tuple[int, int], timeout_ms: int):
    """A new page of the Dataset page at `viewport` with `run_dir` typed and Open run pressed."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
    page.set_default_timeout(timeout_ms)
    expect.set_options(timeout=timeout_ms)
    page.goto(f"{server}/dataset")
    page.get_by_role("textbox", name="Run folder on the server").fill(str(run_dir))
    page.get_by_role("button", name="Open run").click()
    return page


def test_the_dataset_page_opens_a_run_and_draws_its_gallery(tmp_path: Path) -> None:
    run_dir, keys = make_shortcut_run(tmp_path / "data", per_class=PER_CLASS, method_settings=QUICK)
    with streamlit_server(tmp_path) as server, chromium_browser() as browser:  # on 127.0.0.1: any path may be typed
        from playwright.sync_api import expect

        page = opened_run(browser, server, run_dir, (1600, 1000), 60_000)
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


def test_the_first_screen_of_a_run_leads_with_what_stands_out(tmp_path: Path) -> None:
    """Issue #28: after Open run, with no other click, the highlights' heading and the first highlight (the marked
    images: they need very few bits) are on screen at 1280 × 800 and at 1920 × 1080. IBA_SHOTS_DIR=folder keeps
    the two screenshots (C-dataset-first-screen-WxH.png) for a person to look at."""
    import os
    import shutil

    run_dir, keys = make_shortcut_run(tmp_path / "data", per_class=6)  # the paper's settings: few bits show
    keep = os.environ.get("IBA_SHOTS_DIR")
    with streamlit_server(tmp_path) as server, chromium_browser() as browser:
        from playwright.sync_api import expect

        for width, height in ((1280, 800), (1920, 1080)):
            page = opened_run(browser, server, run_dir, (width, height), 120_000)
            first = page.locator(".st-key-ds_highlight_0")
            expect(first).to_contain_text("need very few bits")
            first.locator("img").last.wait_for()
            page.wait_for_function(
                "() => Array.from(document.querySelectorAll('.st-key-ds_highlight_0 img')).every(i => i.complete "
                "&& i.naturalWidth > 0)")
            page.wait_for_timeout(500)  # let the layout settle before the picture
            shot = tmp_path / f"C-dataset-first-screen-{width}x{height}.png"
            page.screenshot(path=str(shot))
            if keep:
                shutil.copy(shot, Path(keep) / shot.name)
            box = page.get_by_role("heading", name="What stands out").bounding_box()
            assert box is not None and 0 <= box["y"] < height  # on the first screen, no scrolling
            for image in (k for k, m in keys.items() if m):
                expect(first).to_contain_text(image)
            assert page.locator('[data-testid="stException"]').count() == 0
            page.close()
