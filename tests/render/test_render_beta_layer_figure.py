"""iba_core.render.figures.grid_figure: the β row on one scale (bits are absolute), each layer-row map on its own
scale (its maximum in its title), lost classes marked, text large enough for a lecture hall, titles short enough
(one fact per line, long layer names wrapped) for a 1280 × 800 screen."""
from __future__ import annotations

import numpy as np
import pytest

from iba_core.beta_layer import GridCell
from iba_core.render import figures
from render_helpers import blob


def cells() -> list[GridCell]:
    """A β row whose bits fall with β (β·k = 1000 lost the class), and a layer row whose stem holds 200 times
    the bits per pixel of the deepest layer (as on chelsea: 13 against 0.07)."""
    row = [GridCell("beta", f"β·k = {b:g}", b, "block3_2", blob() / b, 0.9 if b < 1000 else 0.001, 1000.0 / b,
                    0.6, b >= 1000) for b in (0.1, 1, 10, 100, 1000)]
    return row + [GridCell("layer", name, 10.0, name, blob() * f, 0.5, 50.0 * f, 0.6)
                  for name, f in (("stem", 6.5), ("block3_2", 0.35), ("head", 0.033))]


def test_beta_row_shares_one_linear_scale_in_bits_per_pixel() -> None:
    fig = figures.grid_figure(cells())
    beta = fig.data[:4]  # β·k = 1000 lost the class: no map (test_a_lost_class_is_a_grey_square_that_says_so)
    assert {t.coloraxis for t in beta} == {"coloraxis"} and fig.data[4].coloraxis is None
    axis = fig.layout.coloraxis
    assert axis.cmin == 0.0
    assert float(np.max(beta[0].z)) == pytest.approx(float(blob().max()) / 0.1, rel=1e-2)  # linear: bits (2 × 2 pooled), not logs
    # The row's brightest pixel at full resolution tops the scale (the pooled picture peaks a little lower).
    assert axis.cmax == max(float(np.max(c.heatmap)) for c in cells()[:4])
    assert max(float(np.max(t.z)) for t in beta) <= axis.cmax
    assert axis.colorbar.title.text == figures.BITS_UNIT == "bits / pixel"
    # Bits are absolute: the β·k = 100 map lets the fewest bits through, so it is the darkest, not the brightest.
    brightness = [float(np.mean(t.z)) / axis.cmax for t in beta]
    assert int(np.argmin(brightness)) == 3 and int(np.argmax(brightness)) == 0
    titles = [a.text for a in fig.layout.annotations]
    assert not any(figures.GRID_MAX_PREFIX in t for t in titles[:5])


def test_layer_row_maps_each_run_to_their_own_maximum_given_in_the_title() -> None:
    fig = figures.grid_figure(cells())
    layer = fig.data[5:]
    titles = [a.text for a in fig.layout.annotations][5:]
    assert all(t.coloraxis is None and t.zmin == 0.0 for t in layer)
    assert [t.zmax for t in layer] == [float(np.max(c.heatmap)) for c in cells()[5:]]
    # The stem's 13 bits/px no longer turn the deepest layer black: every map reaches (near) the top of its scale.
    assert all(0.9 <= float(np.max(t.z)) / t.zmax <= 1.0 for t in layer)
    assert "coloraxis2" not in fig.to_plotly_json()["layout"]
    assert [title.endswith(f"<br>max {t.zmax:.3g}") for t, title in zip(layer, titles)] == [True] * 3
    # One colour bar for the row, on its last map, reading 0 … each map's own maximum, in bits per pixel.
    assert [bool(t.showscale) for t in layer] == [False, False, True]
    assert list(layer[-1].colorbar.ticktext) == ["0", "max"]
    assert layer[-1].colorbar.title.text.startswith(figures.BITS_UNIT)
    assert fig.layout.coloraxis.colorbar.y > layer[-1].colorbar.y  # the β row's bar above the layer row's


