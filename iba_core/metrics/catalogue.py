"""The metric objects (`registry.Metric`) of the metrics that came before the registry: the paper's (§4:
degradation, bbox, sensitivity-n, sanity, beta-table) and the field's yardsticks (insertion, deletion, ROAD, the
pointing game). Their measurements live in their own modules, which import torch at the top; these objects
describe them and call into those modules only when used, so the registry stays light.

A new metric does not go here: it defines its object in its own module (metrics/aopc.py is the example)."""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Sequence

from ..errors import UserError
from .registry import Column, MapBatch, Measurement, Metric

# ---- the paper's metrics (§4): records of the evaluate CLI only ------------------------------------------------


class _PaperMetric(Metric):
    """A metric of `python -m iba_core evaluate` only: its loop in runner.py, its table in its module."""

    runner: str = ""  # the function of runner.py that measures one image
    module: str = ""  # its module in this package (its format_table)

    def run(self, ctx, item, methods: dict) -> None:
        from . import runner

        getattr(runner, self.runner)(ctx, item, methods)

    def format_table(self, records: Sequence[dict]) -> str:
        from importlib import import_module

        return import_module(f".{self.module}", __package__).format_table(records)


class Degradation(_PaperMetric):
    name, title, module, runner = "degradation", "Degradation", "degradation", "run_degradation"
    measures = ("the area between the LeRF and MoRF curves of p(target) as tiles are removed in the map's order "
                "(paper §4.6)")
    units = "area (scaled p(target) × fraction of tiles)"


class BBox(_PaperMetric):
    name, title, module, runner = "bbox", "The bbox metric", "bbox", "run_bbox"
    measures = "the share of the map's n highest pixels inside the object box, n the box's size (paper §4.4)"
    units = "share (0–1)"
    needs_boxes = True


class SensitivityN(_PaperMetric):
    name, title, module, runner = "sensitivity-n", "Sensitivity-n", "sensitivity_n", "run_sensitivity"
    measures = ("the correlation of the logit drop of random tile sets with the map's sum over them "
                "(Ancona et al. 2018; paper §4.5)")
    units = "Pearson correlation (−1–1)"


class Sanity(_PaperMetric):
    name, title, module, runner = "sanity", "Sanity check", "sanity", "run_sanity"
    measures = ("the SSIM of the map to the maps of the network randomised from the logits down (Adebayo et al. "
                "2018); a map that explains the network changes")
    units = "SSIM (−1–1)"
    higher_is_better = False


class BetaTable(_PaperMetric):
    name, title, module, runner = "beta-table", "β table", "beta_table", "run_beta_table"
    measures = "the information kept (L_I / k) and the accuracy under the bottleneck at each β (paper Table 3)"
    units = "bits per feature, accuracy"


# ---- the field's yardsticks: per-map columns -------------------------------------------------------------------


class _PixelCurve(Metric):
    """Insertion or deletion (Petsiuk et al. 2018), under the run's pixel protocol; its record holds the curve."""

    units = "area under p(target) (0–1)"

    def identity(self, options) -> dict:
        return {"protocol": asdict(options.protocol)}

    def protocol_sentence(self, identity: dict) -> str | None:
        from .insertion_deletion import PixelProtocol

        if not identity.get("protocol"):
            return None
        try:
            return PixelProtocol(**identity["protocol"]).describe()
        except TypeError:  # a protocol recorded by another version: its fields as they are
            fields = ", ".join(f"{k} {v}" for k, v in identity["protocol"].items())
            return f"Insertion/deletion protocol: {fields}."

    def forward_passes(self, pixels: int, options) -> int:
        return math.ceil(pixels / max(options.protocol.step, 1)) + 1

    def measure(self, batch: MapBatch, options) -> list[Measurement]:
        from .insertion_deletion import insertion_deletion

        out = []
        for values in batch.maps:
            curves = insertion_deletion(batch.model, batch.x, values, int(batch.target), options.protocol,
                                        head=batch.head, which=(self.name,), batch_size=options.batch_size,
                                        seed=options.seed, progress=batch.progress)
            out.append(Measurement({self.columns[0].name: float(getattr(curves, f"{self.name}_auc"))}, curves))
        return out

    def check(self, options) -> None:
        pass  # the protocol was checked when it was made (`insertion_deletion.protocol_from`)

    def check_crop(self, options, height: int, width: int) -> None:
        from .insertion_deletion import check_on_crop

        check_on_crop(options.protocol, height, width)  # the blur and the step against the crop

    def run(self, ctx, item, methods: dict) -> None:
        from .runner import run_insertion_deletion

        run_insertion_deletion(ctx, item, methods)

    def format_table(self, records: Sequence[dict]) -> str:
        from .insertion_deletion import format_table

        return format_table(records)


class Insertion(_PixelCurve):
    name, title = "insertion", "Insertion"
    measures = ("the area under p(target) as the map's pixels are put back into a blurred image, most relevant "
                "first (Petsiuk et al. 2018)")
    columns = (Column("insertion_auc", "insertion AUC",
                      "Insertion: the area under p(target) as the map's pixels are put back, most relevant first, "
                      "into a blurred image (0–1; higher is better).", True),)


class Deletion(_PixelCurve):
    name, title = "deletion", "Deletion"
    measures = "the area under p(target) as the map's pixels are removed, most relevant first (Petsiuk et al. 2018)"
    higher_is_better = False
    columns = (Column("deletion_auc", "deletion AUC",
                      "Deletion: the area under p(target) as the map's pixels are removed, most relevant first "
                      "(0–1; lower is better).", False),)


