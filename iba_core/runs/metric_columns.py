"""The field's metrics per map in a folder run (`FolderSettings.metrics`: the metric registry's per-map ones,
insertion, deletion, ROAD, pointing, MoRF AOPC, …; none by default, as each costs forward passes).

`Yardsticks` builds the scoring network once per run (`metrics.yardsticks`) and measures every map as the run
stores it, into the row's metric columns. The metrics and their protocol are part of the run's identity
(`run_settings.check_yardsticks`): a rerun that adds one measures it for the rows already there too
(`folder._add_metrics`: their stored maps, their images loaded again), so every row ends with the same columns.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from ..heads import head_of
from .run_settings import FolderSettings
from .store import decode_map, encode_map


class Yardsticks:
    """The run's metrics per map (`metrics.yardsticks`): the scoring network built once per run (the metrics'
    `scoring_model`, fp32 like p_target, on the network's device), its head, the metrics and their options."""

    def __init__(self, network, settings: FolderSettings):
        from ..metrics.common import scoring_model
        from ..metrics.yardsticks import YardstickOptions, check_metrics

        self.metrics = check_metrics(settings.metrics)
        self.options = settings.yardsticks or YardstickOptions()
        self.model = scoring_model(network, "fp32")
        self.head = head_of(network)

    def columns(self, x: torch.Tensor, values: np.ndarray, target: int, box: np.ndarray | None, image: str,
                method: str, told: Callable[[str], None], metrics: Sequence[str] | None = None) -> dict:
        """The metric columns of one image's map. The map is scored as the run stores it (float16 with a scale,
        `store.encode_map`), so `Run.heatmap(row)` gives these numbers again; the tie-breaking order is seeded by
        the image and the method, so batches, shards and reruns agree. metrics: a part of the run's (default: all);
        the row's `metrics` column then names the run's."""
        from ..metrics.common import stable_seed
        from ..metrics.yardsticks import with_seed, yardstick_columns

        stored = decode_map(*encode_map(values))
        options = with_seed(self.options, stable_seed(self.options.seed, image, method))
        out: dict = yardstick_columns(self.model, x, stored, target, self.metrics if metrics is None else metrics,
                                      head=self.head, box_mask=box, options=options, told=told)
        out["metrics"] = " ".join(self.metrics)
        return out


__all__ = ["Yardsticks"]
