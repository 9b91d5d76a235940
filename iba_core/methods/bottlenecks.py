"""The bottlenecks behind the method interface: Per-Sample (`iba_1`, `iba_10`, `iba_100`), CoIBA (`coiba`), M2IB
(`m2ib`) and Readout.

Per-Sample (paper §3.2): β = β·k / k with k = h·w·c of the layer (paper §4.1: β = 1/k, 10/k, 100/k). The
layer defaults to the network's default layer; statistics follow the one policy of every front end
(`feature_stats.stats_for_run`: a folder, else the cached ones of the offline photos with enough samples;
IBA_STATS_SAMPLES or a default) unless given. Networks that can be split run the prefix once and the suffix per
step; any other network runs through a forward hook. A batch of images is fitted together, one bottleneck each.

Readout (paper §3.3): a trained readout network predicts the mask in one pass; its checkpoint is the
shipped one for the network unless given. λ does not depend on the target class (the readout predicts
it from the image and the logits, as in the paper).
"""
from __future__ import annotations

import os

import numpy as np
import torch

from ..coiba import CoIBABottleneck, CoIBASettings, branch_range, default_range, parse_range, placement_of
from ..results import range_label
from ..coiba import layer_range as coiba_layer_range
from ..feature_stats import FeatureStats, stats_for_layers
from ..per_sample import AttributionResult, BottleneckSettings, PerSampleBottleneck, StepCallback
from ..progress import ProgressFn
from .base import Method, key_number, spec_of