class Road(Metric):
    name, title = "road", "ROAD"
    measures = ("p(target) with the most (MoRF) or least (LeRF) relevant pixels removed by noisy linear "
                "imputation, over removal percentages (Rong et al. 2022)")
    units = "mean p(target) (0–1)"
    columns = (
        Column("road_morf", "ROAD MoRF", "ROAD MoRF: mean p(target) with the most relevant pixels imputed away, "
               "over the removal percentages (lower is better).", False),
        Column("road_lerf", "ROAD LeRF", "ROAD LeRF: mean p(target) with the least relevant pixels imputed away, "
               "over the removal percentages (higher is better).", True),
        Column("road_combined", "ROAD combined", "ROAD combined: the mean of (LeRF − MoRF) / 2 over the removal "
               "percentages, as the ROAD paper and pytorch-grad-cam combine them (higher is better).", True),
    )

    def identity(self, options) -> dict:
        return {"road_removed": [float(r) for r in options.road_removed], "road_noise": float(options.road_noise)}

    def protocol_sentence(self, identity: dict) -> str | None:
        from .road import ROAD_NOISE, ROAD_REMOVED

        removed = identity.get("road_removed") or list(ROAD_REMOVED)
        return (f"ROAD: {', '.join(f'{float(r):g}' for r in removed)} % of the pixels removed (most or least "
                f"relevant first) and imputed from their neighbours (noisy linear imputation, noise σ "
                f"{identity.get('road_noise', ROAD_NOISE):g}).")

    def forward_passes(self, pixels: int, options) -> int:
        from .road import ROAD_REMOVED

        # MoRF and LeRF at each percentage, and the image itself (the command line's options leave them unset: the
        # paper's points)
        return 2 * len(getattr(options, "road_removed", None) or ROAD_REMOVED) + 1

    def measure(self, batch: MapBatch, options) -> list[Measurement]:
        from .road import road_curves

        out = []
        for values in batch.maps:
            road = road_curves(batch.model, batch.x, values, int(batch.target), tuple(options.road_removed),
                               head=batch.head, noise=options.road_noise, batch_size=options.batch_size,
                               seed=options.seed, progress=batch.progress)
            out.append(Measurement({"road_morf": float(road.morf_score), "road_lerf": float(road.lerf_score),
                                    "road_combined": float(road.combined)}, road))
        return out

    def check(self, options) -> None:
        from .road import ROAD_REMOVED, check_noise, check_removed

        check_removed(options.road_removed or ROAD_REMOVED)
        check_noise(options.road_noise)

    def check_crop(self, options, height: int, width: int) -> None:
        from .road import ROAD_REMOVED, check_on_crop

        check_on_crop(options.road_removed or ROAD_REMOVED, height, width)

    def run(self, ctx, item, methods: dict) -> None:
        from .runner import run_road

        run_road(ctx, item, methods)

    def format_table(self, records: Sequence[dict]) -> str:
        from .road import format_table

        return format_table(records)


class Pointing(Metric):
    name, title = "pointing", "Pointing game"
    measures = ("whether the map's maximum lies on an object box, the share of its mass inside the boxes, and "
                "InputIBA's effective heat ratio")
    units = "hit (0/1), shares (0–1)"
    needs_boxes = True
    columns = (
        Column("pointing_hit", "pointing hit", "Pointing game: 1 when the map's maximum lies within the tolerance of "
               "an object box, else 0 (the mean is the hit rate; higher is better; needs boxes).", True,
               words=("miss", "hit")),
        Column("energy_pointing", "energy pointing", "Energy-based pointing: the share of the map's positive mass "
               "inside the object boxes (0–1; higher is better; needs boxes).", True),
        Column("ehr", "EHR", "Effective heat ratio (InputIBA): the heat inside the boxes per selected pixel, over "
               "thresholds of the map (0–1; higher is better; needs boxes).", True),
    )

    def identity(self, options) -> dict:
        return {"tolerance": int(options.tolerance)}

    def protocol_sentence(self, identity: dict) -> str | None:
        return (f"Pointing game: a hit when the map's maximum lies within {identity.get('tolerance')} px of an "
                "object box (TorchRay's rule); rows without a box file have no pointing scores.")

    def measure(self, batch: MapBatch, options) -> list[Measurement]:
        import numpy as np

        from .pointing import pointing_point, pointing_scores

        if batch.box_mask is None or not np.asarray(batch.box_mask).any():
            return [Measurement(self.nan(), None) for _ in batch.maps]
        mask = np.asarray(batch.box_mask, dtype=bool)
        out = []
        for values in batch.maps:
            scores = pointing_scores(values, mask, options.tolerance)
            out.append(Measurement({c.name: float(scores.get(c.name, math.nan)) for c in self.columns},
                                   pointing_point(values)))  # the point the game reads, (row, column)
        return out

    def check(self, options) -> None:
        super().check(options)
        tolerance = options.tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
            raise UserError(f"The pointing game's tolerance must be a whole number of pixels ≥ 0 "
                            f"(not {tolerance!r}).")

    def run(self, ctx, item, methods: dict) -> None:
        from .runner import run_pointing

        run_pointing(ctx, item, methods)

    def format_table(self, records: Sequence[dict]) -> str:
        from .pointing import format_table

        return format_table(records)


DEGRADATION, BBOX, SENSITIVITY_N, SANITY, BETA_TABLE = Degradation(), BBox(), SensitivityN(), Sanity(), BetaTable()
INSERTION, DELETION, ROAD, POINTING = Insertion(), Deletion(), Road(), Pointing()

__all__ = ["BBOX", "BETA_TABLE", "DEGRADATION", "DELETION", "INSERTION", "POINTING", "ROAD", "SANITY",
           "SENSITIVITY_N"]
