"""End to end in a real browser: `streamlit run app.py`, then Chromium (via Playwright) opens the
Per-Sample page straight from its URL on the fresh server, checks that the sidebar lists exactly the pages
app.py defines, does a Per-Sample run on a sample photo and watches the live step counter and the final heatmap.
A second test runs two sessions at once at 1280 × 800: the first (β·k = 1000) loses the class and says so,
the second waits for it with a visible message; the live view and the replay (the bits map and the drain of
total bits beside it) fit beside the inputs; a GIF upload says that its first frame is used.

Set IBA_SAVE_SCREENSHOT=1 to write assets/screenshot.png (for the README); otherwise the screenshot
goes to the test's tmp dir.
"""
from __future__ import annotations

import ast
import io
import os
import re
from pathlib import Path
from typing import Iterator

import pytest
from PIL import Image

from browser_helpers import chromium_browser, streamlit_server

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT_LIMIT = 300_000  # bytes; the README image must stay small
RUN_TIMEOUT_MS = 240_000  # a cold run estimates statistics first

# Records every "Step t / T" the page shows, so the test can tell a live counter from a final one.
WATCH_STEPS = """
() => {
  window.__ibaSteps = [];
  const seen = (text) => {
    for (const m of text.matchAll(/Step (\\d+) \\/ (\\d+)/g)) {
      const last = window.__ibaSteps[window.__ibaSteps.length - 1];
      if (last !== m[0]) window.__ibaSteps.push(m[0]);
    }
  };
  new MutationObserver((records) => {
    for (const r of records) {
      const node = r.type === 'characterData' ? r.target.parentNode : r.target;
      if (node && node.textContent && node.textContent.includes('Step ')) seen(node.textContent);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""


# Records every distinct "Waiting for another run to finish (N s)" the page shows.
WATCH_WAITS = """
() => {
  window.__ibaWaits = [];
  new MutationObserver(() => {
    for (const m of document.body.innerText.matchAll(/Waiting for another run to finish \\(\\d+ s\\)/g)) {
      if (!window.__ibaWaits.includes(m[0])) window.__ibaWaits.push(m[0]);
    }
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}
"""

# Lists the λ pictures taken out of the page while the run is live (a chart mounted anew shows blank until
# it is drawn) and the distinct λ pictures shown, by their alt text. Once the replay ("Last run:") is on the
# page, later removals are the replay's own reruns, not a flash in the live view, and are not listed.
WATCH_LAMBDA = """
() => {
  window.__ibaLambdaRemoved = []; window.__ibaLambdaShown = [];
  const lambdas = (n) => n.nodeType !== 1 ? []
    : (n.matches('img[alt^="λ"]') ? [n] : [...n.querySelectorAll('img[alt^="λ"]')]);
  let replayed = false;
  new MutationObserver((records) => {
    for (const r of records) {
      if (replayed) break;
      for (const n of r.removedNodes) for (const img of lambdas(n)) window.__ibaLambdaRemoved.push(img.alt);
    }
    replayed = replayed || document.body.textContent.includes("Last run");
    for (const img of document.querySelectorAll('img[alt^="λ at"]')) {
      if (!window.__ibaLambdaShown.includes(img.alt)) window.__ibaLambdaShown.push(img.alt);
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ['alt', 'src']});
}
"""


def app_page_titles(app: Path = ROOT / "app.py") -> list[str]:
    """The titles of the st.Page entries in app.py's PAGES list, in order (read from the source, not run)."""
    for node in ast.walk(ast.parse(app.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PAGES" for t in node.targets):
            return [kw.value.value for call in node.value.elts for kw in call.keywords if kw.arg == "title"]
    raise AssertionError("app.py defines no PAGES list")


def test_app_page_titles_reads_the_pages_list() -> None:
    titles = app_page_titles()
    assert titles[0] == "Home" and "Per-Sample Bottleneck" in titles and len(titles) == len(set(titles))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    # Small statistics keep the test quick; the README picture uses the app's default (1000 samples).
    samples = "1000" if os.environ.get("IBA_SAVE_SCREENSHOT") == "1" else "32"
    with streamlit_server(tmp_path, samples) as url:
        yield url


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def save_small_png(png: bytes, path: Path, limit: int = SCREENSHOT_LIMIT) -> int:
    """Save a screenshot under `limit` bytes: full colour if it fits, else a dithered 256-colour
    palette (dithering keeps the heatmaps' smooth gradients), shrinking the picture if still needed."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    while True:
        data = _png(image)
        if len(data) > limit:
            palette = image.quantize(256, method=Image.Quantize.FASTOCTREE)
            data = _png(image.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG))
        if len(data) <= limit or image.width < 400:
            break
        image = image.resize((int(image.width * 0.85), int(image.height * 0.85)), Image.Resampling.LANCZOS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def test_per_sample_run_in_chromium(server: str, tmp_path: Path) -> None:
    with chromium_browser() as browser:
        from playwright.sync_api import expect

        # Tall enough that the README picture shows the inputs and the result row together.
        page = browser.new_page(viewport={"width": 1400, "height": 1560})
        page.set_default_timeout(120_000)
        expect.set_options(timeout=120_000)  # model loading and a cold run take a while on 2 cores
        page.goto(f"{server}/per_sample")  # straight to a page of a fresh server: app.py must still run
        expect(page.get_by_text("Top prediction")).to_be_visible()  # model loaded, image classified
        nav = page.locator('[data-testid="stSidebarNavLink"] [data-testid="stMarkdownContainer"]')
        titles = app_page_titles()
        expect(nav).to_have_count(len(titles))
        assert nav.all_inner_texts() == titles, "the sidebar must list exactly the pages of app.py's PAGES"
        assert page.title() == "IBA Explorer"  # app.py's st.set_page_config ran
        run = page.get_by_role("button", name="Run")
        expect(run).to_be_enabled()

        page.evaluate(WATCH_STEPS)
        run.click()
        expect(page.get_by_text("Information used")).to_be_visible(timeout=RUN_TIMEOUT_MS)

        steps = page.evaluate("window.__ibaSteps")
        assert any(s.startswith("Step ") and s.endswith("/ 10") for s in steps), steps
        assert len({s for s in steps if s != "Step 0 / 10"}) >= 2, f"the step counter did not update live: {steps}"
        heatmap = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="bits / pixel").first
        expect(heatmap).to_be_visible()
        expect(page.get_by_text("Few bits", exact=True)).to_be_visible()
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0

        # After the run its replay is where the live view was, in view.
        expect(page.get_by_text("Last run:")).to_be_in_viewport()
        expect(page.locator('img[alt="Bits per pixel at step 10 of 10"]')).to_be_in_viewport()
        page.wait_for_timeout(500)  # let Plotly finish drawing
        keep = os.environ.get("IBA_SAVE_SCREENSHOT") == "1"
        target = ROOT / "assets" / "screenshot.png" if keep else tmp_path / "screenshot.png"
        size = save_small_png(page.screenshot(), target)
        assert size <= SCREENSHOT_LIMIT


# Boxes of the visible elements, read in one go: Streamlit swaps the live view for the replay while the test
# looks, so counting the elements first and measuring each one afterwards can wait for one that has gone.
VISIBLE_BOXES = """
(els) => els.map((e) => e.getBoundingClientRect())
            .filter((r) => r.width > 0 && r.height > 0)
            .map((r) => ({x: r.x, y: r.y, width: r.width, height: r.height}))
"""


def _in_view(page, selector: str) -> list[dict]:
    """Bounding boxes of the visible elements matching `selector`, once one is visible."""
    from playwright.sync_api import expect

    expect(page.locator(selector).filter(visible=True).first).to_be_visible()
    return page.locator(selector).evaluate_all(VISIBLE_BOXES)


def _assert_fits(page, what: str, selector: str, height: int) -> None:
    boxes = _in_view(page, selector)
    assert boxes, f"{what}: nothing matches {selector}"
    for box in boxes:
        assert 0 <= box["y"] and box["y"] + box["height"] <= height, f"{what} below the fold: {box}"


def _gif_of_chelsea(frames: int = 3) -> bytes:
    import numpy as np
    import skimage.data

    photo = Image.fromarray(np.ascontiguousarray(skimage.data.chelsea()))
    pictures = [photo.point(lambda v, k=k: int(v * (1 - 0.2 * k))) for k in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, format="GIF", save_all=True, append_images=pictures[1:], duration=200, loop=0)
    return buf.getvalue()


def test_two_sessions_lost_class_and_gif_in_chromium(server: str, tmp_path: Path) -> None:
    """Session A (1280 × 800) runs with β·k = 1000: the class is lost, and a warning says so next to the maps.
    Session B (1600 × 1000) presses Run meanwhile and shows "Waiting for another run to finish (N s)" until A
    is done, then runs. The live view and the replay fit beside the inputs; a GIF upload names its first frame."""
    from iba_core.per_sample import LOST_CLASS_MESSAGE

    with chromium_browser() as browser:
        from playwright.sync_api import expect

        expect.set_options(timeout=120_000)
        (a, height), (b, b_height) = ((browser.new_page(viewport={"width": w, "height": h}), h)
                                      for w, h in ((1280, 800), (1600, 1000)))
        for page in (a, b):
            page.set_default_timeout(120_000)
            page.goto(f"{server}/per_sample")
            expect(page.get_by_text("Top prediction")).to_be_visible()

        # B: one step, so that it finishes quickly once it has its turn.
        b.get_by_text("Advanced", exact=True).click()
        b.get_by_role("spinbutton", name="Steps T").fill("1")
        # A: β·k = 1000, the end of the β slider.
        beta = a.get_by_role("slider", name="β·k (information penalty)")
        beta.focus()
        beta.press("End")
        expect(beta).to_have_attribute("aria-valuetext", "1000")

        a.evaluate(WATCH_STEPS)
        a.evaluate(WATCH_LAMBDA)
        b.evaluate(WATCH_WAITS)
        a.get_by_role("button", name="Run").click()
        # A holds the network from its first step to its last: B asks for it meanwhile.
        expect(a.get_by_text(re.compile(r"Step [1-4] / 10"))).to_be_visible(timeout=240_000)
        b.get_by_role("button", name="Run").click()

        # While A runs: its step counter, bits map and the drain of total bits beside it fit beside the inputs
        # (λ and the loss curves are the row below).
        _assert_fits(a, "the step counter", 'text=/Step \\d+ \\/ 10/', height)
        _assert_fits(a, "the live bits map", 'img[alt^="Bits per pixel"]', height)
        _assert_fits(a, "the live drain chart", 'img[alt^="Total bits per step"]', height)
        expect(a.locator('img[alt^="λ at step"]').first).to_be_attached()

        expect(a.get_by_text("Last run:")).to_be_visible(timeout=240_000)
        # The class is lost at β·k = 1000, and the page says so beside the replayed maps.
        warning = a.get_by_text(LOST_CLASS_MESSAGE).first
        expect(warning).to_be_in_viewport()
        _assert_fits(a, "the replayed bits map", 'img[alt="Bits per pixel at step 10 of 10"]', height)
        _assert_fits(a, "the replayed drain chart", 'img[alt^="Total bits per step"]', height)
        expect(a.locator('img[alt="λ at step 10 of 10"]')).to_be_attached()
        # The λ picture was updated in place every step, never taken out (no blank flash); only the last
        # one gives way to the replay when the run ends (in one or two DOM steps as Streamlit hands over).
        shown = a.evaluate("window.__ibaLambdaShown")
        assert len([s for s in shown if s.endswith("of 10")]) >= 5, shown
        removed = a.evaluate("window.__ibaLambdaRemoved")
        assert set(removed) <= {"λ at step 10 of 10"}, removed
        # for a person to look at: IBA_SHOTS_DIR=DIR keeps it as DIR/lost-class-1280x800.png
        a.screenshot(path=str(Path(os.environ.get("IBA_SHOTS_DIR") or tmp_path) / "lost-class-1280x800.png"))

        # B waited visibly, then ran; its replay is in view too.
        expect(b.get_by_text("Last run:")).to_be_visible(timeout=240_000)
        _assert_fits(b, "B's replayed bits map", 'img[alt="Bits per pixel at step 1 of 1"]', b_height)
        _assert_fits(b, "B's replayed λ map", 'img[alt="λ at step 1 of 1"]', b_height)  # 1600 × 1000: both rows
        waits = b.evaluate("window.__ibaWaits")
        assert waits and all(re.fullmatch(r"Waiting for another run to finish \(\d+ s\)", w) for w in waits), waits
        expect(b.get_by_text("Waiting for another run to finish")).to_have_count(0)
        for page in (a, b):
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.locator('[data-testid="stAlertContentError"]').count() == 0

        # A GIF upload is taken, and the page says which frame the network sees.
        b.get_by_role("radiogroup", name="Image").get_by_text("Upload", exact=True).click()
        b.get_by_label("Upload an image", exact=True).get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
            files=[{"name": "cat.gif", "mimeType": "image/gif", "buffer": _gif_of_chelsea(3)}])
        expect(b.get_by_text("GIF: the network sees the first frame of its 3 frames")).to_be_visible()
        expect(b.get_by_text("Top prediction")).to_be_visible()
        assert b.locator('[data-testid="stAlertContentError"]').count() == 0
        a.screenshot(path=str(tmp_path / "lost_class_1280x800.png"))
