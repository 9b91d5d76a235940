"""Run several attribution methods on one image and draw them side by side.

    >>> maps = compare(loaded, x, target=285, methods=["saliency", "grad_cam", "iba_10"],
    ...                progress=lambda done, total, name: print(done, total, name))
    >>> png = grid_png(maps, cropped_image)

`compare` returns one `AttributionMap` per method (the baselines' common result type), in the order asked.
`grid_png` draws the input and every map in one matplotlib figure: each cell titled with the method's
name and time; signed maps on a diverging blue (negative) / white (0) / red (positive) scale symmetric
around 0; unsigned maps on a sequential scale; maps with a unit (the IBA maps, bits/pixel) get a colour bar.
"""
from __future__ import annotations

import io
import math
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from PIL import Image

from .baselines import get_method, method_keys, run_method
from .baselines.base import AttributionMap, AttributionMethod

#: progress(done, total, label): before each method (done = methods finished so far, label = the method
#: about to run) and once at the end (done == total, label "done").
ProgressFn = Callable[[int, int, str], None]
#: on_error(key, error): called for a failing method, which is then skipped; without it errors propagate.
ErrorFn = Callable[[str, BaseException], None]

SIGNED_CMAP = "bwr"
UNSIGNED_CMAP = "inferno"
#: Signed and unitless maps are scaled to this percentile of |values| so one extreme pixel does not wash out
#: the rest (gradients are heavy-tailed); values beyond it saturate. Maps with a unit use their true range.
ROBUST_PERCENTILE = 99.5


def resolve_methods(
    methods: str | Iterable[str | AttributionMethod] | None, settings: dict[str, dict] | None = None
) -> list[AttributionMethod]:
    """Method instances from "all", "a,b,c", a list of keys and/or instances, or None (= all)."""
    settings = settings or {}
    if methods is None or (isinstance(methods, str) and methods.strip().lower() == "all"):
        items: list = method_keys()
    elif isinstance(methods, str):
        items = [m.strip() for m in methods.split(",") if m.strip()]
    else:
        items = list(methods)
    if not items:
        raise ValueError("No attribution methods selected.")
    resolved = []
    for item in items:
        resolved.append(get_method(item, **settings.get(item, {})) if isinstance(item, str) else item)
    return resolved


def compare(
    loaded,
    x: torch.Tensor,
    target: int | None = None,
    methods: str | Iterable[str | AttributionMethod] | None = "all",
    *,
    settings: dict[str, dict] | None = None,
    progress: ProgressFn | None = None,
    on_error: ErrorFn | None = None,
) -> list[AttributionMap]:
    """Run `methods` on the preprocessed image x (1, 3, H, W) for class `target` (None: top-1).

    settings: per-key overrides, e.g. {"integrated_gradients": {"steps": 16}}.
    """
    chosen = resolve_methods(methods, settings)
    if target is None:
        target = loaded.top_k(x, 1)[0][0] if hasattr(loaded, "top_k") else _top1(loaded.model, x)
    maps: list[AttributionMap] = []
    total = len(chosen)
    for i, method in enumerate(chosen):
        if progress is not None:
            progress(i, total, method.name)
        try:
            maps.append(run_method(method, loaded, x, target))
        except Exception as err:  # noqa: BLE001 - reported to the caller, who decides
            if on_error is None:
                raise
            on_error(method.key, err)
    if progress is not None:
        progress(total, total, "done")
    return maps


def _top1(model: torch.nn.Module, x: torch.Tensor) -> int:
    from .model_state import frozen_eval

    device = next((p.device for p in model.parameters()), x.device)
    with frozen_eval(model), torch.no_grad():
        return int(model(x.to(device)).argmax(dim=1)[0])


# ---- drawing ----------------------------------------------------------------------------------


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


def format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


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