class BottleneckMethod(Method):
    """The one door to the bottleneck family: every front end (the Per-Sample page's live run, the CLI, the β × layer
    grid, Compare, Evaluate, the metrics runner, folder runs) gets its bottleneck here — `bottleneck(network)`, or a
    method from a settings object by `bottleneck_method` — and none builds a bottleneck class itself.

    A subclass says which layers it reads (`resolve`) and how it builds the bottleneck (`_build`); the statistics of
    one layer or a range come through one function (`feature_stats.stats_for_layers`), given ones first (the
    `stats` setting). A live view passes an observer: `bottleneck(network).attribute(x, target, callback)`."""

    signed = False
    unit = "bits/pixel"
    cost = "slow"
    needs_stats = True
    explains_logit = False  # its loss and p(target) follow the network's head (`heads.py`)
    batched = True  # one bottleneck per image, fitted together (`PerSampleBottleneck.attribute_batch`)
    takes_label_sets = False  # its loss reads the head for one class

    def forward_passes(self, network, height: int, width: int) -> int:
        """A forward and a backward pass of each noisy copy at every step (steps × batch × 2), and the clean
        image's forward pass; the feature statistics, estimated once per layer, are capped on their own."""
        settings = self.settings_object()
        return 2 * settings.steps * settings.batch + 1

    def resolve(self, network) -> tuple[object, list[str]]:
        """(the network the bottleneck runs on — `network` or a view of it listing more layers —, its layers),
        worked out once per network (`_resolve`) and kept: every batch and every front end's question asks it."""
        found = getattr(self, "_resolved", None)
        if found is None or found[0] is not network:
            found = self._resolved = (network, self._resolve(network))
        return found[1]

    def _resolve(self, network) -> tuple[object, list[str]]:
        raise NotImplementedError

    def settings_object(self) -> BottleneckSettings:
        """The bottleneck's settings from this method's (checked: a UserError names the range of a bad one)."""
        raise NotImplementedError

    def bottleneck_layers(self, network) -> list[str]:
        return list(self.resolve(network)[1])

    def _build(self, view, layers: list[str], stats: dict[str, FeatureStats]) -> PerSampleBottleneck:
        raise NotImplementedError

    def _given_stats(self, layers: list[str]) -> dict[str, FeatureStats]:
        """The statistics the `stats` setting gives, by layer ({layer: FeatureStats}, or one FeatureStats: for its
        layer when that is one of `layers`, else the first)."""
        given = self.settings.get("stats")
        if given is None:
            return {}
        if not isinstance(given, dict):
            layer = getattr(given, "layer", None)
            given = {layer if layer in layers else layers[0]: given}
        return {layer: st for layer, st in given.items() if layer in layers}

    def statistics(self, network, progress: ProgressFn | None = None) -> dict[str, FeatureStats]:
        """Every layer's statistics by the one policy (`feature_stats.stats_for_layers`: given, cached or shipped
        first, the missing ones estimated in one pass with `progress`), on the network's device."""
        view, layers = self.resolve(network)
        found = getattr(self, "_found", None)
        if found is not None and found[0] is network and found[1] == layers:
            return found[2]
        stats = self._given_stats(layers)
        missing = [layer for layer in layers if layer not in stats]
        if missing:
            s = self.settings
            stats.update(stats_for_layers(view, missing, images=s["stats_images"], n=s["stats_samples"],
                                          progress=progress))
        stats = {layer: stats[layer].to(network.device) for layer in layers}
        self._found = (network, layers, stats)  # kept with the method: `bottleneck` builds from them
        return stats

    def bottleneck(self, network, progress: ProgressFn | None = None) -> PerSampleBottleneck:
        """The bottleneck on `network`, built once per network and layers and kept (statistics estimated first
        where missing, with `progress`). Its `attribute(x, target, callback)` reports every step to `callback`."""
        view, layers = self.resolve(network)
        kept = getattr(self, "_kept", None)
        if kept is not None and kept[0] is network and kept[1] == layers:
            return kept[2]
        bottleneck = self._build(view, layers, self.statistics(network, progress) if self.needs_stats else {})
        self._kept = (network, layers, bottleneck)
        return bottleneck

    def prepare(self, network, progress: ProgressFn | None = None) -> None:
        """The bottleneck, built (its statistics estimated where missing, with `progress`): a problem there stops a
        folder run before any image. Kept for the next call on the same network."""
        self.bottleneck(network, progress)

    def run(self, network, x: torch.Tensor, target: int | None = None,
            callback: StepCallback | None = None) -> AttributionResult:
        """One image's whole result (heatmap, history, p(target), bits) with every step reported to `callback`: the
        live views' call. `attribute` gives the method interface's `AttributionMap` instead."""
        return self.bottleneck(network).attribute(x, target, callback)

    def _compute_batch(self, network, x: torch.Tensor, targets: list[int]):
        bottleneck = self.bottleneck(network)
        layers = self.bottleneck_layers(network)
        results = bottleneck.attribute_batch(x, targets)
        return [(r.heatmap, {**self._extra(network, layers), **{
            "total_bits": r.total_bits,
            "p_without": r.p_without,
            "p_with": r.p_with,
            "stats_samples": bottleneck.stats.n,
            "precision": r.precision,
            "path": r.path,  # stages, fx (a traced cut) or hook (the whole network every step)
            "unlocated_bits": r.unlocated_bits,  # e.g. a ViT's class token: in total_bits, not on the map
        }}) for r in results]

    def _extra(self, network, layers: list[str]) -> dict:
        """What a map's extras say of where the bottleneck sat."""
        return {"layer": layers[0]}


