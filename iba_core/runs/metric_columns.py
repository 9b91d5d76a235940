"""The field's metrics per map in a folder run (`FolderSettings.metrics`: the metric registry's per-map ones,
insertion, deletion, ROAD, pointing, MoRF AOPC, …; none by default, as each costs forward passes).

`Yardsticks` builds the scoring network once per run (`metrics.yardsticks`) and measures every map as the run
stores it, into the row's metric columns. The metrics and their protocol are part of the run's identity
(`run_settings.check_yardsticks`): a rerun that adds one measures it for the rows already there too
(`folder._add_metrics`: their stored maps, their images loaded again), so every row ends with the same columns.
"""
from __future__ import annotations

import os
from typing import Callable, Sequence

import numpy as np
import torch

from ..heads import head_of
from .run_settings import FolderSettings
from .store import decode_map, encode_map


class Yardsticks:
    """The run's metrics per map (`metrics.yardsticks`): the scoring network built once per run (the metrics'
    `scoring_model`, fp32 like p_target, on the network's device), its head, the metrics and their options."""

    def __init__(self, network, settings: FolderSettings, run_dir: str | os.PathLike = "."):
        from ..metrics.common import scoring_model
        from ..metrics.yardsticks import YardstickOptions, check_metrics

        self.run_dir = run_dir  # where a bug's traceback goes (`bug_log`)
        self.metrics = check_metrics(settings.metrics)
        self.options = settings.yardsticks or YardstickOptions()
        self.model = scoring_model(network, "fp32")
        self.head = head_of(network)

    def columns(self, x: torch.Tensor, values: np.ndarray, target: int, box: np.ndarray | None, image: str,
                method: str, told: Callable[[str], None], metrics: Sequence[str] | None = None) -> dict:
        """The metric columns of one image's map. The map is scored as the run stores it (float16 with a scale,
        `store.encode_map`), so `Run.heatmap(row)` gives these numbers again; the tie-breaking order is seeded by
        the image and the method, so batches, shards and reruns agree. metrics: a part of the run's (default: all);
        the row's `metrics` column then names the run's. A metric that fails leaves its columns blank and its
        sentence in `metric_errors`, and is left out of `metrics` (a rerun measures it again on the stored map):
        the map and the other metrics are kept."""
        from ..metrics import registry
        from ..metrics.common import stable_seed
        from ..metrics.yardsticks import with_seed, yardstick_columns
        from .bug_log import row_error

        stored = decode_map(*encode_map(values))
        options = with_seed(self.options, stable_seed(self.options.seed, image, method))
        out: dict = {}
        failed: dict[str, str] = {}
        for name in self.metrics if metrics is None else metrics:
            try:
                out.update(yardstick_columns(self.model, x, stored, target, (name,), head=self.head, box_mask=box,
                                             options=options, told=told))
            except Exception as err:  # noqa: BLE001 - one metric's failure blanks its columns, not the row's map
                out.update(registry.get(name).nan())
                failed[name] = row_error(err, self.run_dir, f"image {image} · method {method} · {name}")
        out["metrics"] = " ".join(m for m in self.metrics if m not in failed)
        out["metric_errors"] = "; ".join(f"{m}: {text}" for m, text in failed.items()) or None
        return out


__all__ = ["Yardsticks"]
