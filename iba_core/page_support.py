"""UI-independent helpers for the Compare and Evaluate pages (no Streamlit here, so it can be tested).

- `MapCache`: attribution maps kept per (image, network, weights, target, method, settings), so asking
  for one more method only computes that one;
- readout checkpoints: the shipped one and those found in the cache directory, with a label that says
  what they were trained on;
- degradation, sanity and bounding-box helpers that run the `iba_core.metrics` functions for a page;
- figures (plotly) and images (PIL / matplotlib PNG) the pages draw.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
import torch
from PIL import Image, ImageDraw

from .baselines import get_method, method_keys, run_method
from .baselines.base import AttributionMap
from .compare import colour_limits, format_seconds, grid_png

#: Quick first look on a CPU: a few network passes each, plus one Per-Sample Bottleneck.
DEFAULT_COMPARE_METHODS = ("saliency", "grad_cam", "occlusion_14", "iba_10")
#: Evaluation runs every metric per method: keep the default cheap.
DEFAULT_EVALUATE_METHODS = ("saliency", "grad_cam")
#: Sanity check default method: one backward pass per cascade level.
DEFAULT_SANITY_METHOD = "saliency"
DEGRADATION_TILES = (8, 14)
DEFAULT_POINTS = 17
DEFAULT_BOX = (50, 40, 170, 170)  # ~31 % of the crop: under the paper's 33 % limit
CROP = 224

#: progress(done, total, label)
ProgressFn = Callable[[int, int, str], None]


# ---- attribution maps kept across reruns --------------------------------------------------------


def settings_token(settings: dict | None) -> tuple:
    """A hashable, order-independent form of a method's settings (objects by their repr)."""
    if not settings:
        return ()
    return tuple(sorted((k, v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
                        for k, v in settings.items()))


def map_key(image_digest: str, loaded, target: int, method: str, settings: dict | None = None) -> tuple:
    """Cache key of one map: image content, network and its weights, class, method and its settings."""
    return (image_digest, loaded.key, loaded.weights_id, int(target), method, settings_token(settings))


@dataclass
class CachedMap:
    """A computed map and its single-cell PNG (drawn once)."""

    amap: AttributionMap
    png: bytes


def cell_png(amap: AttributionMap) -> bytes:
    """One grid cell: the map titled with its name and time, in the grid's colours (`compare.grid_png`)."""
    return grid_png([amap], None, columns=1, cell_inches=2.8)


@dataclass
class MapCache:
    """Maps keyed by `map_key`; bounded, oldest first out. `computed` counts maps actually computed."""

    max_entries: int = 64
    entries: dict = field(default_factory=dict)
    computed: int = 0

    def get(self, key: tuple) -> CachedMap | None:
        return self.entries.get(key)

    def put(self, key: tuple, amap: AttributionMap) -> CachedMap:
        entry = CachedMap(amap, cell_png(amap))
        self.entries[key] = entry
        while len(self.entries) > self.max_entries:
            self.entries.pop(next(iter(self.entries)))
        return entry

    def maps(
        self,
        loaded,
        x: torch.Tensor,
        image_digest: str,
        target: int,
        methods: Sequence[str],
        *,
        settings: dict[str, dict] | None = None,
        progress: ProgressFn | None = None,
        on_map: Callable[[str, CachedMap, bool], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> dict[str, CachedMap]:
        """{method key: cached map} for `methods`, computing only those not cached yet.

        progress(done, total, label) before each method and at the end; on_map(key, entry, was_cached)
        as each map becomes available; on_error(key, err) for a failing method (skipped), else it raises.
        """
        settings = settings or {}
        out: dict[str, CachedMap] = {}
        total = len(methods)
        for i, key in enumerate(methods):
            ck = map_key(image_digest, loaded, target, key, settings.get(key))
            entry = self.get(ck)
            cached = entry is not None
            if entry is None:
                if progress is not None:
                    progress(i, total, get_method(key).name)
                try:
                    amap = run_method(get_method(key, **settings.get(key, {})), loaded, x, target)
                except Exception as err:  # noqa: BLE001 - reported to the caller
                    if on_error is None:
                        raise
                    on_error(key, err)
                    continue
                self.computed += 1
                entry = self.put(ck, amap)
            out[key] = entry
            if on_map is not None:
                on_map(key, entry, cached)
        if progress is not None:
            progress(total, total, "done")
        return out


def method_names() -> dict[str, str]:
    """key → display name for every registered method."""
    return {key: get_method(key).name for key in method_keys()}


# ---- readout checkpoints -----------------------------------------------------------------------


@dataclass
class ReadoutCheckpoint:
    path: Path
    shipped: bool
    model: str
    trained_on: str  # what the readout was trained on, from the checkpoint's training metadata
    complete: bool | None  # training finished (None: unknown)
    error: str = ""  # why it cannot be used, if it cannot

    @property
    def label(self) -> str:
        if self.shipped:
            return f"Readout (trained on {self.trained_on} — rough, offline photos)"
        return f"Readout ({self.path.name}, trained on {self.trained_on})"


def readout_dirs() -> list[Path]:
    """Folders searched for trained readouts: <cache>/readout and ./readout_runs (the trainer's default)."""
    from .stats import cache_dir

    return [cache_dir() / "readout", Path("readout_runs")]


def describe_readout(path: Path, shipped: bool) -> ReadoutCheckpoint:
    from .readout import ReadoutCheckpointError, load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except ReadoutCheckpointError as err:
        return ReadoutCheckpoint(path, shipped, "?", "unknown data", None, str(err))
    training = ckpt.get("training") or {}
    data = str(training.get("data") or "").strip()
    if not data:
        cfg = training.get("config") or {}
        data = f"images in {cfg['images']}" if cfg.get("images") else "the offline sample photos"
    epoch = training.get("epoch")
    if epoch is not None:
        data += f"; {epoch} epoch(s)"
    complete = training.get("complete")
    return ReadoutCheckpoint(path, shipped, str(ckpt["config"].get("model", "?")), data,
                             None if complete is None else bool(complete))


def readout_checkpoints(model_key: str, dirs: Iterable[Path] | None = None) -> list[ReadoutCheckpoint]:
    """The shipped readout for `model_key` (first, if any), then *.pt files found below `dirs` made for it."""
    from .readout import default_checkpoint

    found: list[ReadoutCheckpoint] = []
    shipped = default_checkpoint(model_key)
    if shipped is not None:
        found.append(describe_readout(shipped, True))
    seen = {p.path.resolve() for p in found}
    for d in readout_dirs() if dirs is None else dirs:
        d = Path(d).expanduser()
        if not d.is_dir():
            continue
        for path in sorted(d.rglob("*.pt")):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            info = describe_readout(path, False)
            if info.model == model_key:
                found.append(info)
    return found


def readout_map(loaded, x: torch.Tensor, checkpoint: ReadoutCheckpoint, target: int) -> AttributionMap:
    """The Readout Bottleneck's map (bits/pixel) from `checkpoint`, named by its label."""
    from .readout import ReadoutMethod

    method = ReadoutMethod(checkpoint.path)
    method.name = checkpoint.label
    return run_method(method, loaded, x, target)


# ---- degradation -------------------------------------------------------------------------------


def degradation_for(loaded, x: torch.Tensor, maps: dict[str, AttributionMap], target: int, tile: int,
                    points: int | None, progress: ProgressFn | None = None) -> dict:
    """{method key: DegradationCurves} for maps already computed."""
    from .metrics.degradation import degradation_curves

    out = {}
    for i, (key, amap) in enumerate(maps.items()):
        if progress is not None:
            progress(i, len(maps), amap.name)
        out[key] = degradation_curves(loaded.model, x, amap.values, target, tile=tile, points=points)
    if progress is not None:
        progress(len(maps), len(maps), "done")
    return out


def degradation_figure(curves: dict, names: dict[str, str], *, height: int = 380) -> go.Figure:
    """Scaled MoRF (solid) and LeRF (dashed) per method, one colour per method."""
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    fig = go.Figure()
    for i, (key, c) in enumerate(curves.items()):
        morf, lerf = c.scaled()
        colour = palette[i % len(palette)]
        name = names.get(key, key)
        fig.add_scatter(x=c.fraction, y=morf, mode="lines", name=f"{name} · MoRF", line=dict(color=colour),
                        legendgroup=key)
        fig.add_scatter(x=c.fraction, y=lerf, mode="lines", name=f"{name} · LeRF",
                        line=dict(color=colour, dash="dash"), legendgroup=key)
    fig.update_layout(height=height, template="plotly_white", margin=dict(l=50, r=10, t=30, b=40),
                      xaxis_title="fraction of tiles removed", yaxis_title="scaled p(target)",
                      legend=dict(font=dict(size=11)))
    return fig


def degradation_rows(curves: dict, names: dict[str, str]) -> list[dict]:
    """One table row per method: area between LeRF and MoRF, and the raw end points."""
    return [
        {"Method": names.get(k, k), "Area (LeRF − MoRF)": round(c.area(), 4),
         "p(target) original": round(float(c.morf[0]), 4), "p(target) all removed": round(c.p_full, 4),
         "points": len(c.removed)}
        for k, c in curves.items()
    ]


# ---- sanity check ------------------------------------------------------------------------------


@dataclass
class SanityStrip:
    method: str
    original: np.ndarray
    levels: list[str]
    heatmaps: list[np.ndarray]
    ssim: list[float]


def sanity_levels(loaded) -> list[str]:
    """Cascade level names (logits first) for a registered network, without copying it."""
    from .metrics.sanity import randomisation_groups

    return [name for name, _ in randomisation_groups(loaded)]


def sanity_strip(loaded, x: torch.Tensor, target: int, method_key: str, max_levels: int,
                 progress: ProgressFn | None = None, seed: int = 0) -> SanityStrip:
    """Heatmap after each of the first `max_levels` cascade steps and its SSIM to the original map."""
    from .metrics.sanity import cascading_randomisation, heatmap_ssim, uses_max_over_sign

    method = get_method(method_key)
    sign = uses_max_over_sign(method)
    if progress is not None:
        progress(0, max_levels + 1, "original")
    original = np.asarray(method.attribute(loaded, x, target), dtype=np.float64)
    levels, maps, scores = [], [], []
    for name, randomised in cascading_randomisation(loaded, seed):
        if len(levels) >= max_levels:
            break
        if progress is not None:
            progress(len(levels) + 1, max_levels + 1, f"randomised down to {name}")
        h = np.asarray(method.attribute(randomised, x, target), dtype=np.float64)
        levels.append(name)
        maps.append(h)
        scores.append(heatmap_ssim(original, h, sign))
    if progress is not None:
        progress(max_levels + 1, max_levels + 1, "done")
    return SanityStrip(method.name, original, levels, maps, scores)


def sanity_strip_png(strip: SanityStrip, signed: bool, dpi: int = 90) -> bytes:
    """Original and randomised heatmaps in one row (normalised like the SSIM sees them)."""
    from .metrics.sanity import normalise_heatmap

    maps = [AttributionMap("original", "original", normalise_heatmap(strip.original).astype(np.float32),
                           False, "", 0.0)]
    for name, h, s in zip(strip.levels, strip.heatmaps, strip.ssim):
        maps.append(AttributionMap(name, f"→ {name}", normalise_heatmap(h).astype(np.float32), False, "", 0.0))
    from matplotlib.figure import Figure
    import io

    cols = len(maps)
    fig = Figure(figsize=(cols * 1.8, 2.1), dpi=dpi)
    axes = fig.subplots(1, cols, squeeze=False).ravel()
    for ax, m, s in zip(axes, maps, [None, *strip.ssim]):
        ax.imshow(m.values, cmap="inferno", vmin=0, vmax=1, interpolation="nearest")
        ax.set_axis_off()
        ax.set_title(m.name if s is None else f"{m.name}\nSSIM {s:.2f}", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def ssim_figure(strip: SanityStrip, *, height: int = 300) -> go.Figure:
    fig = go.Figure(go.Scatter(x=["original", *strip.levels], y=[1.0, *strip.ssim], mode="lines+markers",
                               name=strip.method))
    fig.update_layout(height=height, template="plotly_white", margin=dict(l=50, r=10, t=30, b=60),
                      yaxis=dict(title="SSIM to the original map", range=[-0.1, 1.05]),
                      xaxis_title="randomised from the logits down to …")
    return fig


# ---- bounding box ------------------------------------------------------------------------------


def parse_box(text: str, size: int = CROP) -> tuple[int, int, int, int]:
    """'x0, y0, x1, y1' (pixels of the crop) → ints; ValueError with a readable message otherwise."""
    parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if len(parts) != 4:
        raise ValueError(f"Enter the box as four numbers x0, y0, x1, y1 (got {text!r}).")
    try:
        x0, y0, x1, y1 = (int(round(float(p))) for p in parts)
    except ValueError:
        raise ValueError(f"The box must be four numbers x0, y0, x1, y1 (got {text!r}).") from None
    x0, x1 = sorted((max(0, min(size, x0)), max(0, min(size, x1))))
    y0, y1 = sorted((max(0, min(size, y0)), max(0, min(size, y1))))
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise ValueError("The box is empty inside the 224 × 224 crop; give x1 > x0 and y1 > y0.")
    return x0, y0, x1, y1


def crop_box_mask(box: tuple[float, float, float, float], size: int = CROP) -> np.ndarray:
    """Mask of the crop pixels whose centres lie inside a box given in crop coordinates."""
    from .metrics.bbox import Annotation, Box, box_mask

    return box_mask(Annotation(size, size, [Box("box", *box)]), resize=size, crop=size)


def voc_boxes(xml: str | bytes, size: int = CROP) -> tuple[np.ndarray, list[tuple[float, float, float, float]]]:
    """(union mask in the crop, boxes in crop coordinates) from a Pascal-VOC annotation of the original image."""
    from .metrics.bbox import box_mask, box_to_crop, parse_voc

    text = xml.decode("utf-8", errors="replace") if isinstance(xml, bytes) else xml
    if not text.lstrip().startswith("<"):
        raise ValueError("The annotation is not XML.")
    ann = parse_voc(text)
    if not ann.boxes:
        raise ValueError("The annotation holds no <object> with a <bndbox>.")
    boxes = [box_to_crop(b, ann.width, ann.height, crop=size) for b in ann.boxes]
    return box_mask(ann, crop=size), boxes


def draw_boxes(image: Image.Image, boxes: Sequence[tuple[float, float, float, float]],
               colour: tuple[int, int, int] = (0, 229, 255), width: int = 2) -> Image.Image:
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out)
    for x0, y0, x1, y1 in boxes:
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=colour, width=width)
    return out


def bbox_rows(maps: dict[str, AttributionMap], mask: np.ndarray) -> list[dict]:
    """Ratio of the top-n pixels inside the box, per method (n = the box's pixel count)."""
    from .metrics.bbox import bbox_ratio

    share = float(np.asarray(mask, bool).mean())
    return [{"Method": m.name, "bbox ratio": round(bbox_ratio(m.values, mask), 4),
             "random ≈": round(share, 4)} for m in maps.values()]


def limits_text(amap: AttributionMap) -> str:
    """'−a … a' or '0 … b' with the unit: the colour range a cell uses."""
    lo, hi = colour_limits(amap)
    unit = f" {amap.unit}" if amap.unit else ""
    return f"{lo:.3g} … {hi:.3g}{unit}"


__all__ = [
    "DEFAULT_BOX", "DEFAULT_COMPARE_METHODS", "DEFAULT_EVALUATE_METHODS", "DEFAULT_POINTS",
    "DEFAULT_SANITY_METHOD", "DEGRADATION_TILES", "CachedMap", "MapCache", "ReadoutCheckpoint",
    "SanityStrip", "bbox_rows", "cell_png", "crop_box_mask", "degradation_figure", "degradation_for",
    "degradation_rows", "draw_boxes", "format_seconds", "limits_text", "map_key", "method_names", "parse_box",
    "readout_checkpoints", "readout_map", "sanity_levels", "sanity_strip", "sanity_strip_png", "ssim_figure",
    "voc_boxes",
]
