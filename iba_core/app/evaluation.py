"""The Evaluate page's checks of the maps for one image (paper §4): degradation curves, the sanity check
(cascading randomisation) and the bounding-box ratio, as the `iba_core.metrics` functions compute them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from ..heads import head_of
from ..metrics.bbox import LARGEST_BOX_SHARE
from ..metrics.degradation import DegradationCurves
from ..progress import ProgressFn
from ..methods import AttributionMap, get_method
from ..networks import Network
from .state import Subject

#: What each table column means (the tables' tooltips).
COLUMN_HELP = {
    "Method": "The attribution method whose map is checked.",
    "Area (LeRF − MoRF)": "Area between the scaled LeRF and MoRF curves; higher is better, ≈ 0 for a random map.",
    "p(target) original": "p(target) of the intact image.",
    "p(target) all removed": "p(target) with every tile removed (the curves' floor b).",
    "points": "Measurements per curve.",
    "bbox ratio": "Share of the map's n highest pixels inside the box (n = the box's size); higher is better.",
    "random ≈": "What a random map scores: the box's share of the crop.",
}
#: Pixels per character of the table font (Source Sans at 14 px: at most ~6.4 in Chromium), and per column the
#: room for padding and the sort arrow; generous, so that no header or value is cut off.
TABLE_CHAR_PX, TABLE_PAD_PX = 7.0, 32


def table_columns(rows: list[dict]) -> dict[str, dict]:
    """{column: {"width": pixels, "help": text}} for a table of `rows`: each column wide enough for its
    header and every value, so nothing is clipped (st.dataframe's column_config takes these)."""
    out: dict[str, dict] = {}
    for name in (rows[0] if rows else {}):
        chars = max([len(name)] + [len(_cell_text(r.get(name))) for r in rows])
        out[name] = {"width": int(round(chars * TABLE_CHAR_PX + TABLE_PAD_PX)), "help": COLUMN_HELP.get(name)}
    return out


def _cell_text(value) -> str:
    """A value as the table shows it (floats with up to 4 decimals)."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


# ---- degradation -------------------------------------------------------------------------------


def degradation_for(network, x: torch.Tensor, maps: dict[str, AttributionMap], target: int, tile: int,
                    points: int | None, progress: ProgressFn | None = None) -> dict:
    """{method key: DegradationCurves} for maps already computed."""
    from ..metrics.degradation import degradation_curves

    out = {}
    for i, (key, amap) in enumerate(maps.items()):
        if progress is not None:
            progress(i, len(maps), amap.name)
        out[key] = degradation_curves(network.model, x, amap.values, target, tile=tile, points=points,
                                      head=head_of(network))
    if progress is not None:
        progress(len(maps), len(maps), "done")
    return out


@dataclass
class DegradationRun:
    """The Evaluate page's last degradation curves: per method key, for `tile` × `tile` tiles."""

    subject: Subject
    curves: dict[str, DegradationCurves]
    tile: int


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
    """A method's map before and after each cascade step, and each one's SSIM to the original."""

    method: str
    original: np.ndarray
    levels: list[str]
    heatmaps: list[np.ndarray]
    ssim: list[float]


@dataclass
class SanityRun:
    """The Evaluate page's last sanity check."""

    subject: Subject
    strip: SanityStrip


def sanity_levels(network) -> list[str]:
    """Cascade level names (logits first) without copying the network: its stages for a registered network,
    else its modules that hold parameters (e.g. a model card's network: fc, layer4.1.bn2, …)."""
    from ..metrics.sanity import randomisation_groups

    plain = isinstance(network, Network) and not network.can_split
    return [name for name, _ in randomisation_groups(network.model if plain else network)]


def sanity_strip(network, x: torch.Tensor, target: int, method_key: str, max_levels: int,
                 progress: ProgressFn | None = None, seed: int = 0) -> SanityStrip:
    """Heatmap after each of the first `max_levels` cascade steps and its SSIM to the original map."""
    from ..metrics.sanity import cascading_randomisation, heatmap_ssim, uses_max_over_sign

    method = get_method(method_key)
    sign = uses_max_over_sign(method)
    if progress is not None:
        progress(0, max_levels + 1, "original")
    original = np.asarray(method.attribute(network, x, target).values, dtype=np.float64)
    levels, maps, scores = [], [], []
    for name, randomised in cascading_randomisation(network, seed):
        if len(levels) >= max_levels:
            break
        if progress is not None:
            progress(len(levels) + 1, max_levels + 1, f"randomised down to {name}")
        h = np.asarray(method.attribute(randomised, x, target).values, dtype=np.float64)
        levels.append(name)
        maps.append(h)
        scores.append(heatmap_ssim(original, h, sign))
    if progress is not None:
        progress(max_levels + 1, max_levels + 1, "done")
    return SanityStrip(method.name, original, levels, maps, scores)


# ---- bounding box ------------------------------------------------------------------------------


def bbox_rows(maps: dict[str, AttributionMap], mask: np.ndarray) -> list[dict]:
    """Ratio of the top-n pixels inside the box, per method (n = the box's pixel count)."""
    from ..metrics.bbox import bbox_ratio

    share = float(np.asarray(mask, bool).mean())
    return [{"Method": m.name, "bbox ratio": round(bbox_ratio(m.values, mask), 4),
             "random ≈": round(share, 4)} for m in maps.values()]


@dataclass
class BoxRun:
    """The Evaluate page's last bounding-box scores: one table row per method, the box's share of the crop,
    whether it is larger than the paper allows, and the crop with the box drawn on it."""

    subject: Subject
    rows: list[dict]
    share: float
    large: bool
    picture: Image.Image


def box_run(subject: Subject, maps: dict[str, AttributionMap], mask: np.ndarray,
            boxes: list[tuple[float, float, float, float]], cropped: Image.Image) -> BoxRun:
    """Score the maps against the box mask and draw the boxes (crop coordinates) on the crop."""
    from ..render.overlays import draw_boxes

    return BoxRun(subject, bbox_rows(maps, mask), float(np.asarray(mask, bool).mean()), large_box(mask),
                  draw_boxes(cropped, boxes))


def large_box(mask: np.ndarray) -> bool:
    """Whether the box covers more of the crop than the paper allows (`LARGEST_BOX_SHARE`)."""
    return float(np.asarray(mask, bool).mean()) > LARGEST_BOX_SHARE
