"""Pattern estimation: Kindermans et al.'s two-component estimator over a supported network's layers, from
images, kept on disk through `iba_core.cache` and in the network's memo.

The estimator
-------------
For every pattern layer, y = wᵀx + b per output neuron, the pattern a (shaped like the weights) is the
direction in input space along which the neuron's signal varies, over the samples in the regime in which
the rectifier after it passes its input on:

    a₊ = (E₊[x y] − E₊[x] E₊[y]) / (wᵀ E₊[x y] − wᵀ E₊[x] E₊[y])         E₊: mean over samples in the regime

i.e. a₊ = Cov₊(x, y) / Var₊(y) (so wᵀa₊ = 1); x is the layer's input (a patch, for a convolution: each
spatial position of each image is a sample, padded as the layer's own forward pads). The regime is
"passes linearly": y > 0 for a ReLU, 0 < y < 6 for a ReLU6; a layer whose output reaches no rectifier
before the next pattern layer, or two different ones, gets the linear estimator S_a (all samples). A
neuron with fewer than two samples in its regime, or no variance there (dead, or constant), gets 0.
With BatchNorms after the layer, y is their output and the folded weights s·w normalise the pattern
(the package's docstring says why that needs no folding).

Patterns: estimated, cached, rough
----------------------------------
Patterns are estimated from an image folder (setting `images`) or, without one, from augmented crops of
the offline sample photos; the latter are marked *rough* (as are fewer than `RECOMMENDED_SAMPLES`
images), like feature statistics. Kindermans et al. trained theirs on ImageNet (the IBA paper used
those for VGG-16); `samples` = 256 images by default keeps the first run to minutes (2 CPU cores shared with
other jobs: VGG-16 about 1.7 s per 224-px image, ~7 min, and the cache file is as large as the weights, 553 MB;
ResNet-50 about 1.7 s per image, 102 MB; the offline EfficientNet-Lite0 about 0.5 s per image, 127 s for the 256
crops, 18 MB, 1.2 GB peak memory for the whole `compare` run) — point to a folder of natural images and raise
`samples` for better ones.
Each conv layer sees every spatial position of every image as a sample; a linear layer sees one sample per
image, so 256 images give rough patterns for VGG-16's 25088-input fc6 in particular. Memory: per pattern
layer two weight-shaped sums (input patch × output channels: Σ x y and Σ x per output neuron in its regime; a
depthwise convolution's patches are per channel) and a few numbers per output neuron — twice the weights —
besides one batch's activations; no covariance matrix of the patches is formed.
They are cached on disk (`cache_dir()/patterns`, through `iba_core.cache`: safe file names for `card:` and
`torchvision:` keys, atomic writes, a checksum) with their identity — network key, weights id, the source
(folder path or offline photos, sample count), estimator version and layer names — which is checked on
load; a damaged or foreign file is warned about and estimated again. They are kept in the network's memo
for the session. Tests and callers can pass `patterns` (a `Patterns` or a dict layer name → tensor) to
skip estimation.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from ...cache import cache_file, load_arrays, save_arrays
from ...errors import MissingFileError, UserError
from ...images import MIN_SIDE
from ...model_state import frozen_eval
from ...network_cache import cache_of
from ...progress import ProgressFn
from ..base import device_of
from .graph import PatternGraph, PatternLayer, pattern_graph
from .layer_kinds import PASS_CONDITIONS, weight_sums
from .runner import GraphRunner

#: Bumped when the estimator changes, so cached patterns of an older estimator are not reused.
ESTIMATOR_VERSION = "two-component-v1"
#: Images behind the patterns by default (minutes on a CPU; see the module docstring).
DEFAULT_SAMPLES = 256


@dataclass
class Patterns:
    """Signal patterns a₊ per convolution / linear layer (shaped like its weights), with provenance."""

    tensors: dict[str, torch.Tensor]
    n: int
    model: str = ""
    weights: str = ""
    source: str = ""
    skipped: int = 0
    estimator: str = ESTIMATOR_VERSION
    #: What was asked for (`source_key`: folder or offline photos, sample count): part of the cache identity.
    source_key: str = ""

    @property
    def is_rough(self) -> bool:
        """True for the offline sample photos, or fewer than RECOMMENDED_SAMPLES images."""
        from ...settings import RECOMMENDED_SAMPLES

        return self.n < RECOMMENDED_SAMPLES or not self.source.startswith("folder")

    def describe(self) -> str:
        text = f"patterns from {self.n} images ({self.source or 'unknown source'})"
        if self.skipped:
            text += f", {self.skipped} unreadable or unusable files skipped (another channel count, or under {MIN_SIDE} px)"
        if self.is_rough:
            text += "; rough — estimate them from a folder of natural images for better ones"
        return text

    def misfit(self, graph: PatternGraph) -> str | None:
        """Why the patterns do not fit `graph` (one per layer, shaped like its weights), or None."""
        for name, weight in graph.weights().items():
            got = self.tensors.get(name)
            if got is None:
                return f"The patterns have none for layer {name!r}; they belong to another network."
            if tuple(got.shape) != tuple(weight.shape):
                return (f"The pattern for layer {name!r} is shaped {tuple(got.shape)}, its weights "
                        f"{tuple(weight.shape)}; the patterns belong to another network.")
        return None

    def check_fits(self, graph: PatternGraph) -> None:
        """UserError unless there is one pattern per layer of `graph`, shaped like its weights."""
        reason = self.misfit(graph)
        if reason:
            raise UserError(reason)

    def identity(self) -> dict:
        """What the patterns were made for: compared with what a caller expects when they are loaded."""
        return {"network": self.model, "weights": self.weights, "source_key": self.source_key,
                "estimator": self.estimator, "layers": list(self.tensors)}

    def save(self, path: str | os.PathLike) -> Path:
        """Write the patterns and their identity through `iba_core.cache` (atomic, checksummed; uncompressed:
        float patterns barely compress, and VGG-16's are as large as its weights)."""
        path = Path(path)
        arrays = {f"p{i}": t.detach().cpu().numpy().astype(np.float32) for i, t in enumerate(self.tensors.values())}
        meta = {**self.identity(), "n": self.n, "skipped": self.skipped, "source": self.source}
        save_arrays(path, arrays, meta, compress=False)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, expect: dict | None = None,
             graph: PatternGraph | None = None) -> "Patterns | None":
        """Patterns saved by `save`, or None when the file is missing, damaged, made for another identity
        than `expect`, or does not fit `graph` (all but missing are warned about, and the file removed)."""

        def check(arrays: dict, meta: dict) -> str | None:
            try:
                patterns = cls._from_file(arrays, meta)
            except (KeyError, TypeError, ValueError) as err:
                return f"inconsistent contents: {err}"
            return patterns.misfit(graph) if graph is not None else None

        loaded = load_arrays(path, expect=expect, check=check)
        return None if loaded is None else cls._from_file(*loaded)

    @classmethod
    def _from_file(cls, arrays: dict[str, np.ndarray], meta: dict) -> "Patterns":
        names = [str(name) for name in meta["layers"]]
        if len(names) != len(arrays):
            raise ValueError(f"{len(arrays)} arrays for {len(names)} layers")
        tensors = {name: torch.from_numpy(np.array(arrays[f"p{i}"])) for i, name in enumerate(names)}
        n = int(meta["n"])
        if n <= 0 or not all(torch.isfinite(t).all() for t in tensors.values()):
            raise ValueError("no images, or patterns that are not finite")
        return cls(tensors, n, str(meta["network"]), str(meta["weights"]), str(meta["source"]),
                   int(meta["skipped"]), str(meta["estimator"]), str(meta["source_key"]))


