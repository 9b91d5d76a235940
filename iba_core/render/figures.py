"""Plotly figures for the interactive views, with no Streamlit.

Heatmaps in bits per pixel with a colour bar, the β × layer grid, the degradation curves, the sanity
check's SSIM, and the field's insertion / deletion and ROAD curves (one colour per method, `colours.method_colour`;
the curves are read by their attributes only, so drawing runs no metric). Colours match the PNG overlays (`overlays`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .colours import BITS_CMAP, BITS_LABEL, method_colour, plotly_colorscale, scale_labels
from .arrays import downsample as pooled

if TYPE_CHECKING:  # imported for type hints only: figures must not pull in torch-heavy modules
    from ..results import GridCell


#: Sequential colour scale for information maps; dark = few bits, bright = many.
BITS_COLORSCALE = plotly_colorscale(BITS_CMAP)
BITS_UNIT = BITS_LABEL

_FONT = dict(family='"Source Sans Pro", "Source Sans 3", "Helvetica Neue", Arial, sans-serif', size=12, color="#31333F")
#: A plain white look that does not depend on the host's chart theme (Streamlit's would recolour the maps).
_TEMPLATE = "plotly_white"


# ---- helpers -------------------------------------------------------------------------------


def _image_axes(fig: go.Figure, row: int | None = None, col: int | None = None) -> None:
    """Square pixels, y pointing down like an image, no tick labels."""
    kw = {} if row is None else dict(row=row, col=col)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, constrain="domain", **kw)
    fig.update_yaxes(
        showticklabels=False, showgrid=False, zeroline=False, autorange="reversed",
        scaleanchor="x" if row is None else None, constrain="domain", **kw,
    )


def _map_figure(
    values: np.ndarray,
    title: str,
    colorbar_title: str,
    *,
    zmin: float = 0.0,
    zmax: float | None = None,
    colorscale: list | str = BITS_COLORSCALE,
    hover_unit: str = "",
    height: int = 360,
    downsample: int = 1,
) -> go.Figure:
    z = pooled(values, downsample)
    if zmax is None:
        zmax = float(z.max()) if z.size and z.max() > zmin else zmin + 1e-6
    f = max(downsample, 1)
    # The colour bar states its range: round ticks, and the top itself (never two labels on top of each other).
    clipped = bool(z.size) and float(z.max()) > zmax * (1 + 1e-6)
    ticks = scale_labels(zmax, zmin, clipped=clipped)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            # Pooled cells keep the original pixel coordinates, so hover positions stay comparable.
            x0=(f - 1) / 2, dx=f, y0=(f - 1) / 2, dy=f,
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            colorbar=dict(title=dict(text=colorbar_title, side="right"), thickness=12, outlinewidth=0,
                          tickmode="array", tickvals=[v for v, _ in ticks], ticktext=[t for _, t in ticks]),
            hovertemplate=f"x=%{{x}}, y=%{{y}}<br>%{{z:.4g}} {hover_unit}<extra></extra>",
        )
    )
    _image_axes(fig)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=14)) if title else None,
        margin=dict(l=0, r=0, t=36 if title else 4, b=0),
        height=height,
        font=_FONT,
        template=_TEMPLATE,
    )
    return fig


# ---- heatmaps -----------------------------------------------------------------------------


def heatmap_figure(
    bits: np.ndarray, title: str, zmax: float | None = None, *, height: int = 360, downsample: int = 1
) -> go.Figure:
    """Bits-per-pixel map with a colour bar in bits that labels its top; zmax fixes the top of the scale (a run's
    views pass the run's scale, `colours.run_scale`; default: the map's max).

    downsample > 1 mean-pools the map (still bits per original pixel) for a lighter live view.
    """
    return _map_figure(bits, title, BITS_UNIT, zmax=zmax, hover_unit=BITS_UNIT, height=height, downsample=downsample)


# ---- β × layer grid ---------------------------------------------------------------------------


#: Text of the β × layer grid (cell titles, row titles, colour-bar labels) in CSS px: at 1920 × 1080 on a
#: projector, 16 px and up read from the back of a lecture hall.
GRID_FONT_PX = 18
#: Presentation mode (the app's sidebar toggle): the grid's text and maps this much larger.
PRESENTATION_ZOOM = 1.3
#: Side of a grid cell's map in px before zoom (the figure's height follows; a narrower page narrows the map).
_GRID_CELL_PX = 250
#: Space between a row's maps, as a share of the plot's width.
_GRID_GAP = 0.015
#: The smallest side of a map when the grid is fitted to a small screen (smaller reads as noise in a room).
MIN_CELL_PX = 120


def _grid_sides(font_px: int, zoom: float) -> tuple[int, int]:
    """Margins left (the row title, one line of text turned upright) and right (a colour bar: its pad, bar,
    tick labels and upright title of up to two lines) of the grid, in CSS px."""
    return 10 + round(1.6 * font_px), 8 + round(12 * zoom) + round(4.7 * font_px)


def fitting_cell_px(room: tuple[float, float], ncols: int, nrows: int, sides_px: float, text_px: float,
                    largest: int) -> int:
    """The side of a grid map, at most `largest`, at which `ncols` square maps side by side (with gaps and
    `sides_px` of margins) fit `room`'s width and `nrows` rows of them (with `text_px` of titles and margins)
    fit its height; never below MIN_CELL_PX."""
    width, height = room
    by_width = (width - sides_px) * (1 - _GRID_GAP * (ncols - 1)) / max(ncols, 1)
    by_height = (height - text_px) / max(nrows, 1)
    return int(max(MIN_CELL_PX, min(largest, by_width, by_height)))


#: Characters per line of a cell title at zoom 1 (fewer when zoomed): at 1280 × 800 with the sidebar open the
#: grid is 820 px wide, 140 px per column, which holds 13 characters at 18 px; titles wider than that would run
#: into their neighbours. Hence one fact per line, and long layer names wrapped.
_TITLE_LINE_CHARS = 13
#: A layer name wraps onto at most this many lines (then ends in …; hovering a map shows it whole).
_TITLE_NAME_LINES = 3
#: Height of one line of annotation text, in font sizes (Plotly's line spacing).
_LINE_EM = 1.3


@dataclass
class _GridPlan:
    """What the β × layer grid draws and where: its rows' cells, their scales and titles, and the figure's sizes."""

    rows: Sequence[str]
    by_row: dict[str, list["GridCell"]]
    own: dict[str, bool]  # whether a row gives each map its own scale
    shown: dict[str, list["GridCell"]]  # the maps drawn, on the scales (no lost cell)
    ncols: int
    maps: dict[int, np.ndarray]  # by id(cell): the pooled map the browser gets
    tops: dict[int, float]  # by id(cell): the full-resolution map's maximum
    titles: dict[int, str]
    font_px: int
    zoom: float
    bands: list[int]  # space above each row's maps for its titles, in px
    top_margin: int
    left: int
    right: int
    height: int


def _plan_grid(cells: Sequence["GridCell"], title: str, rows: Sequence[str], downsample: int, height: int | None,
               shared_scale: bool, own_scale_rows: Sequence[str], zoom: float, ncols: int | None,
               cell_px: int | None, room: tuple[float, float] | None) -> _GridPlan:
    """The grid's cells by row, their scales, titles and the figure's sizes (`grid_figure`'s arguments)."""
    by_row = {r: [c for c in cells if c.row == r] for r in rows}
    own = {r: not shared_scale or r in own_scale_rows for r in rows}
    ncols = max([len(v) for v in by_row.values()] + [ncols or 1])
    maps = {id(c): pooled(c.heatmap, downsample) for c in cells}  # what the browser gets
    # Maxima of the full-resolution maps: pooling averages a peak away (0.683 pooled against Per-Sample's 0.695).
    tops = {id(c): max(float(np.max(c.heatmap)) if np.size(c.heatmap) else 0.0, 1e-6) for c in cells}
    shown = {r: [c for c in by_row[r] if not c.lost_class] for r in rows}
    font_px = round(GRID_FONT_PX * zoom)
    line_chars = max(8, int(_TITLE_LINE_CHARS / zoom))
    titles = {id(c): _cell_title(c, tops[id(c)] if own[c.row] and not c.lost_class else None, line_chars)
              for c in cells if c.row in own}
    # Space above each row's maps for its cell titles: as many lines as the row's longest title (at least the
    # 3 or 4 lines of a full row, so a grid that fills live does not jump).
    lines = {r: max([3 + own[r]] + [titles[id(c)].count("<br>") + 1 for c in by_row[r]]) for r in rows}
    bands = [round(lines[r] * _LINE_EM * font_px) + 8 for r in rows]
    cell_px = cell_px or round(_GRID_CELL_PX * zoom)
    top_margin = bands[0] + (round(1.6 * font_px) if title else 0)
    left, right = _grid_sides(font_px, zoom)
    if room is not None:
        cell_px = fitting_cell_px(room, ncols, len(rows), left + right, top_margin + sum(bands[1:]) + 10, cell_px)
    height = height or top_margin + len(rows) * cell_px + sum(bands[1:]) + 10
    return _GridPlan(rows, by_row, own, shown, ncols, maps, tops, titles, font_px, zoom, bands, top_margin, left,
                     right, height)


def _row_colour_bar(fig: go.Figure, plan: _GridPlan, i: int) -> dict:
    """The colour bar of row `i` (1-based): the row's whole height, level with its maps."""
    y0, y1 = fig.get_subplot(i, 1).yaxis.domain
    # The row's whole height (its maps' side): level with the maps, not taller, not offset.
    return dict(thickness=round(12 * plan.zoom), outlinewidth=0, lenmode="fraction", len=y1 - y0, y=(y0 + y1) / 2,
                yanchor="middle", x=1.0, xpad=8, ypad=0, tickfont=dict(size=plan.font_px))


def _add_grid_cell(fig: go.Figure, plan: _GridPlan, cell: "GridCell", i: int, j: int, bar: dict,
                   axis: str) -> dict | None:
    """Draw one cell's title and map at row `i`, column `j`; a lost cell's mark is returned to be added last."""
    # The title sits on the map's own (square-constrained) domain, so it stays right above the map.
    k = (i - 1) * plan.ncols + j
    font_px = plan.font_px
    fig.add_annotation(
        text=plan.titles[id(cell)], showarrow=False, font=dict(size=font_px),
        x=0.5, xref=f"x{k if k > 1 else ''} domain", xanchor="center",
        y=1.0, yref=f"y{k if k > 1 else ''} domain", yanchor="bottom", yshift=2,
    )
    if cell.lost_class:
        return _add_lost_cell(fig, cell, plan.maps[id(cell)].shape, i, j, k, font_px)
    if plan.own[cell.row]:
        # No shared bar: the row's last map carries one that reads 0 … "max", each map's own (its title's
        # "max 13.4"), in bits per pixel.
        last = cell is plan.shown[cell.row][-1]
        top = plan.tops[id(cell)]
        scale = dict(zmin=0.0, zmax=top, colorscale=BITS_COLORSCALE, showscale=last,
                     colorbar=dict(bar, tickvals=[0.0, top], ticktext=["0", "max"],
                                   # Two short lines: one long line overran a small map's row.
                                   title=dict(text=f"{BITS_UNIT},<br>own scale", side="right",
                                              font=dict(size=font_px))))
    else:
        scale = dict(coloraxis=axis)
    fig.add_trace(
        go.Heatmap(z=plan.maps[id(cell)], **scale,
                   hovertemplate=f"{cell.label}<br>%{{z:.3g}} {BITS_UNIT}<extra></extra>"),
        row=i, col=j,
    )
    return None


def _add_grid_row(fig: go.Figure, plan: _GridPlan, i: int, r: str) -> list[dict]:
    """Draw row `i` (1-based, cells of row kind `r`): its cells, axes, row title and shared scale; returns the
    marks of its lost cells."""
    axis = "coloraxis" if i == 1 else f"coloraxis{i}"
    bar = _row_colour_bar(fig, plan, i)
    marks = [mark for j, cell in enumerate(plan.by_row[r], start=1)
             if (mark := _add_grid_cell(fig, plan, cell, i, j, bar, axis)) is not None]
    for j in range(1, plan.ncols + 1):
        _image_axes(fig, row=i, col=j)
    fig.update_yaxes(title_text=_row_title(plan.by_row[r]), title_font=dict(size=plan.font_px), row=i, col=1)
    if not plan.own[r] and plan.shown[r]:
        fig.layout[axis] = dict(
            cmin=0.0, cmax=max(plan.tops[id(c)] for c in plan.shown[r]), colorscale=BITS_COLORSCALE,
            colorbar=dict(bar, title=dict(text=BITS_UNIT, side="right", font=dict(size=plan.font_px))),
        )
    return marks


def _finish_grid(fig: go.Figure, plan: _GridPlan, title: str) -> None:
    """Square cells, and the grid's title, height, margins and look."""
    # Square cells: anchor every y axis to its own x axis.
    for k in range(1, len(plan.rows) * plan.ncols + 1):
        suffix = "" if k == 1 else str(k)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=round(1.2 * plan.font_px))) if title else None,
        height=plan.height,
        margin=dict(l=plan.left, r=plan.right, t=plan.top_margin, b=10),
        font=dict(_FONT, size=plan.font_px),
        template=_TEMPLATE,
    )


