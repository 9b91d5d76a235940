"""The sanity check's strip as one PNG: the original map and the map after each randomisation step."""
from __future__ import annotations

import io
from typing import Callable

import numpy as np


def sanity_strip_png(strip, normalise: Callable[[np.ndarray], np.ndarray], dpi: int = 90) -> bytes:
    """Original and randomised heatmaps in one row, each through `normalise`, titled with its SSIM.

    strip: the sanity check's result (`iba_core.app.evaluation.SanityStrip`: .original, .levels, .heatmaps, .ssim).
    normalise: a heatmap → values in [0, 1]; pass `iba_core.metrics.normalise_heatmap` to show the maps as the
    SSIM sees them (the caller picks it, so drawing needs no metrics).
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in a server thread

    panels = [("original", strip.original, None)]
    panels += [(f"→ {name}", h, s) for name, h, s in zip(strip.levels, strip.heatmaps, strip.ssim)]
    cols = len(panels)
    fig = Figure(figsize=(cols * 1.8, 2.1), dpi=dpi)
    axes = fig.subplots(1, cols, squeeze=False).ravel()
    for ax, (title, values, score) in zip(axes, panels):
        ax.imshow(np.asarray(normalise(values), dtype=np.float32), cmap="inferno", vmin=0, vmax=1,
                  interpolation="nearest")
        ax.set_axis_off()
        ax.set_title(title if score is None else f"{title}\nSSIM {score:.2f}", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
