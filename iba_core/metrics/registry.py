"""The registry of metric objects: every metric the CLI, the Evaluate page, folder runs, the Dataset page and the
report know, one object each, looked up by name.

A `Metric` says what it measures (one sentence), which way is better, its units, the columns it fills (each with
its header, tooltip and direction), what decides its numbers (`identity`: two numbers compare only when their
identities agree), its cost in forward passes, and how to `measure` a batch of maps of one image. The drivers loop
over the registry instead of naming metrics: `python -m iba_core evaluate` (metrics/runner.py, one `run` per image
and the metric's `format_table`), the per-map columns of folder runs and the pages (metrics/yardsticks.py), the
Evaluate page's tables (app/evaluation.py), the yardstick-table script.

Adding a metric: its module in this package defines a `Metric` object (see metrics/aopc.py, MoRF AOPC), and one
line of `REGISTERED` below names it (docs/adding-a-metric.md walks through it). The registry loads no torch: a
metric's module keeps its torch imports inside its functions (the paper's metrics and the field's older yardsticks
import torch at the top, so their objects live in metrics/catalogue.py and call into their modules when used), so
that reading a run's table (runs/store.py) stays light.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import UserError

#: The registered metrics, in the order menus and tables list them: "module of iba_core.metrics:object".
REGISTERED: tuple[str, ...] = (
    "catalogue:DEGRADATION",
    "catalogue:BBOX",
    "catalogue:SENSITIVITY_N",
    "catalogue:SANITY",
    "catalogue:BETA_TABLE",
    "catalogue:INSERTION",
    "catalogue:DELETION",
    "catalogue:ROAD",
    "catalogue:POINTING",
    "aopc:MORF_AOPC",
)

UP, DOWN = "↑", "↓"


@dataclass(frozen=True)
class Column:
    """One number a metric gives per map: its field in records and run tables (`name`), the short header pages
    show, one sentence of help (what it measures, which way is better), and its direction. `words`: for a 0/1
    column, what a page shows for 0 and for 1 (the pointing game's "miss", "hit")."""

    name: str
    header: str
    help: str
    higher_is_better: bool
    words: tuple[str, str] | None = None

    @property
    def arrow(self) -> str:
        """↑ when a higher value is better, else ↓."""
        return UP if self.higher_is_better else DOWN

    @property
    def titled(self) -> str:
        """The header with its direction: "insertion AUC ↑"."""
        return f"{self.header} {self.arrow}"

    def shown(self, value: float) -> Any:
        """The value as a page's table shows it: its word for a 0/1 column, else rounded to 4 decimals."""
        if self.words is not None:
            return self.words[int(value >= 0.5)]
        return round(float(value), 4)


@dataclass(frozen=True)
class MapBatch:
    """Maps of one image to measure: the scoring `model` (`common.scoring_model`), the image `x` (1, C, H, W, on
    the model's device), its (H, W) `maps`, the explained `target` under `head`, the object boxes as a (H, W) bool
    `box_mask` (None: no box), and `progress(done, total, label)` of the metric's own passes (or None)."""

    model: Any
    x: Any
    maps: Sequence[np.ndarray]
    target: int
    head: str = "softmax"
    box_mask: np.ndarray | None = None
    progress: Callable[[int, int, str], None] | None = None


@dataclass
class Measurement:
    """What a metric measured for one map: its columns' `values`, and the `curve` a page draws (None: none)."""

    values: dict[str, float]
    curve: Any = None


class Metric:
    """A metric: the description every driver reads, and the hooks they call. Subclasses set the class fields and
    override `measure` (and, for a per-map metric, `identity`, `protocol_sentence`, `forward_passes`) and the
    evaluate CLI's `run` and `format_table`; a new per-map metric subclasses `per_map.PerMapMetric`, which has
    generic versions of those two."""

    #: its name in the CLI, the records and run.json
    name: str = ""
    #: how pages and docs name it
    title: str = ""
    #: one sentence: what it measures
    measures: str = ""
    #: whether a higher headline number means a better map
    higher_is_better: bool = True
    #: the units of its numbers
    units: str = ""
    #: the numbers it gives per map (empty: a metric of the evaluate CLI only, not a column of runs and pages)
    columns: tuple[Column, ...] = ()
    #: whether it scores maps against object boxes (the pointing game): without a box its columns are NaN
    needs_boxes: bool = False

    @property
    def per_map(self) -> bool:
        """Whether it gives columns per map (folder runs, the Dataset page, the report, the Evaluate page's
        yardsticks), not only the evaluate CLI's records."""
        return bool(self.columns)

    # ---- what decides the numbers, and what they cost ----------------------------------------------------

    def identity(self, options) -> dict:
        """The settings (plain JSON values) that make two of its numbers comparable, from `YardstickOptions`;
        part of a folder run's identity (run.json) and of a page's caption."""
        return {}

    def protocol_sentence(self, identity: dict) -> str | None:
        """One sentence saying how its numbers were measured, from a run's identity (None: nothing to say)."""
        return None

    def forward_passes(self, pixels: int, options) -> int:
        """Forward passes it takes per map on a crop of `pixels` pixels."""
        return 0

    # ---- measuring ---------------------------------------------------------------------------------------

    def measure(self, batch: MapBatch, options) -> list[Measurement]:
        """One `Measurement` per map of `batch`, under `options` (`yardsticks.YardstickOptions`)."""
        raise NotImplementedError(f"{self.name} is measured over whole images by the evaluation loop, not per map.")

    def nan(self) -> dict[str, float]:
        """Its columns, each NaN (a map it cannot score, e.g. the pointing game without a box)."""
        return dict.fromkeys((c.name for c in self.columns), math.nan)

    # ---- the evaluate CLI ---------------------------------------------------------------------------------

    def check(self, options) -> None:
        """Refuse options it cannot use (`runner.EvalOptions`), with a UserError, before any slow work."""
        if self.needs_boxes and options.boxes is None:
            raise UserError(f"{self.title or self.name} needs object boxes (Pascal-VOC XML files named like the "
                            "images).", cli_hint="Name their folder with --boxes DIR.",
                            app_hint="Type a box or upload a Pascal-VOC XML file under Bounding box.")

    def check_crop(self, options, height: int, width: int) -> None:
        """Refuse settings (`yardsticks.YardstickOptions`) that cannot work on the network's `height` × `width` crop
        (a blur kernel wider than it, a ROAD percentage that removes no pixel of it), with a UserError naming the
        setting: every driver calls it (`check_on_crop`) once the crop is known, before any image, so a setting
        that would fail every image never starts a run. Most metrics take any crop."""

    def run(self, ctx, item, methods: dict) -> None:
        """Measure one image for the evaluate CLI and write its records (`runner._Context`); `per_map.PerMapMetric`
        has the generic version (one record per method with its columns)."""
        raise NotImplementedError

    def format_table(self, records: Sequence[dict]) -> str:
        """The evaluate CLI's markdown table of its records (`per_map.PerMapMetric`: the means per method)."""
        raise NotImplementedError


# ---- lookups ----------------------------------------------------------------------------------------------

_loaded: tuple[Metric, ...] | None = None


def metrics() -> tuple[Metric, ...]:
    """Every registered metric, in `REGISTERED` order (their modules imported on the first call)."""
    global _loaded
    if _loaded is None:
        found = []
        for entry in REGISTERED:
            module, name = entry.split(":")
            found.append(getattr(import_module(f".{module}", __package__), name))
        _loaded = tuple(found)
    return _loaded


def names() -> tuple[str, ...]:
    """The registered metrics' names (the evaluate CLI's choices)."""
    return tuple(m.name for m in metrics())


def get(name: str) -> Metric:
    """The metric called `name`; an unknown name is a UserError naming the choices."""
    for metric in metrics():
        if metric.name == name:
            return metric
    raise UserError(f"Unknown metric {name!r}; choose one of: {', '.join(names())}.")


def crop_of(network) -> tuple[int, int] | None:
    """(height, width) of the crop the network sees (`preprocess.crop_size`, square), or None when it has none."""
    crop = getattr(getattr(network, "preprocess", None), "crop_size", None)
    if isinstance(crop, (tuple, list)) and len(crop) == 2:
        return int(crop[0]), int(crop[1])
    return (int(crop), int(crop)) if isinstance(crop, int) and not isinstance(crop, bool) else None


def check_on_crop(metrics: Sequence[str], options, crop: tuple[int, int] | None) -> None:
    """Each of `metrics` checks its settings (`options`, `yardsticks.YardstickOptions`) against the network's crop
    (`crop_of`; None: unknown, nothing to check): the one place the CLI's folder runs and evaluations, the Dataset
    page's runs and the Evaluate page's yardsticks refuse a setting the crop cannot take, before any image."""
    if crop is None:
        return
    for name in metrics:
        get(name).check_crop(options, *crop)


def per_map() -> tuple[Metric, ...]:
    """The metrics that give columns per map, in order: what folder runs and the pages offer."""
    return tuple(m for m in metrics() if m.per_map)


def columns() -> tuple[Column, ...]:
    """Every per-map column, in order."""
    return tuple(c for m in per_map() for c in m.columns)


def column(name: str) -> Column:
    """The per-map column whose field is `name` (KeyError for another name)."""
    for c in columns():
        if c.name == name:
            return c
    raise KeyError(name)


__all__ = ["Column", "DOWN", "MapBatch", "Measurement", "Metric", "REGISTERED", "UP", "check_on_crop", "column",
           "columns", "crop_of", "get", "metrics", "names", "per_map"]