class PerSampleIBA(BottleneckMethod):

    def __init__(self, beta_k: float | None = None, **settings):
        super().__init__(**settings if beta_k is None else {**settings, "beta_k": beta_k})
        beta_k = self.bottleneck_settings().beta_k  # checked now: a bad value fails before any network loads
        label = f"{beta_k:g}"
        self.key = f"iba_{key_number(beta_k)}"
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
            "prior": defaults.prior,  # "estimated" (the paper's), "standard_normal" (M2IB's: no statistics)
            "stats": None,  # a FeatureStats for the layer; None: by the one policy (feature_stats.stats_for_run)
            "stats_images": None,  # the statistics' image folder; None: the model card's, else the offline photos
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
                                  inactive_threshold=s["inactive_threshold"], precision=s["precision"],
                                  prior=s["prior"])

    def available_for(self, network) -> str | None:
        if spec_of(network) is None:
            return "the Per-Sample Bottleneck needs a network with named layers (iba_core.networks)."
        return None

    def layer(self, network) -> str:
        return self.settings["layer"] or network.spec.default_layer

    def settings_identity(self, network) -> dict:
        """The settings with the layer resolved, and statistics given as an object described (what they are)."""
        settings = dict(self.settings)
        settings["layer"] = network.spec.check_layer(self.layer(network))
        stats = settings["stats"]
        if stats is not None:
            settings["stats"] = {"n": getattr(stats, "n", None), "layer": getattr(stats, "layer", None),
                                 "source": getattr(stats, "source", None)}
        return settings

    def _resolve(self, network) -> tuple[object, list[str]]:
        return network, [network.spec.check_layer(self.layer(network))]

    def settings_object(self) -> BottleneckSettings:
        return self.bottleneck_settings()

    def _build(self, view, layers: list[str], stats: dict[str, FeatureStats]) -> PerSampleBottleneck:
        return PerSampleBottleneck.for_network(view, layers[0], stats.get(layers[0]), self.bottleneck_settings())


class M2IB(PerSampleIBA):
    """M2IB (Wang et al., NeurIPS 2023) as its authors run it (YingWANGG/M2IB at ce4d7a0): the Per-Sample
    Bottleneck with

    - β·k = 0.1: their β = 0.1 on the MEAN KL (`eval.py:79,82` `vbeta`/`tbeta` 0.1; `scripts/iba.py:190-192`
      `beta * buffer_capacity.mean() - cosine`), β·k 0.1 here (β = β·k / k on the summed KL);
    - a standard-normal prior: ε ~ N(0, 1) on the raw features and the KL against N(0, 1) (`scripts/iba.py:105-113`;
      the statistics they build are never read), so no statistics are estimated;
    - no smoothing (their code has none) and the read point of the last forward pass (`iba.py:164,170` return the
      capacity of the 10th pass, before the last update);
    - 10 steps, lr 1 (`methods.py:39,46`), 10 noisy copies (`iba.py:131`), α = 5 (`iba.py:93`);
    - the output of block 9 of ViT-B/32's 12 (`eval.py:81` `--vlayer 9`, the residual stream after the block,
      `methods.py:20-28`), and the same depth ratio on any other transformer (`clip_models.default_layer_index`);
      a network without transformer blocks keeps its default layer.

    The loss's fitting term follows the network's head (`heads.target_nll`): for a CLIP model −cos(image, prompt),
    theirs; on a classifier the cross-entropy (this project's extension). Differences: M2IB's map is min-max
    normalised for display; here it stays in bits."""

    def __init__(self, **settings):
        super().__init__(**settings)
        preset = self.default_settings()
        names = ("beta_k", "sigma", "read_point", "prior", "layer")  # what makes it M2IB (steps: as iba's keys)
        if all(self.settings[name] == preset[name] for name in names):
            self.key = "m2ib"
        else:
            self.key = f"m2ib_{key_number(float(self.settings['beta_k']))}"
        label = f"{float(self.settings['beta_k']):g}"
        self.name = f"M2IB β={label}/k"
        self.description = (f"Bits per pixel that pass a bottleneck with a standard-normal prior, fitted with β = "
                            f"{label}/k (M2IB, Wang et al. 2023).")

    @classmethod
    def default_settings(cls) -> dict:
        return {**super().default_settings(), "beta_k": 0.1, "sigma": 0.0, "read_point": "last_step",
                "prior": "standard_normal"}

    needs_stats = False  # the standard-normal prior: nothing to estimate

    def layer(self, network) -> str:
        """The given layer, else M2IB's depth: block 9 of 12 (`clip_models.default_layer_index`), else the
        network's default layer."""
        if self.settings["layer"]:
            return self.settings["layer"]
        from ..networks.clip_models import default_layer_index

        blocks = network.blocks()
        return blocks[default_layer_index(len(blocks))] if blocks else network.spec.default_layer


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

    def settings_identity(self, network) -> dict:
        """The settings with the checkpoint by its file name and a hash of its contents."""
        from pathlib import Path

        from ..networks.state_files import weights_hash

        checkpoint = self.checkpoint(network)
        if checkpoint is not None:  # the file streamed through the hash, not read whole
            checkpoint = {"file": Path(checkpoint).name, "sha256": weights_hash(checkpoint, 16)}
        return {**self.settings, "checkpoint": checkpoint}

    def available_for(self, network) -> str | None:
        if spec_of(network) is None:
            return "the Readout Bottleneck needs a network with named layers (iba_core.networks)."
        if self.checkpoint(network) is None:
            return f"no readout checkpoint was trained for {network.spec.title} yet; one is trained from a folder of its images."
        return None

    def layers_read(self, network) -> list[str]:
        """The bottleneck layer its checkpoint was trained at ([] where it has none to load)."""
        if self.available_for(network) is not None:
            return []
        return [self._readout(network).config.layer]

    batched = True  # the readout predicts a batch's maps in one pass
    takes_label_sets = False  # its λ does not depend on the target at all

    def prepare(self, network) -> None:
        """The readout, loaded: a missing checkpoint says how to train one (in each front end's words), an
        unsuitable one why, before any image."""
        self._readout(network)

    def _readout(self, network):
        from ..readout import cached_readout
        from ..readout.checkpoints import no_checkpoint_error

        checkpoint = self.checkpoint(network)
        if checkpoint is None:
            raise no_checkpoint_error(network)
        return cached_readout(network, checkpoint)

    def attribute(self, network, x: torch.Tensor, target):
        """As every method's, but a missing checkpoint says how to train one (in each front end's words)."""
        if spec_of(network) is not None:
            self.prepare(network)
        return super().attribute(network, x, target)

    def attribute_batch(self, network, x: torch.Tensor, targets):
        if spec_of(network) is not None:
            self.prepare(network)
        return super().attribute_batch(network, x, targets)

    def _compute_batch(self, network, x: torch.Tensor, targets: list[int]):
        maps = self._readout(network).heatmaps(x).float().cpu().numpy()
        # p_with would need a second, noisy pass: not measured here (the folder table shows NaN)
        return [(m, {"total_bits": float(m.sum(dtype=np.float64)), "unlocated_bits": 0.0, "precision": "fp32"})
                for m in maps]


