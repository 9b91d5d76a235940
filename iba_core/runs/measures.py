"""Measures of one attribution map that point at shortcuts, and the small normalised maps they are compared as.

Every measure reads the map's *mass* m = |A| (H × W): the bits map itself for the bottlenecks (bits are ≥ 0, so
|·| changes nothing), the absolute attribution for every other method, in both cases as shares of the map's
total M = Σ m (scale-free, so methods and images compare). A map with M = 0 has no shares: NaN.

- border_share = Σ_{border} m / M, the border being the outer 10 % of the rows and of the columns on each side
  (b_h = round(0.1·H) rows at the top and at the bottom, b_w = round(0.1·W) columns left and right). A uniform
  map gives the border's area fraction 1 − (H − 2b_h)(W − 2b_w)/(H·W) (0.354 on 224 × 224).
- box_share = Σ_{box} m / M, the box being the union of the object boxes on the network's crop (NaN without one).
- concentration = Σ of the n largest m / M with n = ⌈0.05·H·W⌉: the share of the top 5 % of pixels (1 for a
  map on one pixel, 0.05 for a uniform map).
- thumbnail: m / M summed over a THUMBNAIL × THUMBNAIL grid of equal areas (pixels split across cells by
  overlap), so it sums to 1 whatever the crop: the form maps are averaged, compared and clustered in.
- distance_to_class_mean = 1 − cos(t, t̄_c): one minus the cosine similarity of the map's thumbnail t and the
  mean thumbnail t̄_c of the maps of its class (same method, same explained class) in the run. 0: the map looks
  like its class's average; near 1: it puts its mass where the class's maps put none. Cosine, not L2: it does not
  shrink for classes whose maps are spread thin.
"""
from __future__ import annotations

import math

import numpy as np

#: The border is the outer 10 % of the image on each side (issue #22).
BORDER_FRACTION = 0.1
#: Concentration: the share held by the top 5 % of pixels.
TOP_FRACTION = 0.05
#: Side of the thumbnails (a 28 × 28 grid: 8 × 8 pixels of a 224 crop per cell).
THUMBNAIL = 28


def mass(values: np.ndarray) -> np.ndarray:
    """m = |A| as float64 (H, W): what every measure counts."""
    arr = np.abs(np.asarray(values, dtype=np.float64))
    if arr.ndim != 2:
        raise ValueError(f"An attribution map is (H, W), got shape {arr.shape}.")
    return arr


def _share(part: float, total: float) -> float:
    return float(part / total) if total > 0 and math.isfinite(total) else float("nan")


def border_mask(height: int, width: int, fraction: float = BORDER_FRACTION) -> np.ndarray:
    """(H, W) bool: the outer `fraction` of the rows and of the columns on each side."""
    bh, bw = int(round(fraction * height)), int(round(fraction * width))
    mask = np.zeros((height, width), dtype=bool)
    mask[:bh], mask[height - bh:], mask[:, :bw], mask[:, width - bw:] = True, True, True, True
    return mask


def border_share(values: np.ndarray, fraction: float = BORDER_FRACTION) -> float:
    """Σ_{border} m / Σ m (module docstring); NaN for an empty map."""
    m = mass(values)
    return _share(m[border_mask(*m.shape, fraction)].sum(), m.sum())


#: Why an image of a run with boxes is scored without one (a row's `box_skipped` starts with one of them, then
#: ": " and the box file with its fault; `rows.box_mask`): counted by reason in the run's notes and report.
NO_BOX_FILE, BOX_UNREADABLE, BOX_INVERTED, BOX_OUTSIDE = ("no box file", "box file unreadable",
                                                          "inverted or empty box", "box outside the crop")
BOX_SKIPS = (NO_BOX_FILE, BOX_UNREADABLE, BOX_INVERTED, BOX_OUTSIDE)


def box_skip_reason(value) -> str | None:
    """The reason (one of BOX_SKIPS) a row's `box_skipped` gives; None for a row scored with its box."""
    return value.split(": ", 1)[0] if isinstance(value, str) and value else None


def box_share(values: np.ndarray, mask: np.ndarray | None) -> float:
    """Σ_{box} m / Σ m for a (H, W) bool box mask on the crop; NaN without a mask or for an empty map."""
    if mask is None:
        return float("nan")
    m = mass(values)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != m.shape:
        raise ValueError(f"The box mask is {mask.shape}, the map {m.shape}.")
    return _share(m[mask].sum(), m.sum())


def concentration(values: np.ndarray, fraction: float = TOP_FRACTION) -> float:
    """The share of Σ m held by the ⌈fraction·H·W⌉ largest pixels; NaN for an empty map."""
    m = mass(values).ravel()
    n = max(1, math.ceil(fraction * m.size))
    top = np.partition(m, m.size - n)[m.size - n:]
    return _share(top.sum(), m.sum())


def _area_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in): the overlap of output cell i, [i·n_in/n_out, (i+1)·n_in/n_out), with input pixel j, [j, j+1).
    Each column sums to 1, so a map's total is kept whatever the two sizes."""
    edges = np.arange(n_out + 1) * (n_in / n_out)
    lo, hi = edges[:-1, None], edges[1:, None]
    j = np.arange(n_in)[None, :]
    return np.clip(np.minimum(hi, j + 1) - np.maximum(lo, j), 0.0, None)


def thumbnail(values: np.ndarray, size: int = THUMBNAIL) -> np.ndarray:
    """The map's mass as shares (summing to 1) on a size × size grid of equal areas, float32; zeros for an empty
    map."""
    m = mass(values)
    total = m.sum()
    if not total > 0 or not math.isfinite(total):
        return np.zeros((size, size), dtype=np.float32)
    rows, cols = _area_matrix(m.shape[0], size), _area_matrix(m.shape[1], size)
    return (rows @ (m / total) @ cols.T).astype(np.float32)


def map_measures(values: np.ndarray, box: np.ndarray | None = None) -> dict[str, float]:
    """border_share, box_share (NaN without a box) and concentration of one map."""
    return {"border_share": border_share(values), "box_share": box_share(values, box),
            "concentration": concentration(values)}


def cosine_distance(thumbs: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """1 − cos(t, mean) for each thumbnail t of `thumbs` (n, s, s); NaN where either is all zeros."""
    flat = np.asarray(thumbs, dtype=np.float64).reshape(len(thumbs), -1)
    ref = np.asarray(mean, dtype=np.float64).ravel()
    norms = np.linalg.norm(flat, axis=1) * np.linalg.norm(ref)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 1.0 - (flat @ ref) / norms
    out[~(norms > 0)] = np.nan
    return np.clip(out, 0.0, 2.0)


def distance_to_class_mean(thumbs: np.ndarray, groups: list) -> np.ndarray:
    """distance_to_class_mean of each map: `cosine_distance` of its thumbnail to the mean thumbnail of the maps in
    its group (one method, one explained class: the caller's key, e.g. (method, target)). groups[i] None: no map
    (an error row), NaN; a group with one map: NaN (its own mean says nothing)."""
    out = np.full(len(groups), np.nan)
    members: dict = {}
    for i, group in enumerate(groups):
        if group is not None:
            members.setdefault(group, []).append(i)
    for where in members.values():
        if len(where) > 1:
            out[where] = cosine_distance(thumbs[where], thumbs[where].mean(axis=0))
    return out
