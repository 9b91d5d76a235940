"""Localisation with object boxes: the pointing game, energy-based pointing and the effective heat ratio.

All three take an (H, W) map on the network's crop and `mask`, the union of the object boxes on that crop
(`bbox.boxes_on_crop(parse_voc(xml), preprocess)[0]`).

- Pointing game (Zhang et al., "Excitation Backprop", 2016; the rule of TorchRay's `PointingGame`): the map's
  maximum is a hit when a box pixel lies strictly closer than `tolerance` pixels to it,
  (row − y)² + (col − x)² < tolerance² (15 px by default). Ties of the maximum: the first maximum in row-major
  order, as TorchRay's `torch.argmax` over the flattened map picks it.
- Energy-based pointing (Wang et al., "Score-CAM", CVPRW 2020, §4.3): the share of the map's positive mass
  inside the boxes, Σ_box max(a, 0) / Σ max(a, 0); NaN when the map has no positive mass.
- Effective heat ratio, EHR (Zhang et al., "InputIBA", NeurIPS 2021, as their evaluation code computes it):
  the map scaled to [0, 1] (min → 0, max → 1; InputIBA reads 8-bit heat maps as value/255, here the map is not
  quantised); pixels below `EHR_BASE` are ignored; for each of 11 evenly spaced quantiles q of the remaining
  heat, the pixels at or above that quantile (at most 0.99 · the maximum, so the top pixel is never alone) are
  selected, and the ratio is the heat of the selected pixels inside the boxes over the number of selected
  pixels; EHR is the trapezoid area of the ratios over q ∈ [0, 1] (higher is better; at most 1).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import UserError
from .bbox import LARGEST_BOX_SHARE, skipped_note
from .common import group_records, method_label

POINTING = "pointing"
POINTING_TOLERANCE = 15  # px (TorchRay's pointing game, after Zhang et al. 2016)
EHR_BASE = 0.1  # InputIBA's base threshold: heat below it (on [0, 1]) is not counted
EHR_QUANTILES = 11  # InputIBA: quantiles 0, 0.1, …, 1


def _arrays(attribution, mask) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(attribution, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    if values.ndim != 2 or values.shape != mask.shape:
        raise ValueError(f"Attribution {values.shape} and box mask {mask.shape} differ in shape.")
    if not mask.any():
        raise UserError("The box mask is empty: no box lies on the network's crop.")
    return values, mask


def pointing_point(attribution: np.ndarray) -> tuple[int, int]:
    """(row, col) of the map's maximum: the first in row-major order (NaN never wins)."""
    values = np.nan_to_num(np.asarray(attribution, dtype=np.float64), nan=-np.inf)
    row, col = np.unravel_index(int(np.argmax(values)), values.shape)
    return int(row), int(col)


def pointing_hit(attribution: np.ndarray, mask: np.ndarray, tolerance: int = POINTING_TOLERANCE) -> bool:
    """Whether a box pixel lies closer than `tolerance` px (strictly) to the map's maximum (TorchRay's rule)."""
    values, mask = _arrays(attribution, mask)
    if tolerance < 0:
        raise UserError(f"The pointing game's tolerance must be 0 pixels or more (not {tolerance}).")
    row, col = pointing_point(values)
    rows, cols = np.nonzero(mask)
    return bool(np.any((rows - row) ** 2 + (cols - col) ** 2 < tolerance ** 2))


def energy_pointing(attribution: np.ndarray, mask: np.ndarray) -> float:
    """Share of the map's positive mass inside the boxes (Score-CAM's energy-based pointing game)."""
    values, mask = _arrays(attribution, mask)
    positive = np.clip(np.nan_to_num(values, nan=0.0), 0.0, None)
    total = float(positive.sum())
    if not np.isfinite(total) or total <= 0:
        return float("nan")
    return float(positive[mask].sum() / total)


def effective_heat_ratio(attribution: np.ndarray, mask: np.ndarray, base: float = EHR_BASE,
                         quantiles: int = EHR_QUANTILES) -> float:
    """InputIBA's effective heat ratio (see the module docstring); NaN for a flat map."""
    values, mask = _arrays(attribution, mask)
    values = np.nan_to_num(values, nan=0.0)
    low, high = float(values.min()), float(values.max())
    if not high > low:
        return float("nan")
    heat = (values - low) / (high - low)
    heat = np.where(heat >= base, heat, 0.0)  # the pixels below the base take no part
    counted = heat[heat >= base]
    qs = np.linspace(0.0, 1.0, quantiles)
    ratios = []
    for q in qs:
        threshold = min(float(np.quantile(counted, q)), 0.99 * float(heat.max()))
        selected = heat >= threshold
        ratios.append(float(heat[selected & mask].sum()) / max(int(selected.sum()), 1))
    return float(np.trapezoid(ratios, qs))


def pointing_scores(attribution, mask, tolerance: int = POINTING_TOLERANCE) -> dict[str, float]:
    """{"pointing_hit": 0.0 or 1.0, "energy_pointing": share, "ehr": effective heat ratio} of one map."""
    return {
        "pointing_hit": float(pointing_hit(attribution, mask, tolerance)),
        "energy_pointing": energy_pointing(attribution, mask),
        "ehr": effective_heat_ratio(attribution, mask),
    }


# --------------------------------------------------------------------------------------------
# Records → table.


def format_table(records: Sequence[dict]) -> str:
    """Per method: hit rate, mean energy-based pointing, mean EHR, images (per setting if several)."""
    from .results import markdown_table

    records = [r for r in records if r.get("metric", POINTING) == POINTING]
    skipped = skipped_note(records)
    records = [r for r in records if not r.get("skipped")]
    settings = list(dict.fromkeys(r.get("setting", "") for r in records))
    several = len(settings) > 1
    labels = {s: next(f"{r.get('model', '')} {r.get('tolerance', '')} px".strip()
                      for r in records if r.get("setting", "") == s) for s in settings}
    rows = []
    for (method, setting), rs in group_records(records, "method", "setting").items():
        def mean(field: str) -> float | None:
            vals = [float(r[field]) for r in rs if r.get(field) is not None]
            return float(np.mean(vals)) if vals else None

        rows.append([method_label(records, method), *([labels[setting]] if several else []),
                     mean("pointing_hit"), mean("energy_pointing"), mean("ehr"), mean("box_share"), len(rs)])
    header = ["Method", *(["setting"] if several else []), "pointing hit rate", "energy pointing", "EHR",
              "box share of the crop", "images"]
    tolerances = sorted({r.get("tolerance") for r in records if r.get("tolerance") is not None})
    note = (f"A hit: a box pixel closer than {', '.join(map(str, tolerances)) or POINTING_TOLERANCE} px to the "
            "map's maximum (TorchRay's rule); energy: the share of the map's positive mass inside the boxes; "
            "EHR: InputIBA's effective heat ratio. Higher is better for all three.")
    large = {r["image"] for r in records if (r.get("box_share") or 0) > LARGEST_BOX_SHARE}
    if large:
        note += (f"\n\n{len(large)} image(s) with boxes covering more than {LARGEST_BOX_SHARE:.0%} of the crop: a random "
                 "map hits often there, so their pointing scores say little.")
    note += skipped  # how many, and why (a box file that cannot be read is named)
    return ("### Pointing game and energy-based pointing (higher is better)\n\n"
            + markdown_table(header, rows) + f"\n\n{note}\n")
