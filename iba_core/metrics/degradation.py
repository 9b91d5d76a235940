"""Degradation benchmark (paper §4.6): the area between the LeRF and MoRF curves.

The image is cut into tile×tile tiles (8×8 and 14×14 in the paper), ranked by their summed
attribution. MoRF removes the most relevant tile first, LeRF the least relevant; a removed tile takes
the image's per-channel mean. After each removal the target probability p(target | x) is measured.

Curves are stored raw, per image, so that they can be scaled at the end over the whole evaluated set:

    s(x) = (p − b) / (t₁ − b),

t₁ the mean top-1 probability on the original images and b the mean target probability on the fully
degraded images. The score is the area between the mean scaled LeRF and MoRF curves, with the
fraction of removed tiles (0…1) on the x-axis: ≈ 0 for a random ranking, at most 1.
For a single image (the app), t₁ and b default to that image's own values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from ..heads import probabilities
from ..tiles import degrade, tile_order, tile_rank_map
from .common import batched_logits, group_records, method_label, resolve_map

METRIC = "degradation"
#: Paper §4.6: the validation set is degraded with 8 × 8 and with 14 × 14 tiles.
DEGRADATION_TILES = (8, 14)


def default_tile(height: int, width: int, tiles: tuple[int, ...] = DEGRADATION_TILES) -> int:
    """The tile size a form offers first for a height × width crop: the largest of `tiles` that divides both sides
    (14 at 224 px, 8 at 256 or 384 px: a Swin V2's or a large ViT's crop), else the largest (its run then says
    that the crop is not a multiple of it)."""
    fitting = [t for t in tiles if height % t == 0 and width % t == 0]
    return max(fitting or tiles)


def removal_steps(n_tiles: int, points: int | None = None) -> np.ndarray:
    """Numbers of removed tiles at which the curves are measured: every step, or `points` evenly spaced.

    The paper measures after every tile (points=None). Fewer points (always including 0 and all
    tiles) make the benchmark cheaper; the area is then a trapezoid estimate on the coarser grid.
    """
    if points is None or points >= n_tiles + 1:
        return np.arange(n_tiles + 1)
    if points < 2:
        raise UserError("A degradation curve needs at least 2 points (nothing and everything removed).")
    return np.unique(np.round(np.linspace(0, n_tiles, points)).astype(int))


@dataclass
class DegradationCurves:
    """Raw MoRF and LeRF curves of one image for one attribution map."""

    tile: int
    n_tiles: int
    removed: np.ndarray  # numbers of removed tiles, from 0 to n_tiles
    morf: np.ndarray  # p(target) after removing the `removed` most relevant tiles
    lerf: np.ndarray  # … the least relevant tiles
    target: int
    top1: float  # top-1 probability on the original image (for t₁)
    p_full: float  # p(target) on the fully degraded image (for b)

    @property
    def fraction(self) -> np.ndarray:
        """x-axis: fraction of tiles removed."""
        return self.removed / self.n_tiles

    def scaled(self, t1: float | None = None, b: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(MoRF, LeRF) as s = (p − b)/(t₁ − b); t₁, b default to this image's top-1 and p_full."""
        t1 = self.top1 if t1 is None else t1
        b = self.p_full if b is None else b
        return scale(self.morf, t1, b), scale(self.lerf, t1, b)

    def area(self, t1: float | None = None, b: float | None = None) -> float:
        """Area between the scaled LeRF and MoRF curves of this image."""
        morf, lerf = self.scaled(t1, b)
        return float(np.trapezoid(lerf - morf, self.fraction))

    def to_record(self) -> dict:
        return {
            "tile": self.tile,
            "n_tiles": self.n_tiles,
            "removed": self.removed.tolist(),
            "morf": np.round(self.morf, 7).tolist(),
            "lerf": np.round(self.lerf, 7).tolist(),
            "target": self.target,
            "top1": self.top1,
            "p_full": self.p_full,
        }

    @classmethod
    def from_record(cls, r: dict) -> "DegradationCurves":
        return cls(
            tile=int(r["tile"]),
            n_tiles=int(r["n_tiles"]),
            removed=np.asarray(r["removed"], dtype=np.int64),
            morf=np.asarray(r["morf"], dtype=np.float64),
            lerf=np.asarray(r["lerf"], dtype=np.float64),
            target=int(r["target"]),
            top1=float(r["top1"]),
            p_full=float(r["p_full"]),
        )


def scale(p: np.ndarray, t1: float, b: float) -> np.ndarray:
    """s = (p − b)/(t₁ − b); if t₁ = b the scale is undefined and NaNs come back."""
    denom = t1 - b
    if abs(denom) < 1e-12:
        return np.full_like(np.asarray(p, dtype=np.float64), np.nan)
    return (np.asarray(p, dtype=np.float64) - b) / denom


