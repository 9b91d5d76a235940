"""The comparison grid as one PNG: the input and every attribution map, each titled with its method and time.

    >>> png = grid_png(maps, cropped_image, title="chelsea · EfficientNet-Lite0 · Egyptian cat")

Signed maps on a diverging blue (negative) / white (0) / red (positive) scale symmetric around 0; unsigned
maps on a sequential scale; maps with a unit (the bottlenecks' bits/pixel) get a colour bar in that unit whose
top label is the map's top. By default every map has its own range, so each bottleneck reads at a glance (a
readout's 0–4.9 bits/pixel would leave a Per-Sample map peaking at 0.7 nearly black); bits are absolute, and
`shared_scale=True` puts the maps with a unit on one scale per unit (`shared_limits`), to compare magnitudes:
a bottleneck that lets fewer bits through then looks darker.

Every cell has the same geometry — a title band, a square map, a strip for the colour bar (empty for maps
without a unit) — so all maps are drawn at one size, in the grid and as single cells (`cell_png`,
`image_cell_png`: no title, larger text; the Compare page shows them side by side, captioned). Titles are
wrapped (and, beyond two lines, shortened) to their cell. Matplotlib without pyplot: no global state, safe in a
server thread.
"""
from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image

from .colours import scale_labels
from .text import format_seconds

if TYPE_CHECKING:  # type hints only: drawing a map needs its plain fields, not the methods (and torch)
    from ..results import AttributionMap

SIGNED_CMAP = "bwr"
UNSIGNED_CMAP = "inferno"
#: Signed and unitless maps are scaled to this percentile of |values| so one extreme pixel does not wash out
#: the rest (gradients are heavy-tailed); values beyond it saturate. Maps with a unit use their true range.
ROBUST_PERCENTILE = 99.5

Limits = tuple[float, float]

# Cell geometry, in inches (the map's side is `cell_inches`); text and the room it needs grow with text_scale.
_TITLE_BAND = 0.55  # two lines of name and one of time, 9 pt
_BAR_GAP, _BAR_WIDTH = 0.08, 0.12
_BAR_TEXT = 0.55  # tick labels and the unit label beside the colour bar
_TICK_PT, _LABEL_PT = 7, 8
_PAD = 0.15  # between cells
_MARGIN = 0.1  # around the figure
_TITLE_PT, _SUPTITLE_PT = 9, 10
_CHAR_EM = 0.6  # a generous average character width (in ems) for wrapping


