"""The field's yardsticks as per-image numbers: insertion and deletion (Petsiuk et al. 2018), ROAD (Rong et al.,
ICML 2022) and the localisation scores (pointing game, energy-based pointing), one call per (image, map).

    options = YardstickOptions(protocol=PROTOCOLS["coiba"])
    columns = yardstick_columns(scoring_model(network), x, values, target, ("insertion", "road"),
                                head=head_of(network), options=options)
    # {"insertion_auc": …, "road_morf": …, "road_lerf": …, "road_combined": …}

The one place folder runs, the Dataset page, the report and the Evaluate page's tables turn the registry's per-map
metrics (`registry.per_map()`: these, MoRF AOPC and any metric added there) into columns; each metric's object
measures (`Metric.measure`), the measurements themselves live in insertion_deletion.py, road.py, pointing.py, ….
The protocol is part of every result: `yardstick_identity` is what a run records (and compares on a rerun), `protocol_sentences` what a table
says beside its numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from . import registry
from .insertion_deletion import PROTOCOLS, PixelProtocol
from .pointing import POINTING_TOLERANCE
from .road import ROAD_NOISE, ROAD_REMOVED

#: The metrics a folder run offers, in the order their columns appear: the registry's per-map metrics.
YARDSTICKS: tuple[str, ...] = tuple(m.name for m in registry.per_map())

#: metric → the columns it fills.
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {m.name: tuple(c.name for c in m.columns) for m in registry.per_map()}
#: Every column, in order.
COLUMNS: tuple[str, ...] = tuple(c.name for c in registry.columns())

#: column → whether a higher value means a better map.
HIGHER_IS_BETTER: dict[str, bool] = {c.name: c.higher_is_better for c in registry.columns()}

#: column → one sentence: what it measures and which way is better.
COLUMN_TEXT: dict[str, str] = {c.name: c.help for c in registry.columns()}


@dataclass(frozen=True)
class YardstickOptions:
    """How the yardsticks are measured: the pixel protocol of insertion and deletion, ROAD's removal percentages
    and noise, the pointing game's tolerance (px), images per forward pass, the seed of the tie-breaking order."""

    protocol: PixelProtocol = PROTOCOLS["rise"]
    road_removed: tuple[float, ...] = ROAD_REMOVED
    tolerance: int = POINTING_TOLERANCE
    batch_size: int = 64
    seed: int = 0
    road_noise: float = ROAD_NOISE


def check_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    """The metrics in YARDSTICKS order, each once; an unknown name is a UserError naming the choices."""
    asked = [str(m).strip().lower() for m in metrics if str(m).strip()]
    unknown = [m for m in asked if m not in YARDSTICKS]
    if unknown:
        raise UserError(f"Unknown metric {unknown[0]!r}; choose from {', '.join(YARDSTICKS)}.")
    return tuple(m for m in YARDSTICKS if m in asked)


def columns_of(metrics: Sequence[str]) -> tuple[str, ...]:
    """The columns the metrics fill, in COLUMNS order."""
    return tuple(c for m in check_metrics(metrics) for c in METRIC_COLUMNS[m])


def yardstick_columns(model, x, values, target: int, metrics: Sequence[str], *, head: str = "softmax",
                      box_mask: np.ndarray | None = None,
                      options: YardstickOptions = YardstickOptions(),
                      told: Callable[[str], None] | None = None) -> dict[str, float]:
    """The columns of `metrics` for one image `x` (1, C, H, W, on the model's device) and its (H, W) map `values`,
    explaining `target` under `head`: each metric's `measure` (the registry). A metric not asked for gives no
    column; a metric that needs boxes gives NaN without one (`box_mask` None or empty). told(metric) is called
    before each metric that measures (a progress line)."""
    batch = registry.MapBatch(model, x, [np.asarray(values, dtype=np.float64)], int(target), head, box_mask)
    boxed = box_mask is not None and bool(np.asarray(box_mask).any())
    out: dict[str, float] = {}
    for name in check_metrics(metrics):
        metric = registry.get(name)
        if metric.needs_boxes and not boxed:
            out.update(metric.nan())
            continue
        if told is not None:
            told(name)
        out.update(metric.measure(batch, options)[0].values)
    return out


# ---- what a run records, and what a table says -------------------------------------------------------------


def yardstick_identity(metrics: Sequence[str], options: YardstickOptions = YardstickOptions()) -> dict:
    """What decides the numbers of `metrics` (plain JSON values, for run.json): the seed and each metric's
    `identity` (the protocol of insertion and deletion, ROAD's percentages and noise, the pointing tolerance, …);
    only what the metrics asked use."""
    metrics = check_metrics(metrics)
    out: dict = {"metrics": list(metrics), "seed": int(options.seed)}
    for name in metrics:
        out.update(registry.get(name).identity(options))
    return out


def protocol_sentences(identity: dict) -> list[str]:
    """What a table of these metrics says beside its numbers (from `yardstick_identity`): each measured metric's
    sentence (the pixel protocol's, ROAD's percentages, the pointing tolerance, …), each once."""
    said: dict[str, None] = {}
    for metric in registry.per_map():
        if metric.name in (identity.get("metrics") or []):
            sentence = metric.protocol_sentence(identity)
            if sentence:
                said[sentence] = None
    return list(said)


def with_seed(options: YardstickOptions, seed: int) -> YardstickOptions:
    """The options with another seed (one per image and method in a run: `common.stable_seed`)."""
    return replace(options, seed=int(seed))


def forward_passes(metrics: Sequence[str], pixels: int, options: YardstickOptions = YardstickOptions()) -> int:
    """Forward passes the metrics take per map on a crop of `pixels` pixels (the cost a run adds per image and
    method): the sum of each metric's `forward_passes`."""
    return sum(registry.get(name).forward_passes(pixels, options) for name in check_metrics(metrics))


__all__ = ["COLUMNS", "COLUMN_TEXT", "HIGHER_IS_BETTER", "METRIC_COLUMNS", "YARDSTICKS", "YardstickOptions",
           "check_metrics", "columns_of", "forward_passes", "protocol_sentences", "with_seed",
           "yardstick_columns", "yardstick_identity"]
