"""Sensitivity-n (Ancona et al. 2018; paper §4.4).

For n log-spaced between 1 tile and 80 % of the tiles, `sets` random sets T of n tiles are set to
zero (in the network's normalised input space, as in the original). Per image and n, the score is the
Pearson correlation over the sets between the attribution removed, Σ_{i∈T} R_i, and the drop of the
target logit, S_c(x) − S_c(x_[T=0]); it is then averaged over images. The paper uses 8×8 tiles
(tile=8, default) and, for ResNet-50, also single pixels (tile=1).

The random sets and the logit drops depend only on the image, not on the attribution: `logit_drops`
computes them once per image, and `correlations` scores any number of maps against them.

Occlusion is scored with zeros as its occluder here (the evaluation runner sets it), as the paper's code
did: it then occludes exactly as this metric masks, and Occlusion-8×8 reaches 1.000 at n = 1 with 8×8 tiles
(0.902 with the mean-colour occluder; docs/science/fidelity.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from ..heads import class_logits
from ..tiles import tile_mask, tile_sums
from .common import batched_logits, group_records, method_label, resolve_map

METRIC = "sensitivity-n"
#: Paper §4.4: the metric is run with 8 × 8 tiles (single pixels were not discriminative).
SENSITIVITY_TILES = (8,)


def n_values(n_tiles: int, count: int = 16, max_fraction: float = 0.8) -> np.ndarray:
    """Distinct numbers of tiles, log-spaced from 1 to max_fraction · n_tiles."""
    top = max(1, int(round(max_fraction * n_tiles)))
    return np.unique(np.round(np.logspace(0, np.log10(top), count)).astype(int))


@dataclass
class LogitDrops:
    """The random tile sets (regenerated from the seed) and the logit drop of each, for one image."""

    tile: int
    n_tiles: int
    ns: np.ndarray  # numbers of tiles removed
    sets: int
    seed: int
    drops: np.ndarray  # (len(ns), sets): S_c(x) − S_c(x with the set zeroed)
    target: int

    def tile_sets(self, i: int) -> np.ndarray:
        """(sets, ns[i]) flat tile indices of the i-th n (the same every call)."""
        return random_tile_sets(self.n_tiles, int(self.ns[i]), self.sets, np.random.default_rng([self.seed, i]))


def random_tile_sets(n_tiles: int, n: int, sets: int, rng: np.random.Generator) -> np.ndarray:
    """`sets` independent random choices of n distinct tiles: (sets, n)."""
    return rng.permuted(np.tile(np.arange(n_tiles), (sets, 1)), axis=1)[:, :n]


def logit_drops(
    model: nn.Module,
    x: torch.Tensor,
    target: int,
    tile: int = 8,
    *,
    ns: Sequence[int] | None = None,
    n_count: int = 16,
    sets: int = 100,
    seed: int = 0,
    batch_size: int = 64,
    head: str = "softmax",
) -> LogitDrops:
    """Zero `sets` random tile sets for every n and record the target-logit drops (batched).

    head: the model's (`heads.py`); a binary head's classes have the log-odds [−z, z] as logits."""
    if x.dim() == 3:
        x = x[None]
    x = x.detach().cpu()
    size = tuple(x.shape[-2:])
    if size[0] % tile or size[1] % tile:
        raise UserError(f"Image size {size} is not a multiple of the tile size {tile}.")
    n_tiles = (size[0] // tile) * (size[1] // tile)
    ns_arr = n_values(n_tiles, n_count) if ns is None else np.asarray(sorted(set(int(n) for n in ns)))
    if ns_arr.min() < 1 or ns_arr.max() > n_tiles:
        raise UserError(f"n must lie between 1 and the number of tiles ({n_tiles}).")
    drops = LogitDrops(tile, n_tiles, ns_arr, sets, seed, np.zeros((len(ns_arr), sets)), int(target))

    def batches() -> Iterator[torch.Tensor]:
        yield x
        for i in range(len(ns_arr)):
            chosen = drops.tile_sets(i)
            for start in range(0, sets, batch_size):
                mask = tile_mask(chosen[start:start + batch_size], tile, size)[:, None]
                yield x.masked_fill(mask, 0.0)

    logits = class_logits(batched_logits(model, batches(), batch_size), head)[:, target].double().numpy()
    drops.drops = (logits[0] - logits[1:]).reshape(len(ns_arr), sets)
    return drops


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation; NaN when either side is constant (undefined)."""
    a = np.asarray(a, dtype=np.float64) - np.mean(a)
    b = np.asarray(b, dtype=np.float64) - np.mean(b)
    denom = np.sqrt((a * a).sum() * (b * b).sum())
    if denom <= 1e-300 * max(a.size, 1):
        return float("nan")
    return float(np.clip((a * b).sum() / denom, -1.0, 1.0))


def correlations(drops: LogitDrops, attribution, x: torch.Tensor | None = None) -> np.ndarray:
    """Sensitivity-n of one map for one image: the correlation for each n in drops.ns."""
    if callable(attribution):
        if x is None:
            raise ValueError("An attribution function needs the image x.")
        values = resolve_map(attribution, x, drops.target)
    else:
        values = np.asarray(attribution, dtype=np.float64)
    per_tile = tile_sums(values, drops.tile).ravel()
    out = np.empty(len(drops.ns))
    for i in range(len(drops.ns)):
        removed = per_tile[drops.tile_sets(i)].sum(axis=1)
        out[i] = pearson(removed, drops.drops[i])
    return out


# --------------------------------------------------------------------------------------------
# Records → table.


def summarise(records: Sequence[dict]) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, int]]:
    """{(method, setting): (pixels per n, mean correlation per n over images, images)}.

    An undefined correlation (a map that is constant on the tiles) is left out of the mean."""
    out = {}
    for (method, setting), rs in group_records(records, "method", "setting").items():
        corr = np.array([[np.nan if c is None else c for c in r["corr"]] for r in rs], dtype=np.float64)
        defined = np.isfinite(corr)
        counts = defined.sum(axis=0)
        mean = np.where(counts > 0, np.where(defined, corr, 0.0).sum(axis=0) / np.maximum(counts, 1), np.nan)
        out[(method, setting)] = (np.asarray(rs[0]["pixels"]), mean, len(rs))
    return out


def format_table(records: Sequence[dict]) -> str:
    from .results import markdown_table

    records = [r for r in records if r.get("metric", METRIC) == METRIC]
    summary = summarise(records)
    parts = ["### Sensitivity-n: mean Pearson correlation per number of removed pixels (higher is better)"]
    for setting in dict.fromkeys(r["setting"] for r in records):
        first = next(r for r in records if r["setting"] == setting)
        methods = list(dict.fromkeys(r["method"] for r in records if r["setting"] == setting))
        pixels = summary[(methods[0], setting)][0]
        rows = [
            [method_label(records, m), *summary[(m, setting)][1].tolist(), summary[(m, setting)][2]] for m in methods
        ]
        parts.append(
            f"{first.get('model', '')}, {first['tile']}×{first['tile']} tiles, {first.get('sets', '?')} sets per n"
        )
        parts.append(markdown_table(["Method \\ n pixels", *(str(int(p)) for p in pixels), "images"], rows, digits=2))
    return "\n\n".join(parts) + "\n"