def grid_figure(
    cells: Sequence["GridCell"],
    title: str = "",
    rows: Sequence[str] = ("beta", "layer"),
    downsample: int = 2,
    *,
    height: int | None = None,
    shared_scale: bool = True,
    own_scale_rows: Sequence[str] = ("layer",),
    zoom: float = 1.0,
    ncols: int | None = None,
    cell_px: int | None = None,
    room: tuple[float, float] | None = None,
) -> go.Figure:
    """One heatmap per cell, a row per cell.row; titles give p, the bits and whether the class was lost.

    Colour scales (linear, from 0 bits per pixel): a row in `own_scale_rows` (default the layer row) gives each
    map its own scale, 0 … its maximum, printed in its title: layers of different resolution spread their bits
    over pixels differently (the stem's 13 bits/px would turn a deep layer's 0.07 black), so the row compares
    shapes. Every other row (the β row, one layer) shares one scale, 0 … the row's largest value, with a colour
    bar in bits per pixel (a Plotly coloraxis): bits are absolute, a map that lets few bits through looks dark.
    shared_scale=False gives every map its own scale. zoom enlarges text and maps (presentation mode); cell_px
    sets a map's side instead. `room` = (width, height) in CSS px that the figure may take (the page's column,
    the window's height): the maps shrink to fit it, so no map is narrower than its row is tall (which left
    gaps between the rows) and both rows fit on one screen. The figure's height is the maps' side × rows plus
    the titles' lines; each row's colour bar is exactly as tall as its row and level with its maps.
    Each map's maximum (its title's "max", its own scale's top, a shared row's top) is that of the
    full-resolution map, as on the other pages; the picture sent is `downsample`× pooled for size.
    A cell whose bottleneck discarded the class (`GridCell.lost_class`) shows no map: a grey hatched square
    that says LOST_CLASS_MARK (its map, drained of the class's information, would read as a black square), and
    it takes no part in its row's scale.
    Cells not yet computed may be missing: their slot stays empty, so the figure can fill live; `ncols` (the
    full grid's columns) keeps the layout of a filling grid from changing as cells arrive.
    """
    plan = _plan_grid(cells, title, rows, downsample, height, shared_scale, own_scale_rows, zoom, ncols, cell_px,
                      room)
    plot_px = max(plan.height - plan.top_margin - 10, 1)
    fig = make_subplots(
        rows=len(rows), cols=plan.ncols, horizontal_spacing=_GRID_GAP,
        vertical_spacing=min(max(plan.bands[1:] + [0]) / plot_px, 0.5) if len(rows) > 1 else 0.0,
    )
    lost_marks: list[dict] = []  # added after every title: annotation i is cell i's title
    for i, r in enumerate(rows, start=1):
        lost_marks += _add_grid_row(fig, plan, i, r)
    for mark in lost_marks:
        fig.add_annotation(**mark)
    _finish_grid(fig, plan, title)
    return fig