def degradation_curves(
    model: nn.Module,
    x: torch.Tensor,
    attribution,
    target: int,
    tile: int = DEGRADATION_TILES[-1],
    *,
    points: int | None = None,
    batch_size: int = 64,
    fill: torch.Tensor | None = None,
    head: str = "softmax",
) -> DegradationCurves:
    """MoRF and LeRF curves of one image.

    model: maps (B, 3, H, W) to logits. x: one preprocessed image (1, 3, H, W).
    attribution: an (H, W) map, or a function (x, target) → map.
    points: measure only at this many evenly spaced numbers of removed tiles (default: every tile).
    The degraded images of all steps are built tensor-wise and sent through `model` in batches.
    head: what the model's outputs mean (`heads.py`; a network's `spec.head`): p(target) and the top-1 follow it.
    """
    if x.dim() == 3:
        x = x[None]
    x = x.detach().cpu()
    values = resolve_map(attribution, x, target)
    size = tuple(x.shape[-2:])
    rows, cols = size[0] // tile, size[1] // tile
    n_tiles = rows * cols
    steps = removal_steps(n_tiles, points)
    morf_rank = tile_rank_map(tile_order(values, tile, True), tile, size)
    lerf_rank = tile_rank_map(tile_order(values, tile, False), tile, size)
    if fill is None:
        fill = x.mean(dim=(2, 3), keepdim=True)[0]
    # Nothing removed and everything removed give the same image for both orders: run them once.
    inner = steps[1:-1]
    jobs = [(morf_rank, 0), (morf_rank, n_tiles)]
    jobs += [(morf_rank, int(k)) for k in inner] + [(lerf_rank, int(k)) for k in inner]

    def batches() -> Iterator[torch.Tensor]:
        for start in range(0, len(jobs), batch_size):
            chunk = jobs[start:start + batch_size]
            ranks = torch.stack([r for r, _ in chunk])
            yield degrade(x, ranks, [k for _, k in chunk], fill)

    logits = batched_logits(model, batches(), batch_size)
    probs = probabilities(logits.double(), head)
    p = probs[:, target].numpy()
    m = len(inner)
    p_orig, p_full = float(p[0]), float(p[1])
    morf = np.concatenate([[p_orig], p[2:2 + m], [p_full]])
    lerf = np.concatenate([[p_orig], p[2 + m:2 + 2 * m], [p_full]])
    return DegradationCurves(
        tile=tile, n_tiles=n_tiles, removed=steps, morf=morf, lerf=lerf, target=int(target),
        top1=float(probs[0].max()), p_full=p_full,
    )


@dataclass
class DegradationSummary:
    """Mean scaled curves and their area over a set of images (one method, one setting)."""

    area: float
    morf: np.ndarray
    lerf: np.ndarray
    fraction: np.ndarray
    t1: float
    b: float
    n: int


def set_baselines(curves: Sequence[DegradationCurves]) -> tuple[float, float]:
    """(t₁, b) over a set: mean top-1 probability on the originals, mean p(target) fully degraded."""
    return float(np.mean([c.top1 for c in curves])), float(np.mean([c.p_full for c in curves]))


def degradation_score(
    curves: Sequence[DegradationCurves], t1: float | None = None, b: float | None = None
) -> DegradationSummary:
    """Scale the curves of a set with t₁ and b (default: from `curves`) and integrate LeRF − MoRF."""
    if not curves:
        raise ValueError("No degradation curves to score.")
    grid = curves[0].removed
    if any(c.n_tiles != curves[0].n_tiles or not np.array_equal(c.removed, grid) for c in curves):
        raise ValueError("All curves of a set must share the tile size and measurement points.")
    set_t1, set_b = set_baselines(curves)
    t1 = set_t1 if t1 is None else t1
    b = set_b if b is None else b
    morf = np.mean([scale(c.morf, t1, b) for c in curves], axis=0)
    lerf = np.mean([scale(c.lerf, t1, b) for c in curves], axis=0)
    fraction = curves[0].fraction
    area = float(np.trapezoid(lerf - morf, fraction))
    return DegradationSummary(area, morf, lerf, fraction, t1, b, len(curves))


# --------------------------------------------------------------------------------------------
# Records → table.


def setting_label(r: dict) -> str:
    label = f"{r.get('model', '')} deg. {r['tile']}x{r['tile']}".strip()
    if r.get("points"):
        label += f" ({r['points']} pts)"
    return label


def summarise(records: Sequence[dict]) -> dict[tuple[str, str], DegradationSummary]:
    """{(method, setting): summary}. t₁ and b are taken per setting over all its images (all methods
    see the same originals and the same fully degraded images), so methods stay comparable."""
    records = [r for r in records if r.get("metric", METRIC) == METRIC]
    out: dict[tuple[str, str], DegradationSummary] = {}
    for (setting,), rs in group_records(records, "setting").items():
        per_image = {}
        for r in rs:
            per_image.setdefault(r["image"], DegradationCurves.from_record(r))
        t1, b = set_baselines(list(per_image.values()))
        for (method,), ms in group_records(rs, "method").items():
            out[(method, setting)] = degradation_score([DegradationCurves.from_record(r) for r in ms], t1, b)
    return out


def format_table(records: Sequence[dict]) -> str:
    from .results import markdown_table

    records = [r for r in records if r.get("metric", METRIC) == METRIC]
    summary = summarise(records)
    settings = list(dict.fromkeys(r["setting"] for r in records))
    labels = {s: setting_label(next(r for r in records if r["setting"] == s)) for s in settings}
    methods = list(dict.fromkeys(r["method"] for r in records))
    rows = []
    for m in methods:
        row = [method_label(records, m)]
        for s in settings:
            row.append(summary[(m, s)].area if (m, s) in summary else None)
        row.append(max((summary[(m, s)].n for s in settings if (m, s) in summary), default=0))
        rows.append(row)
    header = ["Method", *(labels[s] for s in settings), "images"]
    notes = "; ".join(
        f"{labels[s]}: t₁ = {next(v for k, v in summary.items() if k[1] == s).t1:.3f}, "
        f"b = {next(v for k, v in summary.items() if k[1] == s).b:.3f}"
        for s in settings
    )
    return (
        "### Degradation: area between LeRF and MoRF (scaled, higher is better)\n\n"
        + markdown_table(header, rows)
        + f"\n\n{notes}\n"
    )
