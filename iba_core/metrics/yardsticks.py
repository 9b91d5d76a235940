"""The field's yardsticks as per-image numbers: insertion and deletion (Petsiuk et al. 2018), ROAD (Rong et al.,
ICML 2022) and the localisation scores (pointing game, energy-based pointing), one call per (image, map).

    options = YardstickOptions(protocol=PROTOCOLS["coiba"])
    columns = yardstick_columns(scoring_model(network), x, values, target, ("insertion", "road"),
                                head=head_of(network), options=options)
    # {"insertion_auc": …, "road_morf": …, "road_lerf": …, "road_combined": …}

The one place folder runs, the Dataset page, the report and the Evaluate page's tables turn these metrics into
columns; the measurements themselves live in insertion_deletion.py, road.py and pointing.py. The protocol is part of
every result: `yardstick_identity` is what a run records (and compares on a rerun), `protocol_sentences` what a table
says beside its numbers.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from .insertion_deletion import DELETION, INSERTION, PROTOCOLS, PixelProtocol, insertion_deletion
from .pointing import POINTING, POINTING_TOLERANCE, pointing_scores
from .road import ROAD, ROAD_NOISE, ROAD_REMOVED, road_curves

#: The metrics a folder run offers, in the order their columns appear.
YARDSTICKS = (INSERTION, DELETION, ROAD, POINTING)

#: metric → the columns it fills.
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    INSERTION: ("insertion_auc",),
    DELETION: ("deletion_auc",),
    ROAD: ("road_morf", "road_lerf", "road_combined"),
    POINTING: ("pointing_hit", "energy_pointing", "ehr"),
}
#: Every column, in order.
COLUMNS: tuple[str, ...] = tuple(c for m in YARDSTICKS for c in METRIC_COLUMNS[m])

#: column → whether a higher value means a better map.
HIGHER_IS_BETTER: dict[str, bool] = {
    "insertion_auc": True, "deletion_auc": False, "road_morf": False, "road_lerf": True, "road_combined": True,
    "pointing_hit": True, "energy_pointing": True, "ehr": True,
}

#: column → one sentence: what it measures and which way is better.
COLUMN_TEXT: dict[str, str] = {
    "insertion_auc": "Insertion: the area under p(target) as the map's pixels are put back, most relevant first, "
                     "into a blurred image (0–1; higher is better).",
    "deletion_auc": "Deletion: the area under p(target) as the map's pixels are removed, most relevant first "
                    "(0–1; lower is better).",
    "road_morf": "ROAD MoRF: mean p(target) with the most relevant pixels imputed away, over the removal "
                 "percentages (lower is better).",
    "road_lerf": "ROAD LeRF: mean p(target) with the least relevant pixels imputed away, over the removal "
                 "percentages (higher is better).",
    "road_combined": "ROAD combined: the mean of (LeRF − MoRF) / 2 over the removal percentages, as the ROAD "
                     "paper and pytorch-grad-cam combine them (higher is better).",
    "pointing_hit": "Pointing game: 1 when the map's maximum lies within the tolerance of an object box, else 0 "
                    "(the mean is the hit rate; higher is better; needs boxes).",
    "energy_pointing": "Energy-based pointing: the share of the map's positive mass inside the object boxes "
                       "(0–1; higher is better; needs boxes).",
    "ehr": "Effective heat ratio (InputIBA): the heat inside the boxes per selected pixel, over thresholds of the "
           "map (0–1; higher is better; needs boxes).",
}


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
    explaining `target` under `head`. A metric not asked for gives no column; the pointing scores without a box
    (`box_mask` None or empty) are NaN. told(metric) is called before each metric (a progress line)."""
    metrics = check_metrics(metrics)
    values = np.asarray(values, dtype=np.float64)
    out: dict[str, float] = {}

    def tell(metric: str) -> None:
        if told is not None:
            told(metric)

    pixel = tuple(m for m in (INSERTION, DELETION) if m in metrics)
    if pixel:
        tell(" and ".join(pixel))
        curves = insertion_deletion(model, x, values, int(target), options.protocol, head=head, which=pixel,
                                    batch_size=options.batch_size, seed=options.seed)
        if INSERTION in pixel:
            out["insertion_auc"] = float(curves.insertion_auc)
        if DELETION in pixel:
            out["deletion_auc"] = float(curves.deletion_auc)
    if ROAD in metrics:
        tell(ROAD)
        road = road_curves(model, x, values, int(target), tuple(options.road_removed), head=head,
                           noise=options.road_noise, batch_size=options.batch_size, seed=options.seed)
        out.update(road_morf=float(road.morf_score), road_lerf=float(road.lerf_score),
                   road_combined=float(road.combined))
    if POINTING in metrics:
        if box_mask is None or not np.asarray(box_mask).any():
            out.update(dict.fromkeys(METRIC_COLUMNS[POINTING], math.nan))
        else:
            tell(POINTING)
            scores = pointing_scores(values, np.asarray(box_mask, dtype=bool), options.tolerance)
            out.update({c: float(scores.get(c, math.nan)) for c in METRIC_COLUMNS[POINTING]})
    return out


