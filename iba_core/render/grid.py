"""The comparison grid as one PNG: the input and every attribution map, each titled with its method and time.

    >>> png = grid_png(maps, cropped_image, title="chelsea · EfficientNet-Lite0 · Egyptian cat")

Signed maps on a diverging blue (negative) / white (0) / red (positive) scale symmetric around 0; unsigned
maps on a sequential scale; maps with a unit (the bottlenecks' bits/pixel) get a colour bar. Matplotlib
without pyplot: no global state, safe in a server thread.
"""
from __future__ import annotations

import io
import math
from typing import Sequence

import numpy as np
from PIL import Image

from ..methods import AttributionMap
from .text import format_seconds

SIGNED_CMAP = "bwr"
UNSIGNED_CMAP = "inferno"
#: Signed and unitless maps are scaled to this percentile of |values| so one extreme pixel does not wash out
#: the rest (gradients are heavy-tailed); values beyond it saturate. Maps with a unit use their true range.
ROBUST_PERCENTILE = 99.5


def colour_limits(amap: AttributionMap) -> tuple[float, float]:
    """(vmin, vmax) for a map: symmetric around 0 if signed, from 0 (or the minimum) if not."""
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


def limits_text(amap: AttributionMap) -> str:
    """'−a … a' or '0 … b' with the unit: the colour range a grid cell uses."""
    lo, hi = colour_limits(amap)
    unit = f" {amap.unit}" if amap.unit else ""
    return f"{lo:.3g} … {hi:.3g}{unit}"


def grid_png(
    maps: Sequence[AttributionMap],
    cropped_image: Image.Image | np.ndarray | None = None,
    *,
    columns: int | None = None,
    cell_inches: float = 2.4,
    dpi: int = 100,
    title: str | None = None,
) -> bytes:
    """The input image and every map in one PNG (bytes).

    Signed maps: "bwr" (blue < 0 < red), symmetric around 0. Unsigned: "inferno". Maps with a unit
    (IBA: bits/pixel) get a colour bar labelled with it.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in a server thread

    panels = (1 if cropped_image is not None else 0) + len(maps)
    if panels == 0:
        raise ValueError("Nothing to draw: no maps and no image.")
    cols = columns or min(panels, 5)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(cols * cell_inches, rows * (cell_inches + 0.35) + (0.4 if title else 0)), dpi=dpi)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes:
        ax.set_axis_off()
    index = 0
    if cropped_image is not None:
        axes[0].imshow(np.asarray(cropped_image))
        axes[0].set_title("Input", fontsize=9)
        index = 1
    for amap, ax in zip(maps, axes[index:]):
        vmin, vmax = colour_limits(amap)
        cmap = SIGNED_CMAP if amap.signed else UNSIGNED_CMAP
        image = ax.imshow(amap.values, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.set_title(f"{amap.name}\n{format_seconds(amap.seconds)}", fontsize=9)
        if amap.unit:
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
            bar.set_label(amap.unit, fontsize=8)
            bar.ax.tick_params(labelsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def cell_png(amap: AttributionMap) -> bytes:
    """One grid cell on its own: the map titled with its name and time, in the grid's colours."""
    return grid_png([amap], None, columns=1, cell_inches=2.8)
