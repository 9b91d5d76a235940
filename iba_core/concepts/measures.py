"""A concept's numbers, each one formula on plain arrays (no torch, no files): where it is active in an image
(`location_shares`), the bits that fall there (`bits_per_cell`, `image_bits`), how present it is, where its peak
lies, how much of the crop it covers, and whether it looks like a shortcut (`shortcut_reasons`).

Notation (docs/concepts.md): an image's activations at the concept layer, read as h·w location vectors of C
channels, are factorised as V ≈ U W with U ≥ 0 (h·w × K) and W ≥ 0 (K × C). Concept k's *mass* at a location is
U(loc, k)·‖W_k‖₁ (how much of the reconstructed activation it accounts for there) and its *share* there is
r_k(loc) = U(loc, k)·‖W_k‖₁ / Σ_j U(loc, j)·‖W_j‖₁ (0 where nothing is reconstructed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: An image *uses* a concept when at least this share of its bits lies where the concept is active.
USE_SHARE = 0.10
#: A location belongs to a concept's area in an image when the concept is at least this fraction as strong there as
#: at its peak (its extent at half maximum: a texture concept covers the crop, a mark a few cells).
AREA_LEVEL = 0.5
#: Shortcut candidate: *small* (mean area below this share of the crop) …
SMALL_AREA = 0.10
#: … or *fixed* (its top images' peaks within this rms distance of their mean, in crop widths, over ≥ FIXED_IMAGES) …
FIXED_SPREAD = 0.10
FIXED_IMAGES = 3
#: … or *minority* (used by fewer than this share of its group's images) …
MINORITY = 0.5
#: … yet *large*: at least this share of the group's bits, or this mean drop of p(target) when removed, or kept
#: alone it keeps at least this share of what p(target) gains over "nothing kept" — and among the group's top
#: TOP_RANK concepts by that figure.
#: Removal alone misses a cue that several concepts share (each removal leaves the others); keeping it alone does not.
LARGE_SHARE = 0.25
LARGE_EFFECT = 0.25
LARGE_KEPT = 0.5
TOP_RANK = 3


def concept_mass(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(locations, K): U(loc, k)·‖W_k‖₁ — the activation each concept accounts for at each location."""
    return np.asarray(u, dtype=np.float64) * np.abs(np.asarray(w, dtype=np.float64)).sum(axis=1)[None, :]


def location_shares(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(locations, K): r_k(loc), each concept's share of the reconstruction at each location (rows sum to 1, or
    to 0 where nothing is reconstructed)."""
    mass = concept_mass(u, w)
    total = mass.sum(axis=1, keepdims=True)
    return np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)


def bits_per_cell(bits: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """A bits map on the crop (H, W) summed into the concept layer's (h, w) cells, as (h·w,) in row-major order: each
    pixel's bits go to the cell its centre falls in, so the cells sum to the map's total exactly."""
    bits = np.asarray(bits, dtype=np.float64)
    big_h, big_w = bits.shape
    h, w = grid
    rows = np.minimum((np.arange(big_h) + 0.5) * h // big_h, h - 1).astype(int)
    cols = np.minimum((np.arange(big_w) + 0.5) * w // big_w, w - 1).astype(int)
    cells = np.zeros((h, w), dtype=np.float64)
    np.add.at(cells, (rows[:, None], cols[None, :]), bits)
    return cells.reshape(-1)


def image_bits(cell_bits: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """(K,): the bits of an image that fall where each concept is active, Σ_loc B(loc)·r_k(loc). Their sum is the
    image's bits less those at locations where nothing is reconstructed."""
    return np.asarray(cell_bits, dtype=np.float64) @ shares


def presence(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(K,): each concept's share of the image's whole reconstructed activation (sums to 1, or 0 for none)."""
    mass = concept_mass(u, w).sum(axis=0)
    total = mass.sum()
    return mass / total if total > 0 else np.zeros_like(mass)


def area(mass: np.ndarray) -> np.ndarray:
    """(K,): the share of the image's cells where each concept's mass (`concept_mass`) is at least AREA_LEVEL of its
    peak in the image (0 for a concept absent from it)."""
    mass = np.asarray(mass, dtype=np.float64)
    peak = mass.max(axis=0, keepdims=True)
    return np.where(peak[0] > 0, ((mass >= AREA_LEVEL * peak) & (peak > 0)).mean(axis=0), 0.0)


def peaks(u: np.ndarray, grid: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(peak_x, peak_y), each (K,): the centre of the cell where each concept's coefficient is largest, in 0–1 of
    the crop (x from the left, y from the top); the first such cell on ties."""
    h, w = grid
    best = np.argmax(np.asarray(u), axis=0)
    return (best % w + 0.5) / w, (best // w + 0.5) / h


def peak_spread(xs: np.ndarray, ys: np.ndarray) -> float:
    """The root-mean-square distance of peaks from their mean, in crop widths (NaN for none)."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if not len(xs):
        return float("nan")
    return float(np.sqrt(np.mean((xs - xs.mean()) ** 2 + (ys - ys.mean()) ** 2)))


@dataclass(frozen=True)
class ConceptFigures:
    """A concept's group-level numbers, as `shortcut_reasons` reads them."""

    bits_share: float  # NaN without a bits method
    effect: float
    area: float
    spread: float  # NaN with fewer than FIXED_IMAGES top images
    using: int
    images: int
    bits_rank: int  # 1 = most bits share in its group (0: no bits)
    effect_rank: int  # 1 = largest effect in its group
    kept: float = float("nan")  # (p_only − p_none) / (p_full − p_none): how much of p(target) it keeps alone
    kept_rank: int = 0  # 1 = keeps the most alone


def shortcut_reasons(c: ConceptFigures) -> list[str]:
    """Why a concept is a shortcut candidate (empty: it is not): it is small, fixed in place or used by a minority of
    its group's images, yet carries a large share of the bits or of the effect — removed, p(target) drops; kept
    alone, p(target) stays — and ranks in its group's top TOP_RANK by that figure."""
    large = []
    if c.bits_share == c.bits_share and c.bits_share >= LARGE_SHARE and 0 < c.bits_rank <= TOP_RANK:
        large.append(f"carries {c.bits_share:.0%} of the bits")
    if c.effect >= LARGE_EFFECT and c.effect_rank <= TOP_RANK:
        large.append(f"removing it lowers p(class) by {c.effect:.2f}")
    if c.kept == c.kept and c.kept >= LARGE_KEPT and 0 < c.kept_rank <= TOP_RANK:
        large.append(f"alone it keeps {c.kept:.0%} of p(class)")
    if not large:
        return []
    odd = []
    if c.area < SMALL_AREA:
        odd.append(f"small (it covers {c.area:.0%} of the crop)")
    if c.spread == c.spread and c.spread < FIXED_SPREAD:
        odd.append("at one position in every image")
    if c.images and c.using < MINORITY * c.images:
        odd.append(f"used by {c.using} of {c.images} images only")
    return odd + large if odd else []