#: What a cell whose bottleneck discarded the class (`per_sample.bottleneck_lost_class`) says, in place of its map.
LOST_CLASS_MARK = "class lost"
#: The lost cell's square: two light greys in diagonal stripes (neutral, clearly not a map: no map colour is grey),
#: and its text in the page's text colour.
LOST_CELL_GREYS = ("#e4e4e4", "#cfcfcf")
LOST_CELL_TEXT = "#31333F"
_LOST_STRIPE = 6  # stripe width, in pixels of the (pooled) map


def _add_lost_cell(fig: go.Figure, cell: "GridCell", shape: tuple[int, ...], row: int, col: int, k: int,
                   font_px: int) -> dict:
    """Subplot (row, col) = axes k: a grey hatched square of the map's size; returns the annotation that says
    LOST_CLASS_MARK on it (for `fig.add_annotation`)."""
    h, w = shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    stripes = (((xx + yy) // _LOST_STRIPE) % 2).astype(np.uint8)
    fig.add_trace(
        go.Heatmap(z=stripes, zmin=0, zmax=1, showscale=False,
                   colorscale=[[0.0, LOST_CELL_GREYS[0]], [1.0, LOST_CELL_GREYS[1]]],
                   hovertemplate=f"{cell.label}: {LOST_CLASS_MARK} — the bottleneck discarded the class "
                                 f"(p = {cell.p_with:.2f}, without it {cell.p_without:.2f}); its map is not shown"
                                 "<extra></extra>"),
        row=row, col=col,
    )
    suffix = k if k > 1 else ""
    return dict(text=LOST_CLASS_MARK, name="lost class", showarrow=False, font=dict(size=font_px, color=LOST_CELL_TEXT),
                x=0.5, xref=f"x{suffix} domain", y=0.5, yref=f"y{suffix} domain", bgcolor="rgba(255,255,255,0.85)",
                borderpad=4)


def _cell_title(cell: "GridCell", top: float | None = None, line_chars: int = _TITLE_LINE_CHARS) -> str:
    """One fact per line, each at most `line_chars` wide: the label (a layer name wrapped), p, the total bits;
    with `top`, the map's own scale's maximum (its unit, bits / pixel, on the row's bar). A cell that lost the
    class says so in its square (`_add_lost_cell`), not in its title."""
    lines = _wrap_name(cell.label, line_chars)
    lines += [f"p = {cell.p_with:.2f}", f"{cell.total_bits:,.0f} bits"]
    if top is not None:
        lines.append(f"{GRID_MAX_PREFIX}{top:.3g}")
    return "<br>".join(lines)


#: How a layer-row cell's title gives the top of its own colour scale: "max 13.4" (bits per pixel).
GRID_MAX_PREFIX = "max "


def _wrap_name(name: str, width: int) -> list[str]:
    """`name` in lines of at most `width` characters, broken after . _ / - or a space where it can be (layer
    names have no spaces: features.denseblock2.denselayer12), at most _TITLE_NAME_LINES lines."""
    lines = [""]
    for part in re.split(r"(?<=[._/\- ])", name):
        while part:
            if lines[-1] and len(lines[-1]) + len(part) > width:
                lines.append("")
            room = width - len(lines[-1])
            lines[-1] += part[:room]
            part = part[room:]
    lines = [line.strip() for line in lines]
    if len(lines) > _TITLE_NAME_LINES:
        lines = lines[:_TITLE_NAME_LINES]
        lines[-1] = lines[-1][: width - 1] + "…"
    return lines


def _row_title(row_cells: Sequence["GridCell"]) -> str:
    """What is held fixed along a row: the layer for the β row, β·k for the layer row."""
    if not row_cells:
        return ""
    first = row_cells[0]
    return f"layer {first.layer}" if first.row == "beta" else f"β·k = {first.beta_k:g}"


# ---- evaluation -------------------------------------------------------------------------------


#: Text of the evaluation figures in CSS px (Plotly draws at the page's scale): Plotly's default 12 px tick
#: labels are below the 13 px that read comfortably.
FIGURE_FONT_PX = 14


def _colours(keys: Sequence[str], colours: Mapping[str, str] | None) -> dict[str, str]:
    """Each method's colour: from `colours` (method key → colour; the app's `evaluation.chart_colours`, fixed per
    method), else by its place in the chart; keys missing from `colours` take the palette's colours by place."""
    given = dict(colours or {})
    return {key: given.get(key) or method_colour(i) for i, key in enumerate(keys)}


def degradation_figure(curves: dict, names: dict[str, str], *, colours: Mapping[str, str] | None = None,
                       height: int = 380) -> go.Figure:
    """Scaled MoRF (solid) and LeRF (dashed) per method, one colour per method.

    curves: {method key: DegradationCurves}; names: method key → display name; colours: method key → colour
    (by default by the method's place in `curves`).
    """
    fig = go.Figure()
    colour_of = _colours(list(curves), colours)
    for key, c in curves.items():
        morf, lerf = c.scaled()
        colour = colour_of[key]
        name = names.get(key, key)
        fig.add_scatter(x=c.fraction, y=morf, mode="lines", name=f"{name} · MoRF", line=dict(color=colour),
                        legendgroup=key)
        fig.add_scatter(x=c.fraction, y=lerf, mode="lines", name=f"{name} · LeRF",
                        line=dict(color=colour, dash="dash"), legendgroup=key)
    fig.update_layout(height=height, template=_TEMPLATE, margin=dict(l=60, r=10, t=30, b=50),
                      font=dict(_FONT, size=FIGURE_FONT_PX),
                      xaxis_title="fraction of tiles removed", yaxis_title="scaled p(target)",
                      legend=dict(font=dict(size=FIGURE_FONT_PX - 1)))
    return fig


def ssim_figure(strip, *, height: int = 300) -> go.Figure:
    """SSIM of each randomised map to the original one, along the cascade (the original scores 1).

    strip: the sanity check's result (`iba_core.app.evaluation.SanityStrip`: .method, .levels, .ssim).
    """
    fig = go.Figure(go.Scatter(x=["original", *strip.levels], y=[1.0, *strip.ssim], mode="lines+markers",
                               name=strip.method))
    fig.update_layout(height=height, template=_TEMPLATE, margin=dict(l=60, r=10, t=30, b=70),
                      font=dict(_FONT, size=FIGURE_FONT_PX),  # tick labels and titles ≥ 13 px on screen
                      yaxis=dict(title="SSIM to the original map", range=[-0.1, 1.05]),
                      xaxis_title="randomised from the logits down to …")
    return fig


# ---- the field's yardsticks (issue #29): insertion / deletion and ROAD curves ------------------------


def _curves_layout(fig: go.Figure, height: int) -> None:
    """The layout the metric curves share: template, margins, fonts ≥ 13 px on screen."""
    fig.update_layout(height=height, template=_TEMPLATE, margin=dict(l=60, r=10, t=40, b=50),
                      font=dict(_FONT, size=FIGURE_FONT_PX), legend=dict(font=dict(size=FIGURE_FONT_PX - 1)))


class InsertionDeletionCurves(Protocol):
    """What the insertion / deletion chart reads of `metrics.insertion_deletion.InsertionDeletionCurves` (named here,
    so drawing imports nothing of the metrics, not even for type hints)."""

    fraction: np.ndarray
    insertion: np.ndarray | None
    deletion: np.ndarray | None
    insertion_auc: float
    deletion_auc: float


class RoadCurves(Protocol):
    """What the ROAD chart reads of `metrics.road.RoadCurves` (named here for the same reason)."""

    removed: np.ndarray
    morf: np.ndarray
    lerf: np.ndarray
    morf_score: float
    lerf_score: float


def insertion_deletion_figure(curves: Mapping[str, "InsertionDeletionCurves"], names: Mapping[str, str], *,
                              colours: Mapping[str, str] | None = None, height: int = 400) -> go.Figure:
    """p(target) against the share of pixels inserted (left) and deleted (right), one colour per method; each
    curve's legend entry carries its area under the curve (insertion: higher is better; deletion: lower).

    curves: {method key: InsertionDeletionCurves}; names: method key → display name (the key if missing);
    colours: method key → colour (by default by place). A curve not measured (None) is left out.
    """
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=("Insertion (higher is better)", "Deletion (lower is better)"))
    colour_of = _colours(list(curves), colours)
    for key, c in curves.items():
        colour, name = colour_of[key], names.get(key, key)
        for col, (kind, values, area) in enumerate(
                (("insertion", c.insertion, c.insertion_auc), ("deletion", c.deletion, c.deletion_auc)), start=1):
            if values is None:
                continue
            fig.add_scatter(x=list(map(float, c.fraction)), y=list(map(float, values)), mode="lines",
                            name=f"{name} · {kind} AUC {area:.3f}", line=dict(color=colour), legendgroup=key,
                            row=1, col=col)
    _curves_layout(fig, height)
    fig.update_xaxes(title_text="share of pixels inserted", range=[0, 1], row=1, col=1)
    fig.update_xaxes(title_text="share of pixels deleted", range=[0, 1], row=1, col=2)
    fig.update_yaxes(title_text="p(target)", row=1, col=1)
    return fig


def road_figure(curves: Mapping[str, "RoadCurves"], names: Mapping[str, str], *,
                colours: Mapping[str, str] | None = None, height: int = 360) -> go.Figure:
    """ROAD: p(target) against the percent of pixels removed by noisy linear imputation, most relevant first
    (MoRF, solid; lower is better) and least relevant first (LeRF, dashed; higher is better), one colour per
    method (`colours`: method key → colour; by default by place); each legend entry carries its curve's mean."""
    fig = go.Figure()
    colour_of = _colours(list(curves), colours)
    for key, c in curves.items():
        colour, name = colour_of[key], names.get(key, key)
        x = list(map(float, c.removed))
        fig.add_scatter(x=x, y=list(map(float, c.morf)), mode="lines+markers", line=dict(color=colour),
                        name=f"{name} · MoRF {c.morf_score:.3f}", legendgroup=key)
        fig.add_scatter(x=x, y=list(map(float, c.lerf)), mode="lines+markers", line=dict(color=colour, dash="dash"),
                        name=f"{name} · LeRF {c.lerf_score:.3f}", legendgroup=key)
    _curves_layout(fig, height)
    fig.update_layout(title=dict(text="ROAD: MoRF (lower is better), LeRF (higher is better)", x=0.5,
                                 xanchor="center", font=dict(size=FIGURE_FONT_PX + 2)),
                      xaxis_title="% of pixels removed (imputed)", yaxis_title="p(target)")
    return fig