def test_per_map_scales_on_request() -> None:
    fig = figures.grid_figure(cells(), shared_scale=False)
    maps = [t for t, c in zip(fig.data, cells()) if not c.lost_class]
    assert len(maps) == 7 and all(t.coloraxis is None and t.zmin == 0.0 for t in maps)
    assert [t.zmax for t in maps] == [float(np.max(c.heatmap)) for c in cells() if not c.lost_class]  # its own
    assert fig.layout.coloraxis.cmax is None
    titles = [a.text for a, c in zip(fig.layout.annotations, cells()) if not c.lost_class]
    assert all(title.endswith(f"<br>max {t.zmax:.3g}") for t, title in zip(maps, titles))


@pytest.mark.parametrize("zoom", [1.0, figures.PRESENTATION_ZOOM])
def test_text_reads_from_the_back_of_a_room(zoom: float) -> None:
    fig = figures.grid_figure(cells(), zoom=zoom)
    size = round(figures.GRID_FONT_PX * zoom)
    assert figures.GRID_FONT_PX >= 16
    assert {a.font.size for a in fig.layout.annotations} == {size}
    assert fig.layout.yaxis.title.font.size == size and fig.layout.yaxis6.title.font.size == size
    assert fig.layout.coloraxis.colorbar.tickfont.size == size and fig.data[-1].colorbar.tickfont.size == size
    # Room above each row for its titles: the top margin holds the β row's 3 lines (label, p, bits).
    assert fig.layout.margin.t >= 3 * 1.3 * size


def test_titles_give_one_fact_per_short_line() -> None:
    """At 1280 × 800 with the sidebar open a column is 140 px wide: a title line of more than 13 characters at
    18 px would run into its neighbour's (tests/test_browser_grid.py measures it)."""
    titles = [a.text for a in figures.grid_figure(cells()).layout.annotations]
    assert titles[0].split("<br>") == ["β·k = 0.1", "p = 0.90", "10,000 bits"]
    assert titles[4].split("<br>") == ["β·k = 1000", "p = 0.00", "1 bits"]  # "class lost" is on its square
    assert titles[5].split("<br>")[0] == "stem" and titles[5].split("<br>")[-1].startswith("max ")
    lines = [line for t in titles[:8] for line in t.split("<br>")]
    assert max(len(line) for line in lines) <= figures._TITLE_LINE_CHARS


def test_long_layer_names_wrap_and_the_figure_grows_with_the_lines() -> None:
    long_name = "features.denseblock2.denselayer12"
    short = cells()
    wrapped = short[:5] + [GridCell("layer", long_name, 10.0, long_name, blob(), 0.5, 50.0, 0.6)] + short[6:]
    fig = figures.grid_figure(wrapped)
    title = fig.layout.annotations[5].text
    assert title.split("<br>")[:3] == ["features.", "denseblock2.", "denselayer12"]  # broken after the dots
    assert fig.data[5].hovertemplate.startswith(long_name)  # hovering shows the name whole
    # Two more lines above the layer row (6 against 4: label, p, bits, max): the figure is taller by them.
    grown = fig.layout.height - figures.grid_figure(short).layout.height
    assert grown == pytest.approx(2 * 1.3 * figures.GRID_FONT_PX, abs=2)
    # A name too long for three lines ends in …; presentation mode (larger text) wraps at fewer characters.
    huge = "x" * 60
    lines = figures._cell_title(GridCell("layer", huge, 10.0, huge, blob(), 0.5, 50.0, 0.6)).split("<br>")
    assert lines[2].endswith("…") and lines[3] == "p = 0.50"
    zoomed = figures.grid_figure(wrapped, zoom=figures.PRESENTATION_ZOOM).layout.annotations[5].text
    assert max(len(line) for line in zoomed.split("<br>")) < figures._TITLE_LINE_CHARS


def test_presentation_zoom_makes_the_maps_larger() -> None:
    normal, large = figures.grid_figure(cells()).layout.height, figures.grid_figure(cells(), zoom=1.3).layout.height
    assert large == pytest.approx(1.3 * normal, rel=0.05)