class _Moments:
    """Sums over the samples in one layer's regime, per output neuron, for Cov(x, y) and Var(y).

    y is shifted by a per-neuron constant (its mean in the first batch) so that E[x y] − E[x] E[y] does not
    cancel catastrophically; covariances do not change under the shift.
    """

    def __init__(self, layer: PatternLayer):
        self.layer, self.module = layer, layer.module
        self.n = self.sy = self.syy = self.shift = None
        self.sx = self.sxy = None

    def update(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None) -> None:
        """x: the layer's input; y: its (BatchNorm'd) output; mask: the regime, shaped like y (None: all)."""
        m = self.module
        conv = type(m) is not nn.Linear
        if not conv and y.dim() != 2:  # a linear layer on (N, …, features): every position is a sample
            if self.layer.batchnorms:
                raise ValueError(f"{self.layer.name}: a BatchNorm after a linear layer on {y.dim()}-d activations "
                                 "normalises another axis than its features; PatternAttribution does not support it.")
            x, y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
            mask = None if mask is None else mask.reshape(y.shape)
        dims = (0, 2, 3) if conv else (0,)
        mask = torch.ones_like(y) if mask is None else mask.to(y.dtype)
        count = mask.sum(dims).double()
        if self.shift is None:
            self.shift = ((y * mask).sum(dims).double() / count.clamp_min(1)).to(y.dtype)
        view = (1, -1, 1, 1) if conv else (1, -1)
        yc = (y - self.shift.view(view)) * mask
        sx, sxy = weight_sums(m, x, [mask, yc])
        stats = (count, yc.sum(dims).double(), (yc * yc).sum(dims).double())
        if self.n is None:
            self.n, self.sy, self.syy = stats
            self.sx, self.sxy = sx.float(), sxy.float()
        else:
            self.n, self.sy, self.syy = self.n + stats[0], self.sy + stats[1], self.syy + stats[2]
            self.sx += sx
            self.sxy += sxy

    def pattern(self) -> torch.Tensor:
        w = self.module.weight.detach()
        if self.n is None:
            return torch.zeros_like(w)
        shape = (-1,) + (1,) * (w.dim() - 1)
        n = self.n.clamp_min(1)
        ey = (self.sy / n).float().view(shape)
        cov = self.sxy / n.float().view(shape) - (self.sx / n.float().view(shape)) * ey
        scale = self.layer.scale()
        w_eff = w if scale is None else w * scale.to(w.device, w.dtype).view(shape)  # the folded layer's weights
        denom = (w_eff * cov).flatten(1).sum(1).double()  # (s·w)ᵀ Cov(x, y) = Var(y)
        valid = (self.n >= 2) & (denom > 0) & torch.isfinite(denom)
        if valid.any():
            valid &= denom > 1e-10 * denom[valid].max()
        safe = torch.where(valid, denom, torch.ones_like(denom)).float().view(shape)
        pattern = torch.where(valid.view(shape), cov / safe, torch.zeros_like(cov))
        return pattern.to(w.dtype)


