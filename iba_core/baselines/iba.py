"""The Per-Sample Bottleneck (paper §3.2) behind the baselines' interface: `iba_1`, `iba_10`, `iba_100`.

β = β·k / k with k = h·w·c of the layer (paper §4.1: β = 1/k, 10/k, 100/k). The layer defaults to the
network's paper default (`spec.default_layer`); statistics come from the on-disk cache (`get_stats`), with
`IBA_STATS_SAMPLES` samples (default 1000). Registered networks only (the split path); tests on small
inputs pass matching `stats` directly.
"""
from __future__ import annotations

import os

import torch

from ..per_sample import BottleneckSettings, PerSampleBottleneck
from ._common import Method, model_key

STATS_SAMPLES_ENV = "IBA_STATS_SAMPLES"


def stats_samples() -> int:
    """IBA_STATS_SAMPLES if it is a positive integer, else 1000."""
    try:
        n = int(os.environ.get(STATS_SAMPLES_ENV, ""))
    except ValueError:
        return 1000
    return n if n > 0 else 1000


class PerSampleIBA(Method):
    signed = False
    unit = "bits/pixel"

    def __init__(self, beta_k: float = 10.0, **settings):
        super().__init__(beta_k=beta_k, **settings)
        beta_k = float(self.settings["beta_k"])
        label = f"{beta_k:g}"
        self.key = f"iba_{label}".replace(".", "_")
        self.name = f"Per-Sample IBA β={label}/k"
        self.description = f"Bits per pixel that pass a bottleneck fitted with β = {label}/k (paper §3.2)."

    @classmethod
    def default_settings(cls) -> dict:
        defaults = BottleneckSettings()
        return {
            "beta_k": 10.0,
            "layer": None,  # None: the network's default layer
            "steps": defaults.steps,
            "batch": defaults.batch,
            "lr": defaults.lr,
            "sigma": defaults.sigma,
            "seed": defaults.seed,
            "stats": None,  # a FeatureStats for the layer; None: cached statistics (get_stats)
            "stats_samples": None,  # None: IBA_STATS_SAMPLES or 1000
        }

    def _compute(self, loaded, x: torch.Tensor, target: int):
        if not hasattr(loaded, "fast_split") or model_key(loaded) is None:
            raise ValueError("The Per-Sample Bottleneck baseline needs a registered network (iba_core.models).")
        s = self.settings
        layer = s["layer"] or loaded.spec.default_layer
        stats = s["stats"]
        if stats is None:
            from ..stats import get_stats

            stats = get_stats(loaded, layer, n=int(s["stats_samples"] or stats_samples()))
        settings = BottleneckSettings(
            beta_k=float(s["beta_k"]), steps=int(s["steps"]), batch=int(s["batch"]), lr=float(s["lr"]),
            sigma=float(s["sigma"]), seed=s["seed"],
        )
        result = PerSampleBottleneck.for_model(loaded, layer, stats.to(loaded.device), settings).attribute(x, target)
        extra = {
            "layer": layer,
            "total_bits": result.total_bits,
            "p_without": result.p_without,
            "p_with": result.p_with,
            "stats_samples": stats.n,
        }
        return result.heatmap, extra