# ---- what a run records, and what a table says -------------------------------------------------------------


def yardstick_identity(metrics: Sequence[str], options: YardstickOptions = YardstickOptions()) -> dict:
    """What decides the numbers of `metrics` (plain JSON values, for run.json): the protocol of insertion and
    deletion, ROAD's percentages and noise, the pointing tolerance, the seed; only what the metrics asked use."""
    metrics = check_metrics(metrics)
    out: dict = {"metrics": list(metrics), "seed": int(options.seed)}
    if INSERTION in metrics or DELETION in metrics:
        out["protocol"] = asdict(options.protocol)
    if ROAD in metrics:
        out["road_removed"] = [float(r) for r in options.road_removed]
        out["road_noise"] = float(options.road_noise)
    if POINTING in metrics:
        out["tolerance"] = int(options.tolerance)
    return out


def protocol_sentences(identity: dict) -> list[str]:
    """What a table of these metrics says beside its numbers (from `yardstick_identity`): the pixel protocol's own
    sentence, ROAD's percentages, the pointing tolerance."""
    metrics = identity.get("metrics") or []
    out = []
    if identity.get("protocol"):
        try:
            out.append(PixelProtocol(**identity["protocol"]).describe())
        except TypeError:  # a protocol recorded by another version: its fields as they are
            out.append("Insertion/deletion protocol: " + ", ".join(f"{k} {v}" for k, v in identity["protocol"].items())
                       + ".")
    if ROAD in metrics:
        removed = identity.get("road_removed") or list(ROAD_REMOVED)
        out.append(f"ROAD: {', '.join(f'{float(r):g}' for r in removed)} % of the pixels removed (most or least relevant "
                   f"first) and imputed from their neighbours (noisy linear imputation, noise σ "
                   f"{identity.get('road_noise', ROAD_NOISE):g}).")
    if POINTING in metrics:
        out.append(f"Pointing game: a hit when the map's maximum lies within {identity.get('tolerance')} px of an "
                   "object box (TorchRay's rule); rows without a box file have no pointing scores.")
    return out


def with_seed(options: YardstickOptions, seed: int) -> YardstickOptions:
    """The options with another seed (one per image and method in a run: `common.stable_seed`)."""
    return replace(options, seed=int(seed))


def forward_passes(metrics: Sequence[str], pixels: int, options: YardstickOptions = YardstickOptions()) -> int:
    """Forward passes the metrics take per map on a crop of `pixels` pixels (the cost a run adds per image and
    method): a curve point each, and ROAD's pass on the image itself."""
    metrics = check_metrics(metrics)
    points = math.ceil(pixels / max(options.protocol.step, 1)) + 1
    passes = points * sum(m in metrics for m in (INSERTION, DELETION))
    if ROAD in metrics:
        passes += 2 * len(options.road_removed) + 1  # MoRF and LeRF at each percentage, and the image itself
    return passes


__all__ = ["COLUMNS", "COLUMN_TEXT", "HIGHER_IS_BETTER", "METRIC_COLUMNS", "YARDSTICKS", "YardstickOptions",
           "check_metrics", "columns_of", "forward_passes", "protocol_sentences", "with_seed",
           "yardstick_columns", "yardstick_identity"]