@pytest.mark.parametrize("shared_scale", [True, False])
def test_a_lost_class_is_a_grey_square_that_says_so(shared_scale: bool) -> None:
    """β·k = 1000 lost the class: in place of its map (drained of the class: near black on the row's scale) a
    light grey hatched square of the map's size, off every colour scale, with "class lost" on it; no title says it."""
    grid = cells()
    fig = figures.grid_figure(grid, shared_scale=shared_scale)
    square = fig.data[4]
    assert square.coloraxis is None and square.showscale is False
    colours = [colour for _, colour in square.colorscale]
    assert set(colours) == set(figures.LOST_CELL_GREYS)
    assert all(sum(int(c[i:i + 2], 16) for i in (1, 3, 5)) / 3 > 180 for c in colours)  # light, never black
    z = np.asarray(square.z)
    assert z.shape == np.asarray(fig.data[0].z).shape and set(np.unique(z)) == {0, 1}  # stripes, map-sized
    marks = [a for a in fig.layout.annotations if a.text == figures.LOST_CLASS_MARK]
    assert len(marks) == 1 and (marks[0].xref, marks[0].yref) == ("x5 domain", "y5 domain")
    assert marks[0].font.size >= figures.GRID_FONT_PX
    assert not any(figures.LOST_CLASS_MARK in a.text for a in fig.layout.annotations[:8])
    assert "discarded the class" in square.hovertemplate
    # The row's scale is its maps' (the lost map, not drawn, does not set it).
    if shared_scale:
        assert fig.layout.coloraxis.cmax == max(float(np.max(c.heatmap)) for c in cells()[:4])


def test_a_lost_cell_in_the_layer_row_leaves_the_row_bar_to_a_map() -> None:
    grid = cells()
    grid[-1].lost_class = True  # the row's last cell, which carried the row's colour bar
    fig = figures.grid_figure(grid)
    layer = fig.data[5:]
    assert [bool(t.showscale) for t in layer] == [False, True, False]
    assert not fig.layout.annotations[7].text.split("<br>")[-1].startswith("max ")  # no scale, no maximum


def test_a_filling_grid_keeps_the_full_grids_columns() -> None:
    """While the grid fills, the columns stay those of the finished grid: the first cells do not take the
    whole width, and titles do not move (or run into each other) as cells arrive."""
    first = figures.grid_figure(cells()[:2], ncols=5)
    full = figures.grid_figure(cells(), ncols=5)
    assert first.layout.xaxis2.domain == full.layout.xaxis2.domain
    assert first.layout.height == full.layout.height
    assert figures.grid_figure(cells()[:2]).layout.xaxis2.domain != full.layout.xaxis2.domain


def test_cell_px_sets_the_map_size() -> None:
    small, large = (figures.grid_figure(cells(), cell_px=px).layout.height for px in (250, 300))
    assert large - small == 2 * 50


def test_a_partly_filled_grid_scales_what_is_there() -> None:
    first = cells()[:2]
    fig = figures.grid_figure(first)
    assert fig.layout.coloraxis.cmax == max(float(np.max(c.heatmap)) for c in first)
    assert "coloraxis2" not in fig.to_plotly_json()["layout"]  # no layer cell yet: no scale for that row
    assert figures.grid_figure([]).data == ()


def peaked() -> np.ndarray:
    """A map with a one-pixel peak, as a real map's brightest spot: 2 × 2 pooling averages it down."""
    z = np.array(blob(), dtype=np.float32) * 0.1
    z[10, 11] = 0.695
    z[10, 10] = 0.2
    return z


def test_titles_give_the_full_resolution_maximum() -> None:
    """Per-Sample and Compare print the full map's maximum (0.695 for block3_2 at β·k = 10); the grid's title
    must say the same, though the picture it sends is pooled 2 × 2 (which peaks lower)."""
    grid = [GridCell("layer", name, 10.0, name, peaked() * f, 0.5, 50.0, 0.6) for name, f in (("a", 1.0), ("b", 3.0))]
    fig = figures.grid_figure(grid)
    for cell, trace, note in zip(grid, fig.data, fig.layout.annotations):
        full = float(np.max(cell.heatmap))
        assert float(np.max(trace.z)) < full * 0.999  # the picture is pooled
        shown = float(note.text.split("<br>")[-1].removeprefix(figures.GRID_MAX_PREFIX))
        assert shown == float(f"{full:.3g}") and shown != float(f"{float(np.max(trace.z)):.3g}")
        assert trace.zmax == pytest.approx(full, rel=1e-4)


