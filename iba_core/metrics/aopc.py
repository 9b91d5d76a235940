"""MoRF AOPC, the area over the MoRF perturbation curve (Samek et al., "Evaluating the visualization of what a deep
neural network has learned", IEEE TNNLS 2017), added through the metric registry (docs/adding-a-metric.md).

The image is cut into regions of `tile` × `tile` pixels, ranked by the map's sum over each (the most relevant
first, MoRF; ties in the regions' reading order). Step k removes the k most relevant regions, for k = 0 … L, and

    AOPC = 1/(L + 1) · Σ_{k=0}^{L} [ f(x) − f(x_MoRF^(k)) ],

f being p(target) under the network's head. The sum starts at k = 0, whose term is 0, as in the paper. Higher is
better: removing what the map calls relevant first makes p(target) fall fast. A random map scores near 0 on
average.

Choices, said where they differ from the paper: the perturbation and the regions are today's degradation
machinery (`tiles.tile_order`, `tiles.degrade`): a removed region takes the image's per-channel mean, the
degradation benchmark's constant, where Samek et al. drew uniform random values (a constant needs no seed, so
the number is the same on every rerun). The paper removed L = 100 regions of 9 × 9 pixels (16 % of a 224 crop);
here `AOPC_TILE` = 14 (a crop of 224 has 16 × 16 such regions) and `AOPC_STEPS` = 40 (16 % of them). A crop whose
sides 14 does not divide uses the largest region size below 14 that divides both. f is the probability, as the
other curves of this package measure it, not the paper's pre-softmax score.

The measurement imports torch when it runs, not at import: the registry (and reading a run's table) stays light.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np

from .per_map import PerMapMetric
from .registry import Column, MapBatch, Measurement

AOPC = "aopc"
#: Side of a removed region in pixels (the degradation benchmark's larger tile).
AOPC_TILE = 14
#: L: regions removed, most relevant first (16 % of a 224 crop, the share the paper's 100 regions of 9 × 9 took).
AOPC_STEPS = 40


def region_size(height: int, width: int, wanted: int = AOPC_TILE) -> int:
    """The largest region side ≤ `wanted` that divides both `height` and `width` (1 at worst)."""
    for side in range(min(wanted, height, width), 0, -1):
        if height % side == 0 and width % side == 0:
            return side
    return 1


@dataclass
class AopcCurve:
    """One map's MoRF curve: p(target) after removing the `removed` most relevant regions of `tile` px (0 … L),
    and its AOPC, the mean of p(target) of the intact image minus each of them."""

    tile: int
    removed: np.ndarray
    p: np.ndarray

    @property
    def drops(self) -> np.ndarray:
        """f(x) − f(x_MoRF^(k)) for each k."""
        return self.p[0] - self.p

    @property
    def aopc(self) -> float:
        return float(np.mean(self.drops))


def aopc_curve(model, x, values: np.ndarray, target: int, *, tile: int = AOPC_TILE, steps: int = AOPC_STEPS,
               head: str = "softmax", batch_size: int = 64) -> AopcCurve:
    """The MoRF curve of one map (module docstring) and its AOPC. model: maps (B, C, H, W) to logits; x: one
    preprocessed image (1, C, H, W); values: the (H, W) map; steps: L, at most the number of regions."""
    from ..heads import probabilities
    from ..tiles import degrade, tile_order, tile_rank_map
    from .common import batched_logits

    if x.dim() == 3:
        x = x[None]
    x = x.detach()
    values = np.asarray(values, dtype=np.float64)
    h, w = values.shape
    tile = region_size(h, w, tile)
    regions = (h // tile) * (w // tile)
    ks = list(range(min(int(steps), regions) + 1))
    rank = tile_rank_map(tile_order(values, tile, True), tile, (h, w)).to(x.device)
    fill = x.mean(dim=(2, 3), keepdim=True)[0]  # the degradation benchmark's constant: the per-channel mean

    def batches():
        for start in range(0, len(ks), batch_size):
            yield degrade(x, rank, ks[start:start + batch_size], fill)

    logits = batched_logits(model, batches(), batch_size)  # in eval mode, without gradients
    p = probabilities(logits.double(), head)[:, int(target)].numpy()
    return AopcCurve(tile, np.asarray(ks), p)


class MorfAopc(PerMapMetric):
    """MoRF AOPC as a registered metric: a column per map, for the CLI, the pages, folder runs and the report."""

    name, title = AOPC, "MoRF AOPC"
    measures = ("the mean drop of p(target) as the map's most relevant regions are removed first "
                "(Samek et al. 2017)")
    units = "drop in p(target) (−1–1)"
    columns = (Column("aopc_morf", "MoRF AOPC",
                      f"MoRF AOPC: the mean drop of p(target) as the map's {AOPC_TILE} × {AOPC_TILE} regions are "
                      f"replaced by the image's mean, most relevant first, over {AOPC_STEPS} steps (Samek et al. "
                      "2017; higher is better).", True),)

    def identity(self, options) -> dict:
        return {"aopc": {"tile": AOPC_TILE, "steps": AOPC_STEPS, "fill": "channel mean"}}

    def protocol_sentence(self, identity: dict) -> str | None:
        said = identity.get("aopc") or {"tile": AOPC_TILE, "steps": AOPC_STEPS}
        return (f"MoRF AOPC: the {said['steps']} most relevant {said['tile']} × {said['tile']}-pixel regions removed "
                "one by one (set to the image's per-channel mean), the drops of p(target) averaged over steps 0 … L.")

    def forward_passes(self, pixels: int, options) -> int:
        side = math.isqrt(pixels)  # a square crop; the regions' count only caps L
        regions = (side // region_size(side, side)) ** 2
        return min(AOPC_STEPS, regions) + 1

    def measure(self, batch: MapBatch, options) -> list[Measurement]:
        out = []
        for values in batch.maps:
            curve = aopc_curve(batch.model, batch.x, values, batch.target, head=batch.head,
                               batch_size=options.batch_size)
            out.append(Measurement({"aopc_morf": curve.aopc}, curve))
        return out


MORF_AOPC = MorfAopc()

__all__ = ["AOPC", "AOPC_STEPS", "AOPC_TILE", "AopcCurve", "MORF_AOPC", "MorfAopc", "aopc_curve", "region_size"]
