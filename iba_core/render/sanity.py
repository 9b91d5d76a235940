"""The sanity check's strip as one PNG: the original map and the map after each randomisation step.

The strip is drawn for one display width (`sanity_strip_width`, CSS px), so its titles have a known size on
screen: a page shows it at that width, not stretched or shrunk to the column (a stretched 9-panel PNG put
its titles at ~9 px).
"""
from __future__ import annotations

import io
from typing import Callable

import numpy as np

#: Width of one panel (a map and its title) on screen, in CSS px, before zoom.
STRIP_PANEL_PX = 150
#: Panel titles ("→ block7", "SSIM 0.53") on screen, in CSS px, before zoom: 13 px is the least that reads
#: comfortably; a little more for a projector.
STRIP_TITLE_PX = 15
#: Panels per row: five fit a 1280 × 800 window with the sidebar open (the page's column is ~820 px wide);
#: a longer cascade wraps onto further rows rather than shrinking the titles.
STRIP_PER_ROW = 5
#: PNG pixels per CSS pixel: sharp on high-density screens (the browser scales it down to the display width).
STRIP_DENSITY = 2
_DPI = 72  # 1 pt = 1 PNG px at this dpi, so the title's size in points is its size in PNG pixels


def _panels(strip) -> list[tuple[str, np.ndarray, float | None]]:
    """(title, heatmap, SSIM or None) for the original map and each randomised one."""
    return [("original", strip.original, None),
            *((f"→ {name}", h, s) for name, h, s in zip(strip.levels, strip.heatmaps, strip.ssim))]


def _layout(strip) -> tuple[int, int]:
    """(rows, columns) of the strip's panels."""
    n = len(strip.levels) + 1
    cols = min(n, STRIP_PER_ROW)
    return -(-n // cols), cols


def sanity_strip_width(strip, zoom: float = 1.0) -> int:
    """The width in CSS px to show `sanity_strip_png(strip, …, zoom=zoom)` at: its titles then measure
    STRIP_TITLE_PX × zoom on screen."""
    return round(_layout(strip)[1] * STRIP_PANEL_PX * zoom)


def _fit(title: str, chars: int) -> str:
    """`title` in at most `chars` characters: a long layer name keeps its end (layer4.1.bn2 → …4.1.bn2)."""
    return title if len(title) <= chars else "→ …" + title[-(chars - 3):]


def sanity_strip_figure(strip, normalise: Callable[[np.ndarray], np.ndarray], zoom: float = 1.0):
    """The strip as a matplotlib Figure (`sanity_strip_png` draws it); each panel titled with its level and
    its SSIM, the titles STRIP_TITLE_PX × zoom CSS px high when shown `sanity_strip_width(strip, zoom)` wide."""
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in a server thread

    rows, cols = _layout(strip)
    title_px = STRIP_TITLE_PX * zoom * STRIP_DENSITY  # in PNG px = pt at _DPI
    panel_px = STRIP_PANEL_PX * zoom * STRIP_DENSITY
    gap = 0.06 * panel_px  # between maps
    side = panel_px - gap
    band = 2.7 * title_px  # two lines of title above each map
    width, height = cols * panel_px, rows * (band + side + gap)
    fig = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
    chars = int(STRIP_PANEL_PX / (0.6 * STRIP_TITLE_PX))  # a glyph is ~0.55 em wide, and some room
    for i, (title, values, score) in enumerate(_panels(strip)):
        row, col = divmod(i, cols)
        left = col * panel_px + gap / 2
        bottom = height - (row + 1) * (band + side + gap) + gap / 2
        ax = fig.add_axes((left / width, bottom / height, side / width, side / height))
        ax.imshow(np.asarray(normalise(values), dtype=np.float32), cmap="inferno", vmin=0, vmax=1,
                  interpolation="nearest")
        ax.set_axis_off()
        title = _fit(title, chars)
        ax.set_title(title if score is None else f"{title}\nSSIM {score:.2f}", fontsize=title_px,
                     linespacing=1.15, pad=0.2 * title_px)
    return fig


def sanity_strip_png(strip, normalise: Callable[[np.ndarray], np.ndarray], zoom: float = 1.0) -> bytes:
    """Original and randomised heatmaps, at most STRIP_PER_ROW to a row, each through `normalise`, titled with
    its SSIM; made to be shown `sanity_strip_width(strip, zoom)` CSS px wide.

    strip: the sanity check's result (`iba_core.app.evaluation.SanityStrip`: .original, .levels, .heatmaps, .ssim).
    normalise: a heatmap → values in [0, 1]; pass `iba_core.metrics.normalise_heatmap` to show the maps as the
    SSIM sees them (the caller picks it, so drawing needs no metrics).
    """
    buf = io.BytesIO()
    sanity_strip_figure(strip, normalise, zoom).savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()
