"""The two bottlenecks behind the method interface: Per-Sample (`iba_1`, `iba_10`, `iba_100`) and Readout.

Per-Sample (paper §3.2): β = β·k / k with k = h·w·c of the layer (paper §4.1: β = 1/k, 10/k, 100/k). The
layer defaults to the network's default layer; statistics come from the on-disk cache (`get_stats`) with
`feature_stats.app_samples` samples unless given. Networks that can be split run the prefix once and the
suffix per step; any other network runs through a forward hook.

Readout (paper §3.3): a trained readout network predicts the mask in one pass; its checkpoint is the
shipped one for the network unless given. λ does not depend on the target class (the readout predicts
it from the image and the logits, as in the paper).
"""
from __future__ import annotations

import os

import torch

from ..bottleneck import DEFAULT_BETA_K
from ..per_sample import BottleneckSettings, PerSampleBottleneck
from .base import Method, spec_of


class PerSampleIBA(Method):
    signed = False
    unit = "bits/pixel"
    cost = "slow"
    needs_stats = True
    explains_logit = False  # its loss and p(target) follow the network's head (`heads.py`)

    def __init__(self, beta_k: float = DEFAULT_BETA_K, **settings):
        super().__init__(beta_k=beta_k, **settings)
        beta_k = self.bottleneck_settings().beta_k  # checked now: a bad value fails before any network loads
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
            "read_point": defaults.read_point,
            "inactive_threshold": defaults.inactive_threshold,
            "precision": defaults.precision,
            "stats": None,  # a FeatureStats for the layer; None: cached statistics (get_stats)
            "stats_samples": None,  # None: feature_stats.app_samples (IBA_STATS_SAMPLES, else a default)
        }

    def bottleneck_settings(self) -> BottleneckSettings:
        """The Per-Sample Bottleneck's settings from this method's; a UserError naming the range of a bad one."""
        s = self.settings
        names = ("beta_k", "steps", "batch", "lr", "sigma")
        try:  # plain numbers (settings may come from JSON or numpy)
            numbers = dict(zip(names, (float(s["beta_k"]), int(s["steps"]), int(s["batch"]), float(s["lr"]),
                                       float(s["sigma"]))))
        except (TypeError, ValueError, OverflowError):  # NaN steps, a word: BottleneckSettings names which
            numbers = {k: s[k] for k in names}
        return BottleneckSettings(**numbers, seed=s["seed"], read_point=s["read_point"],
                                  inactive_threshold=s["inactive_threshold"], precision=s["precision"])

    def available_for(self, network) -> str | None:
        if spec_of(network) is None:
            return "the Per-Sample Bottleneck needs a network with named layers (iba_core.networks)."
        return None

    def layer(self, network) -> str:
        return self.settings["layer"] or network.spec.default_layer

    def _compute(self, network, x: torch.Tensor, target: int):
        from ..feature_stats import app_samples, get_stats

        s = self.settings
        layer = network.spec.check_layer(self.layer(network))
        stats = s["stats"]
        if stats is None:
            # a model card's own image folder where it names one (in-domain statistics), else the sample photos
            images = getattr(network.spec, "stats_images", None)
            stats = get_stats(network, layer, images=images, n=int(s["stats_samples"] or app_samples(network, images)))
        settings = self.bottleneck_settings()
        result = PerSampleBottleneck.for_network(network, layer, stats.to(network.device), settings).attribute(x, target)
        extra = {
            "layer": layer,
            "total_bits": result.total_bits,
            "p_without": result.p_without,
            "p_with": result.p_with,
            "stats_samples": stats.n,
            "precision": result.precision,
            "path": result.path,  # stages, fx (a traced cut) or hook (the whole network every step)
            "unlocated_bits": result.unlocated_bits,  # e.g. a ViT's class token: in total_bits, not on the map
        }
        return result.heatmap, extra


class ReadoutMethod(Method):
    """The Readout Bottleneck (paper §3.3) from a trained checkpoint; bits per pixel."""

    key = "readout"
    name = "Readout Bottleneck"
    signed = False
    unit = "bits/pixel"
    cost = "fast"
    sanity_checkable = False  # a readout explains only the weights it was trained on
    description = "Bits per pixel that pass the bottleneck a trained readout network predicts in one pass (§3.3)."
    explains_logit = False  # p(target) follows the network's head (`heads.py`)

    @classmethod
    def default_settings(cls) -> dict:
        return {"checkpoint": None}  # None: the checkpoint shipped for the network

    def checkpoint(self, network) -> str | os.PathLike | None:
        from ..readout import default_checkpoint

        return self.settings["checkpoint"] or default_checkpoint(network.key)

    def available_for(self, network) -> str | None:
        if spec_of(network) is None:
            return "the Readout Bottleneck needs a network with named layers (iba_core.networks)."
        if self.checkpoint(network) is None:
            return f"no readout checkpoint was trained for {network.spec.title} yet; one is trained from a folder of its images."
        return None

    def attribute(self, network, x: torch.Tensor, target: int):
        """As every method's, but a missing checkpoint says how to train one (in each front end's words)."""
        if spec_of(network) is not None and self.checkpoint(network) is None:
            from ..readout.checkpoints import no_checkpoint_error

            raise no_checkpoint_error(network)
        return super().attribute(network, x, target)

    def _compute(self, network, x: torch.Tensor, target: int):
        from ..readout import cached_readout

        return cached_readout(network, self.checkpoint(network)).heatmap(x)
