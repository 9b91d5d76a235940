"""The β × layer page in a real browser: `streamlit run app.py`, Chromium (via Playwright) computes a small grid
and reads the drawn Plotly figure from the page (the plot element's `data` and `_fullLayout`): the cells of each
row share one colour scale in bits per pixel (bits are absolute), the β·k = 1000 cell is not the brightest of
its row and is marked as having lost the class, and the page's checkbox switches to per-map scales.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from browser_helpers import CHROMIUM, streamlit_server
from iba_core.per_sample import LOST_CLASS_MESSAGE
from iba_core.render.figures import BITS_UNIT, LOST_CLASS_MARK

RUN_TIMEOUT_MS = 240_000  # a cold grid estimates statistics first
#: Small settings: ten quick cells, and still enough steps for β·k = 1000 to discard the class.
STEPS, BATCH = 5, 2

# The finished grid's figure as the browser has it: per trace its colour axis, the top of its own scale and the
# max and mean of its values; per row the shared colour axis; the cell titles.
READ_GRID = """
(el) => {
  const values = (z) => Array.from(z, (row) => Array.from(row)).flat();
  const traces = el._fullData.map((t, i) => {
    const z = values(t.z);  // decoded from Plotly's typed-array JSON
    return {coloraxis: t.coloraxis || null, zmax: t.zmax, max: Math.max(...z),
            mean: z.reduce((a, b) => a + b, 0) / z.length};
  });
  const axis = (name) => el._fullLayout[name] ?
    {cmin: el._fullLayout[name].cmin, cmax: el._fullLayout[name].cmax,
     title: el._fullLayout[name].colorbar.title.text} : null;
  return {traces, coloraxis: axis('coloraxis'), coloraxis2: axis('coloraxis2'),
          titles: el._fullLayout.annotations.map((a) => a.text)};
}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with streamlit_server(tmp_path) as url:
        yield url


def test_beta_layer_rows_share_one_colour_scale(server: str, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: the browser test needs Debian's chromium package")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.set_default_timeout(120_000)
            expect.set_options(timeout=120_000)
            page.goto(f"{server}/beta_layer")
            expect(page.get_by_text("Top prediction")).to_be_visible()
            page.get_by_text("Advanced", exact=True).click()
            page.get_by_role("spinbutton", name="Steps T").fill(str(STEPS))
            page.get_by_role("spinbutton", name="Batch B").fill(str(BATCH))
            page.get_by_role("button", name="Compute grid").click()
            expect(page.get_by_text("The grid is ready below.")).to_be_visible(timeout=RUN_TIMEOUT_MS)
            assert page.locator('[data-testid="stException"]').count() == 0

            grid = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').last
            expect(grid).to_be_visible()
            page.wait_for_timeout(500)  # let Plotly finish drawing
            fig = grid.evaluate(READ_GRID)
            traces = fig["traces"]
            assert len(traces) == 10
            # One colour axis per row, from 0 to the row's largest bits per pixel, with a bar in bits / pixel.
            assert [t["coloraxis"] for t in traces] == ["coloraxis"] * 5 + ["coloraxis2"] * 5
            for axis, row in ((fig["coloraxis"], traces[:5]), (fig["coloraxis2"], traces[5:])):
                assert axis["cmin"] == 0
                assert axis["cmax"] == pytest.approx(max(t["max"] for t in row), rel=1e-5)
                assert axis["title"] == BITS_UNIT
            means = [t["mean"] for t in traces[:5]]
            assert means[4] < max(means), "the β·k = 1000 cell must not be the brightest of its row"
            # β·k = 1000 discarded the class: its title is marked and a warning names it.
            assert LOST_CLASS_MARK in fig["titles"][4]
            warning = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text=LOST_CLASS_MESSAGE)
            expect(warning).to_contain_text("β·k = 1000 at block3_2")

            # Per-map scales on request: each map from 0 to its own maximum, no shared axis.
            page.get_by_text("Scale each map on its own").click()
            expect(page.get_by_text("Each map has its own colour scale")).to_be_visible()
            page.wait_for_timeout(1000)
            fig = page.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').last.evaluate(READ_GRID)
            assert all(t["coloraxis"] is None for t in fig["traces"])
            assert [t["zmax"] for t in fig["traces"]] == pytest.approx([t["max"] for t in fig["traces"]], rel=1e-5)
            page.screenshot(path=str(tmp_path / "beta_layer.png"))
        finally:
            browser.close()