def estimate_patterns(
    network,
    batches: Iterable[torch.Tensor],
    *,
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[dict[str, torch.Tensor], int]:
    """Patterns for every pattern layer of a supported `network` from input batches: (name → pattern, images)."""
    graph = pattern_graph(network)
    device = device_of(network)
    moments = {name: _Moments(layer) for name, layer in graph.layers.items()}
    pending: dict[str, list] = {}  # layer name → [x, y] until its regime is known

    def pattern_call(target, module, x):
        y = module(x)
        pending[target] = [x, y]
        return y

    watch: dict[str, list[Callable]] = {}
    for name, layer in graph.layers.items():
        def store_y(value, name=name):
            pending[name][1] = value

        def finish(value, name=name, layer=layer):
            x, y = pending.pop(name)
            mask = None
            if layer.rectified:
                mask = PASS_CONDITIONS[layer.regime](value)
                if mask.shape != y.shape:
                    mask = mask.reshape(y.shape)
            moments[name].update(x, y, mask)

        if layer.y_node != layer.node:
            watch.setdefault(layer.y_node, []).append(store_y)
        watch.setdefault(layer.mask_node or layer.y_node, []).append(finish)

    seen = 0
    model = network.model
    with frozen_eval(model), torch.no_grad():
        runner = GraphRunner(graph, pattern_call, watch)
        for batch in batches:
            runner.run(batch.to(device=device, dtype=torch.float32))
            pending.clear()
            seen += batch.shape[0]
            if progress is not None:
                progress(seen, total, "images")
    if seen == 0:
        raise UserError("No images to estimate patterns from.")
    patterns = {name: mom.pattern().cpu() for name, mom in moments.items()}
    return patterns, seen


def _preprocess_of(network):
    pre = getattr(network, "preprocess", None)
    if pre is None:
        from ...networks.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess

        pre = Preprocess(IMAGENET_MEAN, IMAGENET_STD)
    return pre


def compute_patterns(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int = DEFAULT_SAMPLES,
    batch_size: int = 8,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> Patterns:
    """Estimate patterns for a supported `network` from an image folder or the offline sample photos."""
    from ...image_sources import FolderBatches, sample_photo_batches

    preprocess = _preprocess_of(network)
    skipped = 0
    if images is not None:
        from ...images import find_images

        files = find_images(images)[:n]
        if not files:
            raise MissingFileError(f"No images (jpg, png, …) found below {images}.")
        batches = FolderBatches(files, preprocess, batch_size)
        try:
            tensors, count = estimate_patterns(network, batches, progress=progress, total=len(files))
        except UserError as err:  # no image read: said as the folder's problem
            if batches.skipped == len(files):
                raise UserError(f"None of the {len(files)} files below {images} could be read as an image.") from err
            raise
        source, skipped = f"folder {Path(images).expanduser().resolve()}", batches.skipped
    else:
        batches = sample_photo_batches(preprocess, n, batch_size, seed)
        tensors, count = estimate_patterns(network, batches, progress=progress, total=n)
        source = "augmented crops of the offline sample photos"
    return Patterns(tensors, count, getattr(network, "key", ""), getattr(network, "weights_id", ""), source, skipped,
                    source_key=source_key(images, n))


def source_key(images: str | os.PathLike | None, n: int) -> str:
    """Where the patterns' images come from, and how many were asked for: "folder:PATH:N" or "samples:N"."""
    return f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"samples:{n}"


def patterns_cache_path(model: str, weights: str, source_key: str) -> Path:
    """Cache file keyed by network, weights, the source (folder or offline photos, sample count) and estimator."""
    return cache_file("patterns", model, weights, source_key, ESTIMATOR_VERSION, suffix=".npz")


def get_patterns(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int = DEFAULT_SAMPLES,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> Patterns:
    """Patterns for (network, weights, source): from the network's memo, the disk cache, or estimated and saved.

    A damaged or ill-fitting cache file is warned about and re-estimated rather than raised. Networks without
    a key and weights id (bare wrappers of an nn.Module) are estimated every time and not cached on disk.
    """
    key = source_key(images, n)
    memo = cache_of(network)
    graph = pattern_graph(network)
    if memo is not None and not refresh and key in memo.patterns:
        return memo.patterns[key]
    model, weights = getattr(network, "key", None), getattr(network, "weights_id", None)
    path = patterns_cache_path(model, weights, key) if model and weights else None
    patterns = None
    if path is not None and not refresh:
        expect = {"network": model, "weights": weights, "source_key": key, "estimator": ESTIMATOR_VERSION,
                  "layers": graph.names}
        patterns = Patterns.load(path, expect=expect, graph=graph)
    if patterns is None:
        patterns = compute_patterns(network, images=images, n=n, progress=progress)
        if path is not None:
            try:
                patterns.save(path)
            except OSError:
                pass  # a read-only cache must not stop the user from getting a result
    if memo is not None:
        memo.patterns[key] = patterns
    return patterns