class CoIBAMethod(BottleneckMethod):
    """CoIBA (Hong et al., CVPR 2025): one mask shared by bottlenecks at every layer of a range (`coiba.py`);
    bits per pixel of the range's first layer. The preset `coiba` is the authors' setting (`coiba.CoIBASettings`:
    β·k 1, no smoothing, the last forward pass's read point, their branch placement on a transformer with a class
    token); on other networks, bottlenecks on the layer outputs: this project's extension."""

    def __init__(self, **settings):
        super().__init__(**settings)
        s = self.coiba_settings()  # checked now: a bad value fails before any network loads
        self._range = self._given_range()
        label = f"{s.beta_k:g}"
        span = "" if self._range is None else ", " + range_label(*self._range)
        where = "" if s.placement == "auto" else f", {s.placement}"
        self.name = f"CoIBA β={label}/k{where}{span}"
        # The key names what differs from the preset (as `iba_10` names β): "coiba" for the authors' setting
        preset = CoIBASettings()
        self.key = "coiba"
        if s.beta_k != preset.beta_k or s.placement != preset.placement or self._range is not None \
                or self.settings["layer"]:
            self.key = f"coiba_{key_number(s.beta_k)}"
            if s.placement != preset.placement:
                self.key += f"_{s.placement}"
            if self._range is not None:
                self.key += f"__{self._range[0]}-{self._range[1]}"
            elif self.settings["layer"]:
                self.key += f"__{self.settings['layer']}"
        self.description = (f"Bits per pixel that pass one mask shared by bottlenecks at every layer of a range, "
                            f"fitted with β = {label}/k (CoIBA, Hong et al. 2025).")

    @classmethod
    def default_settings(cls) -> dict:
        defaults = CoIBASettings()
        return {
            "beta_k": defaults.beta_k,
            "layers": None,  # None: the default range (`layer_range`); a (first, last) pair, or "first:last"
            #: Where `layers` is None: the range's first layer (the front ends' layer setting, as the Per-Sample
            #: Bottleneck's `layer`), to the default range's end; None: the network's default layer.
            "layer": None,
            "placement": defaults.placement,  # coiba.PLACEMENTS
            "steps": defaults.steps,
            "batch": defaults.batch,
            "lr": defaults.lr,
            "sigma": defaults.sigma,
            "read_point": defaults.read_point,
            "inactive_threshold": defaults.inactive_threshold,
            "mask": defaults.mask,
            "seed": defaults.seed,
            "precision": defaults.precision,
            #: {layer: FeatureStats}, or one FeatureStats (for its layer, else the range's first); the layers
            #: without by the one policy (`feature_stats.stats_for_layers`)
            "stats": None,
            "stats_images": None,  # the statistics' image folder; None: the model card's, else the offline photos
            "stats_samples": None,  # None: feature_stats.app_samples (IBA_STATS_SAMPLES, else a default)
        }

    def coiba_settings(self) -> CoIBASettings:
        """CoIBA's settings from this method's; a UserError naming the range of a bad one."""
        s = self.settings
        names = ("beta_k", "steps", "batch", "lr", "sigma")
        try:  # plain numbers (settings may come from JSON or numpy)
            numbers = dict(zip(names, (float(s["beta_k"]), int(s["steps"]), int(s["batch"]), float(s["lr"]),
                                       float(s["sigma"]))))
        except (TypeError, ValueError, OverflowError):  # NaN steps, a word: the settings name which
            numbers = {k: s[k] for k in names}
        return CoIBASettings(**numbers, mask=s["mask"], seed=s["seed"], precision=s["precision"],
                             read_point=s["read_point"], placement=s["placement"],
                             inactive_threshold=s["inactive_threshold"])

    def _given_range(self) -> tuple[str, str] | None:
        """The `layers` setting as (first, last); None for the default range."""
        given = self.settings["layers"]
        if given is None:
            return None
        return parse_range(given)

    def placement(self, network) -> tuple[str, str]:
        """(the placement on `network`, a note for the person or ""): `coiba.placement_of`."""
        return placement_of(network, self.settings["placement"])

    def _resolve(self, network) -> tuple[object, list[str]]:
        """(the network the bottlenecks run on, the layers of the range) — the default range unless `layers` names
        one. With the branch placement, the attention-branch inputs of the range's blocks on a view of `network`
        that lists them among its layers (`coiba.branch_range`); else `network` itself."""
        if self.placement(network)[0] == "branch":
            first, last = self._range or (self.settings["layer"], None)
            return branch_range(network, first, last)
        first, last = self._range or default_range(network, self.settings["layer"])
        return network, coiba_layer_range(network, first, last)

    def layer_range(self, network) -> list[str]:
        """The layers of the range on `network` (`resolve`)."""
        return self.resolve(network)[1]

    def available_for(self, network) -> str | None:
        if spec_of(network) is None:
            return "CoIBA needs a network with named layers (iba_core.networks)."
        return None

    def settings_identity(self, network) -> dict:
        """The settings with the range resolved to its layers, and statistics given as objects described."""
        layers = self.layer_range(network)
        given = self._given_stats(layers)
        stats = None if not given else {layer: {"n": getattr(st, "n", None), "source": getattr(st, "source", None)}
                                        for layer, st in given.items()}
        return {**self.settings, "layers": layers, "layer": layers[0], "stats": stats,
                "placement": self.placement(network)[0]}

    def settings_object(self) -> CoIBASettings:
        return self.coiba_settings()

    def _build(self, view, layers: list[str], stats: dict[str, FeatureStats]) -> CoIBABottleneck:
        return CoIBABottleneck.for_network(view, layers, stats, self.coiba_settings())

    def _extra(self, network, layers: list[str]) -> dict:
        return {"layer": layers[0], "layers": layers, "placement": self.placement(network)[0]}
