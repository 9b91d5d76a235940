"""The β × layer grid (paper Fig. 3) for one image: how β and the bottleneck's depth shape the map.

Row "beta": β·k over a log range at one layer. Row "layer": a handful of layers across the network's
depth at β·k = 10. Every cell is one Per-Sample Bottleneck run with otherwise equal settings.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import torch

from .bottleneck import DEFAULT_BETA_K
from .networks import Network, NetworkSpec
from .progress import ProgressFn
from .per_sample import LOST_CLASS_MESSAGE, BottleneckSettings, PerSampleBottleneck, bottleneck_lost_class
from .feature_stats import FeatureStats

DEFAULT_BETAS: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1000.0)
#: β·k used along the layer row (the paper's default β = 10/k).
LAYER_ROW_BETA = DEFAULT_BETA_K


@dataclass
class GridCell:
    """One heatmap of the grid."""

    row: str  # "beta" or "layer"
    label: str  # what varies along the row: "β·k = 10" or the layer name
    beta_k: float
    layer: str
    heatmap: np.ndarray  # (224, 224) bits per pixel
    p_with: float  # p(target) with the bottleneck
    total_bits: float
    p_without: float = float("nan")  # p(target) without the bottleneck
    #: the bottleneck discarded the class (`per_sample.bottleneck_lost_class`): the map shows what survived,
    #: not what the class needs (paper §4.1: β ≥ 1000/k discards all information)
    lost_class: bool = False

    @property
    def name(self) -> str:
        """Both settings of the cell: "β·k = 1000 at block3_2"."""
        return f"β·k = {self.beta_k:g} at {self.layer}"


def lost_class_cells(cells: Sequence[GridCell]) -> list[GridCell]:
    """The cells whose bottleneck discarded the class, each (β·k, layer) once, in grid order."""
    seen: set[tuple[float, str]] = set()
    out = []
    for c in cells:
        if c.lost_class and (c.beta_k, c.layer) not in seen:
            seen.add((c.beta_k, c.layer))
            out.append(c)
    return out


def lost_class_warning(cells: Sequence[GridCell]) -> str:
    """A sentence naming the cells where the bottleneck discarded the class, or "" when there are none."""
    lost = lost_class_cells(cells)
    if not lost:
        return ""
    names = "; ".join(f"{c.name} (p = {c.p_with:.2f}, without the bottleneck {c.p_without:.2f})" for c in lost)
    return f"{names}: {LOST_CLASS_MESSAGE}."


def _stage(layer: str) -> str:
    """Stage prefix of a layer name: conv3_4 → conv3, block2_1 → block2, stem → stem."""
    return layer.split("_")[0]


def _spread(items: Sequence[str], count: int) -> list[str]:
    """`count` items evenly spaced over `items`, first and last included."""
    if count >= len(items):
        return list(items)
    idx = np.unique(np.round(np.linspace(0, len(items) - 1, count)).astype(int))
    return [items[i] for i in idx]


def depth_layers(spec: NetworkSpec, count: int = 5, include: str | None = None) -> list[str]:
    """`count` layers spread over the network's depth, in depth order, always containing `include`.

    Prefers the last layer of each stage (for ResNet-50 this gives the paper's conv1, conv2_3,
    conv3_4, conv4_6, conv5_3); falls back to evenly spaced layers when there are too few stages.
    """
    include = spec.check_layer(include or spec.default_layer)
    layers = list(spec.layers)
    # A layer ends its stage when the next layer (if any) belongs to another stage.
    stage_ends = [name for name, nxt in zip(layers, layers[1:] + [""]) if _stage(nxt) != _stage(name)]
    chosen = _spread(stage_ends if len(stage_ends) >= count else layers, count)
    if include not in chosen:
        # Swap in `include` for the chosen layer nearest to it in depth (ties: the shallower one).
        pos = layers.index(include)
        nearest = min(chosen, key=lambda name: (abs(layers.index(name) - pos), layers.index(name)))
        chosen[chosen.index(nearest)] = include
    return sorted(chosen, key=layers.index)


def beta_layer_grid(
    network: Network,
    x: torch.Tensor,
    target: int | None,
    layer: str,
    stats_for: Callable[[str], FeatureStats],
    betas: Sequence[float] = DEFAULT_BETAS,
    layers: Sequence[str] | None = None,
    settings: BottleneckSettings | None = None,
    progress: ProgressFn | None = None,
    on_cell: Callable[[GridCell], None] | None = None,
) -> list[GridCell]:
    """Heatmaps for β·k ∈ `betas` at `layer`, then for `layers` (default: `depth_layers`) at β·k = 10.

    stats_for(layer) supplies the feature statistics for each layer (the caller decides on caching).
    progress(done, total, label) is called after each cell, on_cell(cell) with each finished cell.
    Identical (β·k, layer) pairs are computed once.
    """
    network.spec.check_layer(layer)
    base = settings or BottleneckSettings()
    layers = list(layers) if layers is not None else depth_layers(network.spec, include=layer)
    plan = [("beta", f"β·k = {b:g}", float(b), layer) for b in betas]
    plan += [("layer", name, LAYER_ROW_BETA, network.spec.check_layer(name)) for name in layers]
    if target is None:
        target = network.top_k(x, 1)[0][0]  # one class for every cell, so the maps are comparable

    done: dict[tuple[float, str], GridCell] = {}
    cells: list[GridCell] = []
    stats_cache: dict[str, FeatureStats] = {}
    for i, (row, label, beta_k, name) in enumerate(plan, start=1):
        key = (beta_k, name)
        if key not in done:
            if name not in stats_cache:
                stats_cache[name] = stats_for(name)
            iba = PerSampleBottleneck.for_network(network, name, stats_cache[name], replace(base, beta_k=beta_k))
            result = iba.attribute(x, target=target)
            done[key] = GridCell(row, label, beta_k, name, result.heatmap, result.p_with, result.total_bits,
                                 result.p_without, bottleneck_lost_class(result.p_without, result.p_with))
        cell = replace(done[key], row=row, label=label)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
        if progress is not None:
            progress(i, len(plan), label)
    return cells