def colour_limits(amap: AttributionMap) -> Limits:
    """(vmin, vmax) of a map on its own: symmetric around 0 if signed, from 0 (or the minimum) if not."""
    values = np.asarray(amap.values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (-1.0, 1.0) if amap.signed else (0.0, 1.0)
    if amap.signed:
        top = float(np.percentile(np.abs(finite), ROBUST_PERCENTILE)) or float(np.abs(finite).max())
        top = top or 1.0
        return -top, top
    low = min(0.0, float(finite.min()))
    if amap.unit:
        high = float(finite.max())
    else:
        high = float(np.percentile(finite, ROBUST_PERCENTILE)) or float(finite.max())
    if high <= low:
        high = low + 1.0
    return low, high


def _shares_scale(amap: AttributionMap) -> bool:
    """Maps in an absolute unit (bits/pixel) share a scale with the other maps in that unit."""
    return bool(amap.unit) and not amap.signed


def shared_limits(maps: Sequence[AttributionMap]) -> dict[str, Limits]:
    """{unit: (vmin, vmax)} spanning every unsigned map in that unit: one scale for all bits/pixel maps."""
    out: dict[str, Limits] = {}
    for amap in maps:
        if not _shares_scale(amap):
            continue
        lo, hi = colour_limits(amap)
        if amap.unit in out:
            lo, hi = min(lo, out[amap.unit][0]), max(hi, out[amap.unit][1])
        out[amap.unit] = (lo, hi)
    return out


def map_limits(maps: Sequence[AttributionMap], shared_scale: bool = False) -> list[Limits]:
    """The colour range of each map as the grid draws it: each its own (default) or shared per unit."""
    shared = shared_limits(maps) if shared_scale else {}
    return [shared.get(m.unit, colour_limits(m)) if _shares_scale(m) else colour_limits(m) for m in maps]


def limits_text(amap: AttributionMap, limits: Limits | None = None) -> str:
    """'−a … a' or '0 … b' with the unit: the colour range a grid cell uses (its own unless `limits`); for a map
    that is zero everywhere, that (a black cell would otherwise look like a failed drawing: Grad-CAM++ and LayerCAM
    are blank where no position has positive evidence for the class)."""
    if not np.any(amap.values):
        return "— the map is zero everywhere (no evidence for this class found)"  # after "scale "
    lo, hi = limits or colour_limits(amap)
    unit = f" {amap.unit}" if amap.unit else ""
    return f"{lo:.3g} … {hi:.3g}{unit}"


def wrap_title(text: str, inches: float, points: float = _TITLE_PT, lines: int = 2) -> str:
    """`text` wrapped to a width of `inches` at `points`, at most `lines` lines (then shortened with …)."""
    chars = max(8, int(inches * 72 / (points * _CHAR_EM)))
    wrapped = textwrap.wrap(text, width=chars, max_lines=lines, placeholder=" …", break_long_words=True)
    return "\n".join(wrapped) or text[:chars]


def _title(amap: AttributionMap, inches: float, points: float = _TITLE_PT) -> str:
    return f"{wrap_title(amap.name, inches, points)}\n{format_seconds(amap.seconds)}"


@dataclass(frozen=True)
class _Layout:
    """The grid's geometry in inches: `cols` cells per row, each a title band, a square map and a bar strip."""

    cols: int
    cell_inches: float  # the map's side
    cell_w: float  # map and colour-bar strip
    row_h: float  # title band, map and the gap below
    title_band: float
    top: float  # room for the figure's heading
    width: float
    height: float

    def rect(self, x: float, y_top: float, w: float, h: float) -> list[float]:
        """Inches from the top-left corner → matplotlib's figure fractions from the bottom-left."""
        return [x / self.width, 1.0 - (y_top + h) / self.height, w / self.width, h / self.height]

    def slot(self, i: int) -> tuple[float, float]:
        """Top-left corner (inches) of the i-th cell's map."""
        r, c = divmod(i, self.cols)
        return _MARGIN + c * (self.cell_w + _PAD), _MARGIN + self.top + r * self.row_h + self.title_band


def _layout(panels: int, columns: int | None, cell_inches: float, title: str | None, titles: bool,
            text_scale: float) -> tuple[_Layout, str]:
    """The geometry of a grid of `panels` cells, and its heading (wrapped to the figure's width, or "")."""
    cols = columns or min(panels, 5)
    rows = math.ceil(panels / cols)
    bar_strip = _BAR_GAP + _BAR_WIDTH + _BAR_TEXT * text_scale
    title_band = _TITLE_BAND * text_scale if titles else 0.0
    cell_w = cell_inches + bar_strip
    width = 2 * _MARGIN + cols * cell_w + (cols - 1) * _PAD
    heading = wrap_title(title, width - 2 * _MARGIN, _SUPTITLE_PT, lines=2) if title else ""
    top = (0.22 * (heading.count("\n") + 1) + 0.1) if heading else 0.0
    row_h = title_band + cell_inches + _PAD
    height = _MARGIN + top + rows * row_h
    return _Layout(cols, cell_inches, cell_w, row_h, title_band, top, width, height), heading


def _draw_image_cell(fig, layout: _Layout, i: int, image: Image.Image | np.ndarray, title: str | None,
                     text_scale: float) -> None:
    """The input image in cell i, titled unless `title` is None."""
    x, y = layout.slot(i)
    ax = fig.add_axes(layout.rect(x, y, layout.cell_inches, layout.cell_inches))
    ax.set_axis_off()
    ax.imshow(np.asarray(image), aspect="auto")
    if title is not None:
        title_pt = _TITLE_PT * text_scale
        ax.set_title(wrap_title(title, layout.cell_inches, title_pt), fontsize=title_pt, pad=4)


def _draw_map_cell(fig, layout: _Layout, i: int, amap: AttributionMap, limits: Limits, titled: bool,
                   text_scale: float) -> None:
    """A map in cell i on its colour scale (`limits`), titled if asked, with a colour bar if it has a unit."""
    x, y = layout.slot(i)
    side = layout.cell_inches
    ax = fig.add_axes(layout.rect(x, y, side, side))
    ax.set_axis_off()
    cmap = SIGNED_CMAP if amap.signed else UNSIGNED_CMAP
    image = ax.imshow(amap.values, cmap=cmap, vmin=limits[0], vmax=limits[1], interpolation="nearest", aspect="auto")
    if titled:
        title_pt = _TITLE_PT * text_scale
        ax.set_title(_title(amap, side, title_pt), fontsize=title_pt, pad=4)
    if amap.unit:
        cax = fig.add_axes(layout.rect(x + side + _BAR_GAP, y, _BAR_WIDTH, side))
        bar = fig.colorbar(image, cax=cax)
        # Round ticks and the top itself, labelled: the bar states how many bits its brightest colour means.
        labels = scale_labels(limits[1], limits[0], min_gap=0.14)
        bar.set_ticks([v for v, _ in labels], labels=[t for _, t in labels])
        bar.set_label(amap.unit, fontsize=_LABEL_PT * text_scale)
        bar.ax.tick_params(labelsize=_TICK_PT * text_scale)
        bar.outline.set_visible(False)


def grid_canvas(
    maps: Sequence[AttributionMap],
    cropped_image: Image.Image | np.ndarray | None = None,
    *,
    columns: int | None = None,
    cell_inches: float = 2.4,
    dpi: int = 100,
    title: str | None = None,
    shared_scale: bool = False,
    limits: Sequence[Limits] | None = None,
    image_title: str = "Input",
    titles: bool = True,
    text_scale: float = 1.0,
):
    """The grid as a matplotlib Figure (see `grid_png`); every cell has the same size and layout.

    limits: the colour range of each map (default: `map_limits(maps, shared_scale)`). titles=False leaves out
    the cells' titles (a page that captions them itself); text_scale enlarges all text (and the room for it),
    for pictures that are shown smaller than drawn.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in a server thread

    panels = (1 if cropped_image is not None else 0) + len(maps)
    if panels == 0:
        raise ValueError("Nothing to draw: no maps and no image.")
    limits = list(limits) if limits is not None else map_limits(maps, shared_scale)
    layout, heading = _layout(panels, columns, cell_inches, title, titles, text_scale)
    fig = Figure(figsize=(layout.width, layout.height), dpi=dpi)
    first_map = 0
    if cropped_image is not None:
        _draw_image_cell(fig, layout, 0, cropped_image, image_title if titles else None, text_scale)
        first_map = 1
    for i, (amap, lim) in enumerate(zip(maps, limits), start=first_map):
        _draw_map_cell(fig, layout, i, amap, lim, titles, text_scale)
    if heading:
        fig.text(0.5, 1.0 - (_MARGIN + 0.02) / layout.height, heading, ha="center", va="top", fontsize=_SUPTITLE_PT)
    return fig


def _png(fig, dpi: int) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def grid_png(maps: Sequence[AttributionMap], cropped_image: Image.Image | np.ndarray | None = None,
             **layout) -> bytes:
    """The input image and every map in one PNG (bytes), all cells of one size.

    Signed maps: "bwr" (blue < 0 < red), symmetric around 0. Unsigned: "inferno". Maps with a unit
    (IBA, Readout: bits/pixel) get a colour bar labelled with it and with its top; each map has its own range
    (default), or with shared_scale=True the maps with a unit share one range per unit (bits are absolute).
    layout: `grid_canvas`'s keywords (columns, cell_inches, dpi, title, shared_scale, …), so the PNG and the
    figure cannot disagree.
    """
    fig = grid_canvas(maps, cropped_image, **layout)
    return _png(fig, fig.dpi)


#: A single cell (a page shows it about half size, captioned by the page): the map's side in inches at 100 dpi,
#: and text twice the grid's size so that the colour bar stays readable when shown smaller.
CELL_INCHES, CELL_TEXT_SCALE = 2.8, 2.0


def cell_png(amap: AttributionMap, limits: Limits | None = None) -> bytes:
    """One map on its own, in the grid's colours and cell layout (map and colour-bar strip), without a title
    (the page captions it). limits: the colour range (default: the map's own). Every cell PNG (and
    `image_cell_png`) has the same size, so a page's cells line up at one size."""
    fig = grid_canvas([amap], None, columns=1, cell_inches=CELL_INCHES, limits=None if limits is None else [limits],
                      shared_scale=False, titles=False, text_scale=CELL_TEXT_SCALE)
    return _png(fig, 100)


def image_cell_png(image: Image.Image | np.ndarray) -> bytes:
    """The input image as a cell of the same size and layout as `cell_png`'s (the colour-bar strip empty)."""
    return _png(grid_canvas([], image, columns=1, cell_inches=CELL_INCHES, titles=False,
                            text_scale=CELL_TEXT_SCALE), 100)