def row_boxes(fig) -> list[tuple[float, float]]:
    """Each row's (bottom, top) as a share of the plot's height, from its first map's y axis."""
    ncols = sum(1 for k in fig.layout if k.startswith("xaxis")) // 2
    return [tuple(fig.layout[f"yaxis{'' if k == 1 else k}"].domain) for k in (1, ncols + 1)]


@pytest.mark.parametrize("cell_px", [140, 200, 250, 300, 390])
@pytest.mark.parametrize("zoom", [1.0, figures.PRESENTATION_ZOOM])
def test_height_follows_the_maps_and_each_bar_is_its_rows_height(cell_px: int, zoom: float) -> None:
    """The figure is as tall as its two rows of square maps plus the titles' lines (no fixed large height); each
    row's colour bar spans exactly its row (the maps' side) and is level with it."""
    fig = figures.grid_figure(cells(), cell_px=cell_px, zoom=zoom)
    margin = fig.layout.margin
    plot_px = fig.layout.height - margin.t - margin.b
    (b0, t0), (b1, t1) = sorted(row_boxes(fig), reverse=True)
    for bottom, top in ((b0, t0), (b1, t1)):
        assert (top - bottom) * plot_px == pytest.approx(cell_px, abs=0.5)  # a row is one map tall
    gap_px = (b0 - t1) * plot_px  # between the rows: the lower row's titles, nothing more
    lines = max(a.text.count("<br>") + 1 for a in fig.layout.annotations[5:8])
    assert gap_px == pytest.approx(round(lines * 1.3 * round(figures.GRID_FONT_PX * zoom)) + 8, abs=1)
    assert fig.layout.height == pytest.approx(margin.t + 2 * cell_px + gap_px + margin.b, abs=1)
    for bar, (bottom, top) in ((fig.layout.coloraxis.colorbar, (b0, t0)), (fig.data[-1].colorbar, (b1, t1))):
        assert bar.lenmode == "fraction" and bar.len == pytest.approx(top - bottom, rel=1e-6)
        assert bar.y == pytest.approx((top + bottom) / 2, rel=1e-6) and bar.yanchor == "middle"


@pytest.mark.parametrize("room", [(1216, 720), (1140, 720), (1600, 1000), (820, 720), (700, 400)])
def test_a_grid_fitted_to_the_screen_fits_it(room: tuple[int, int]) -> None:
    """Given the room on the screen (the column's width, the window's height), the maps shrink until five of
    them fit side by side and both rows fit the height (down to MIN_CELL_PX), never past the asked size."""
    zoom = figures.PRESENTATION_ZOOM
    fig = figures.grid_figure(cells(), zoom=zoom, cell_px=300, ncols=5, room=room)
    margin = fig.layout.margin
    plot_w = room[0] - margin.l - margin.r
    col_px = plot_w * (fig.layout.xaxis.domain[1] - fig.layout.xaxis.domain[0])
    (b0, t0), _ = sorted(row_boxes(fig), reverse=True)
    side = (t0 - b0) * (fig.layout.height - margin.t - margin.b)
    assert side <= 300 + 0.5
    if side > figures.MIN_CELL_PX + 0.5:
        assert side <= col_px + 0.5  # no map narrower than its row is tall: no gaps between rows
        assert fig.layout.height <= room[1]
        assert side >= col_px - 1 or fig.layout.height >= room[1] - 2 or side >= 299.5  # as large as it can be
    unfitted = figures.grid_figure(cells(), zoom=zoom, cell_px=300, ncols=5)
    assert fig.layout.height <= unfitted.layout.height
