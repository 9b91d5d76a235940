"""PatternAttribution (Kindermans et al. 2018, "Learning how to explain neural networks: PatternNet and
PatternAttribution") with the two-component signal estimator, for plain ReLU networks such as VGG-16.

What it computes
----------------
For every convolution and fully connected layer, y = wᵀx + b per output neuron, a *pattern* a (shaped
like the layer's weights) is estimated from data: the direction in input space along which the neuron's
signal varies. Kindermans et al.'s two-component estimator S_a+− splits the samples by the ReLU's
regime; PatternAttribution only uses the positive one, because the ReLU blocks the other:

    a₊ = (E₊[x y] − E₊[x] E₊[y]) / (wᵀ E₊[x y] − wᵀ E₊[x] E₊[y])         E₊: mean over samples with y > 0

i.e. a₊ = Cov₊(x, y) / Var₊(y) (so wᵀa₊ = 1). A neuron that no ReLU follows (the logits) passes both
regimes, so it gets their linear estimator S_a: the same formula over all samples. "Followed by a ReLU"
means the next module that is not MaxPool2d, Flatten, Dropout or Identity (which commute with a ReLU or
are the identity in eval mode) is a ReLU. A neuron with fewer than two samples in its regime, or no
variance there (dead, or constant), gets the pattern 0.

The map is a modified backward pass from the target logit (relevance 1 there, like the other methods
here) to the input: every convolution and linear layer propagates with the weights w ⊙ a₊ instead of w
(PatternAttribution); ReLUs and max-pooling gate as in the forward pass (as the gradient does);
average pooling, flattening and dropout (eval mode: identity) pass it on like the gradient. The map is
the input signal summed over colour channels (signed).

Where it runs (the plainness rule)
----------------------------------
The estimator is derived for networks that are a sequence of linear layers and ReLUs. A network counts as
*plain* when its layers can be read as one sequence — the stage list of its spec (`NetworkSpec.stages`,
which reproduces the network by construction) or the model itself if it is an `nn.Sequential` — and every
module in that sequence (nested `nn.Sequential`s unpacked) is exactly one of: Conv2d (zero padding,
numeric padding), Linear, ReLU, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten, Dropout, Identity.
Exact types are checked, so subclasses with their own forward (e.g. EfficientNet's same-padding
convolutions) do not pass. VGG-16 is plain. ResNet-50 (BatchNorm, bottleneck blocks with skip
connections) and EfficientNet-Lite0 (BatchNorm, ReLU6, depthwise blocks with skip connections) are not,
and the method says so; so is any network that is neither a stage list nor an `nn.Sequential` (a derived
spec of a custom module: its forward function is unknown). The IBA paper, too, reports PatternAttribution
only for VGG-16 (§4.1: its implementation "does not support skip connections").

Patterns: estimated, cached, rough
----------------------------------
Patterns are estimated from an image folder (setting `images`) or, without one, from augmented crops of
the offline sample photos; the latter are marked *rough* (as are fewer than `RECOMMENDED_SAMPLES`
images), like feature statistics. Kindermans et al. trained theirs on ImageNet (the IBA paper used
those for VGG-16); `samples` = 256 images by default keeps the first run to minutes (VGG-16 on 2 CPU cores:
about 1.7 s per 224-px image, ~7 min; the cache file is as large as the weights, 553 MB) — point to a
folder of natural images and raise `samples` for better ones. Each conv layer sees every spatial
position of every image as a sample; a linear layer sees one sample per image, so 256 images give
rough patterns for VGG-16's 25088-input fc6 in particular.
They are cached on disk (`cache_dir()/patterns`) keyed by network key, weights id and the source
(folder path or "offline photos", sample count, estimator version), like `stats.get_stats`, and kept in
the network's memo for the session. Tests and callers can pass `patterns` (a `Patterns` or a dict
layer name → tensor) to skip estimation.

Cost: "slow", because the first use estimates patterns (many passes); afterwards one forward and one
backward pass. A randomised network (the sanity check) has a new weights id and needs new patterns —
the IBA paper left PatternAttribution out of the sanity check for that reason (§4.3).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..progress import ProgressFn
from ..stats import FolderBatches
from .base import Method, device_of, spec_of, sum_channels

#: Bumped when the estimator changes, so cached patterns of an older estimator are not reused.
ESTIMATOR_VERSION = "two-component-v1"
DEFAULT_SAMPLES = 256


class NotPlainError(ValueError):
    """The network is not a plain sequence of linear layers, ReLUs and pooling."""


# ---- the plain layer sequence ------------------------------------------------------------------


def _flatten_type():
    from ..networks.spec import Flatten

    return Flatten


_PASS_TYPES = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Dropout, nn.Identity)
#: Between a layer and its ReLU these commute with the ReLU (or are the identity in eval mode).
_TRANSPARENT = (nn.MaxPool2d, nn.Flatten, nn.Dropout, nn.Identity)


def _is_param_layer(m: nn.Module) -> bool:
    return type(m) in (nn.Conv2d, nn.Linear)


def _why_not_plain(m: nn.Module) -> str | None:
    kind = type(m)
    if kind is nn.Conv2d:
        if m.padding_mode != "zeros" or isinstance(m.padding, str):
            return f"Conv2d with padding {m.padding!r} ({m.padding_mode})"
        return None
    if kind in (nn.Linear, nn.ReLU) or kind in _PASS_TYPES or kind is _flatten_type():
        return None
    return kind.__name__


def _unpack(module: nn.Module, out: list[nn.Module]) -> None:
    if type(module) is nn.Sequential:
        for child in module:
            _unpack(child, out)
    else:
        out.append(module)


@dataclass
class PlainChain:
    """A plain network as one sequence of modules; `layers` indexes its convolutions and linear layers."""

    modules: list[nn.Module]
    #: index in `modules` → (name, followed by a ReLU)
    layers: dict[int, tuple[str, bool]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.layers.values()]

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: self.modules[i].weight for i, (name, _) in self.layers.items()}


def plain_chain(network) -> PlainChain:
    """The network as a PlainChain, or NotPlainError saying why it is not plain."""
    model = network.model
    spec = spec_of(network)
    title = getattr(spec, "title", None) or type(model).__name__
    if spec is not None and spec.stages is not None:
        roots = [m for _, m in spec.stages(model)]
    elif isinstance(model, nn.Sequential):
        roots = [model]
    else:
        raise NotPlainError(
            f"PatternAttribution needs a plain sequence of convolution, linear, ReLU and pooling layers; "
            f"{title} is neither a registered stage list nor an nn.Sequential, so its forward function is unknown."
        )
    modules: list[nn.Module] = []
    for root in roots:
        _unpack(root, modules)
    offenders = list(dict.fromkeys(r for r in map(_why_not_plain, modules) if r))
    if offenders:
        raise NotPlainError(
            f"{title} is not a plain sequence of convolution, linear, ReLU and pooling layers (it contains "
            f"{', '.join(offenders)}); PatternAttribution's signal estimator is defined for plain ReLU networks "
            "such as VGG-16 (Kindermans et al. 2018), not for skip connections, BatchNorm or other activations."
        )
    names = {id(m): name for name, m in model.named_modules()}
    chain = PlainChain(modules)
    for i, m in enumerate(modules):
        if _is_param_layer(m):
            chain.layers[i] = (names.get(id(m), f"layer{len(chain.layers)}"), _followed_by_relu(modules, i))
    if not chain.layers:
        raise NotPlainError(f"{title} has no convolution or linear layer to estimate patterns for.")
    return chain


def _followed_by_relu(modules: list[nn.Module], i: int) -> bool:
    for m in modules[i + 1:]:
        if type(m) is nn.ReLU:
            return True
        if not isinstance(m, _TRANSPARENT) or _is_param_layer(m):
            return False
    return False


def _layer_forward(m: nn.Module, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    weight = m.weight if weight is None else weight
    if type(m) is nn.Conv2d:
        return F.conv2d(x, weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
    return F.linear(x, weight, m.bias)


def _other_forward(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    if type(m) is nn.ReLU:
        return F.relu(x)  # never in place: the pre-activation is still needed
    if isinstance(m, (nn.Dropout, nn.Identity)):
        return x
    return m(x)


class _PatternBackward(torch.autograd.Function):
    """Forward: the layer with its own weights. Backward to the input: with the weights w ⊙ a₊."""

    @staticmethod
    def forward(ctx, x, module, backward_weight):
        ctx.module, ctx.input_shape = module, x.shape
        ctx.save_for_backward(backward_weight)
        return _layer_forward(module, x)

    @staticmethod
    def backward(ctx, grad):
        (w,) = ctx.saved_tensors
        m = ctx.module
        if type(m) is nn.Conv2d:
            grad_x = torch.nn.grad.conv2d_input(ctx.input_shape, w, grad, m.stride, m.padding, m.dilation, m.groups)
        else:
            grad_x = grad @ w
        return grad_x, None, None


# ---- patterns ----------------------------------------------------------------------------------


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

    @property
    def is_rough(self) -> bool:
        """True for the offline sample photos, or fewer than RECOMMENDED_SAMPLES images."""
        from ..settings import RECOMMENDED_SAMPLES

        return self.n < RECOMMENDED_SAMPLES or not self.source.startswith("folder")

    def describe(self) -> str:
        text = f"patterns from {self.n} images ({self.source or 'unknown source'})"
        if self.skipped:
            text += f", {self.skipped} unreadable files skipped"
        if self.is_rough:
            text += "; rough — estimate them from a folder of natural images for better ones"
        return text

    def check_fits(self, chain: PlainChain) -> None:
        """ValueError unless there is one pattern per layer of `chain`, shaped like its weights."""
        for name, weight in chain.weights().items():
            got = self.tensors.get(name)
            if got is None:
                raise ValueError(f"The patterns have none for layer {name!r}; they belong to another network.")
            if tuple(got.shape) != tuple(weight.shape):
                raise ValueError(f"The pattern for layer {name!r} is shaped {tuple(got.shape)}, its weights "
                                 f"{tuple(weight.shape)}; the patterns belong to another network.")

    def save(self, path: str | os.PathLike) -> Path:
        """Write an .npz atomically (uncompressed: VGG-16's patterns are as large as its weights)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        names = list(self.tensors)
        arrays = {f"p{i}": self.tensors[n].detach().cpu().numpy().astype(np.float32) for i, n in enumerate(names)}
        np.savez(tmp, names=np.array(names), n=np.int64(self.n), skipped=np.int64(self.skipped),
                 meta=np.array([self.model, self.weights, self.source, self.estimator]), **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Patterns":
        """Read an .npz written by `save`; ValueError if it is corrupt."""
        try:
            with np.load(path, allow_pickle=False) as data:
                names = [str(s) for s in data["names"]]
                tensors = {n: torch.from_numpy(np.array(data[f"p{i}"])) for i, n in enumerate(names)}
                n, skipped = int(data["n"]), int(data["skipped"])
                model, weights, source, estimator = (str(s) for s in data["meta"])
        except Exception as err:
            raise ValueError(f"Corrupt patterns file {path}: {err}") from err
        if n <= 0 or not all(torch.isfinite(t).all() for t in tensors.values()):
            raise ValueError(f"Corrupt patterns file {path}: inconsistent contents")
        return cls(tensors, n, model, weights, source, skipped, estimator)


class _Moments:
    """Sums over the samples in one layer's regime, per output neuron, for Cov(x, y) and Var(y).

    y is shifted by a per-neuron constant (its mean in the first batch) so that E[x y] − E[x] E[y] does not
    cancel catastrophically; covariances do not change under the shift.
    """

    def __init__(self, module: nn.Module, rectified: bool):
        self.module, self.rectified = module, rectified
        self.n = self.sy = self.syy = self.shift = None
        self.sx = self.sxy = None

    def update(self, x: torch.Tensor, y: torch.Tensor) -> None:
        m = self.module
        conv = type(m) is nn.Conv2d
        dims = (0, 2, 3) if conv else (0,)
        mask = (y > 0).to(y.dtype) if self.rectified else torch.ones_like(y)
        count = mask.sum(dims).double()
        if self.shift is None:
            self.shift = ((y * mask).sum(dims).double() / count.clamp_min(1)).to(y.dtype)
        view = (1, -1, 1, 1) if conv else (1, -1)
        yc = (y - self.shift.view(view)) * mask
        if conv:
            sx = torch.nn.grad.conv2d_weight(x, m.weight.shape, mask, m.stride, m.padding, m.dilation, m.groups)
            sxy = torch.nn.grad.conv2d_weight(x, m.weight.shape, yc, m.stride, m.padding, m.dilation, m.groups)
        else:
            sx, sxy = mask.T @ x, yc.T @ x
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
        denom = (w * cov).flatten(1).sum(1).double()  # wᵀ Cov(x, y) = Var(y)
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
    """Patterns a₊ for every layer of a plain `network` from input batches: (name → pattern, images seen)."""
    chain = plain_chain(network)
    device = device_of(network)
    moments = {i: _Moments(chain.modules[i], rectified) for i, (_, rectified) in chain.layers.items()}
    seen = 0
    with torch.inference_mode():
        for batch in batches:
            h = batch.to(device=device, dtype=torch.float32)
            for i, m in enumerate(chain.modules):
                if i in moments:
                    y = _layer_forward(m, h)
                    moments[i].update(h, y)
                    h = y
                else:
                    h = _other_forward(m, h)
            seen += batch.shape[0]
            if progress is not None:
                progress(seen, total, "images")
    if seen == 0:
        raise ValueError("No images to estimate patterns from.")
    patterns = {chain.layers[i][0]: mom.pattern().cpu() for i, mom in moments.items()}
    return patterns, seen


def _preprocess_of(network):
    pre = getattr(network, "preprocess", None)
    if pre is None:
        from ..networks.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess

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
    """Estimate patterns for a plain `network` from an image folder or the offline sample photos."""
    from ..stats import sample_photo_batches

    preprocess = _preprocess_of(network)
    skipped = 0
    if images is not None:
        from ..images import find_images

        files = find_images(images)[:n]
        if not files:
            raise FileNotFoundError(f"No images (jpg, png, …) found below {images}.")
        batches = FolderBatches(files, preprocess, batch_size)
        try:
            tensors, count = estimate_patterns(network, batches, progress=progress, total=len(files))
        except ValueError as err:
            if batches.skipped == len(files):
                raise ValueError(f"None of the {len(files)} files below {images} could be read as an image.") from err
            raise
        source, skipped = f"folder {Path(images).expanduser().resolve()}", batches.skipped
    else:
        batches = sample_photo_batches(preprocess, n, batch_size, seed)
        tensors, count = estimate_patterns(network, batches, progress=progress, total=n)
        source = "augmented crops of the offline sample photos"
    return Patterns(tensors, count, getattr(network, "key", ""), getattr(network, "weights_id", ""), source, skipped)


def patterns_cache_path(model: str, weights: str, source_key: str) -> Path:
    """Cache file keyed by network, weights, and the source (folder or offline photos, sample count, estimator)."""
    from ..settings import cache_dir

    digest = hashlib.sha1(f"{source_key}|{ESTIMATOR_VERSION}".encode()).hexdigest()[:10]
    return cache_dir() / "patterns" / f"{model}__{weights}__{digest}.npz"


def source_key(images: str | os.PathLike | None, n: int) -> str:
    return f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"samples:{n}"


def get_patterns(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int = DEFAULT_SAMPLES,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> Patterns:
    """Patterns for (network, weights, source): from the network's memo, the disk cache, or estimated and saved.

    A corrupt or ill-fitting cache file is re-estimated rather than raised. Networks without a key and
    weights id (bare wrappers of an nn.Module) are estimated every time and not cached on disk.
    """
    key = source_key(images, n)
    memo = getattr(network, "memo", None)
    memo_key = ("patterns", key)
    chain = plain_chain(network)
    if memo is not None and not refresh and memo_key in memo:
        return memo[memo_key]
    model, weights = getattr(network, "key", None), getattr(network, "weights_id", None)
    path = patterns_cache_path(model, weights, key) if model and weights else None
    patterns = None
    if path is not None and path.is_file() and not refresh:
        try:
            patterns = Patterns.load(path)
            patterns.check_fits(chain)
        except ValueError:
            patterns = None  # recompute and overwrite
    if patterns is None:
        patterns = compute_patterns(network, images=images, n=n, progress=progress)
        if path is not None:
            try:
                patterns.save(path)
            except OSError:
                pass  # a read-only cache must not stop the user from getting a result
    if memo is not None:
        memo[memo_key] = patterns
    return patterns


# ---- the method --------------------------------------------------------------------------------


class PatternAttribution(Method):
    key = "pattern_attribution"
    name = "PatternAttribution"
    signed = True
    cost = "slow"
    sanity_checkable = False  # patterns belong to the weights they were estimated on (paper §4.4)
    description = ("Target logit propagated back with weights ⊙ learned signal patterns (two-component estimator), "
                   "summed over channels.")

    @classmethod
    def default_settings(cls) -> dict:
        return {
            "images": None,  # folder of natural images for the patterns; None: the offline photos (rough)
            "samples": DEFAULT_SAMPLES,  # images behind the patterns
            "patterns": None,  # precomputed Patterns (or dict layer name → tensor); None: cached / estimated
        }

    def available_for(self, network) -> str | None:
        try:
            plain_chain(network)
        except NotPlainError as err:
            return str(err)
        return None

    def patterns(self, network) -> Patterns:
        given = self.settings["patterns"]
        if given is None:
            return get_patterns(network, images=self.settings["images"], n=int(self.settings["samples"]))
        if isinstance(given, Patterns):
            return given
        return Patterns({k: torch.as_tensor(v) for k, v in dict(given).items()}, 0, source="given")

    def _compute(self, network, x, target):
        chain = plain_chain(network)
        patterns = self.patterns(network)
        patterns.check_fits(chain)
        device = x.device
        backward = {
            i: (chain.modules[i].weight.detach() * patterns.tensors[name].to(device, chain.modules[i].weight.dtype))
            for i, (name, _) in chain.layers.items()
        }
        h = x.clone().requires_grad_(True)
        with torch.enable_grad():
            out = h
            for i, m in enumerate(chain.modules):
                out = _PatternBackward.apply(out, m, backward[i]) if i in backward else _other_forward(m, out)
            if target >= out.shape[-1]:
                raise ValueError(f"Class index {target} is out of range 0…{out.shape[-1] - 1}.")
            seed = torch.zeros_like(out)
            seed[:, target] = 1.0
            (signal,) = torch.autograd.grad(out, h, grad_outputs=seed)
        extra = {"patterns": patterns.describe(), "patterns_rough": patterns.is_rough, "pattern_images": patterns.n}
        if patterns.source == "given":
            extra = {"patterns": "given by the caller"}
        return sum_channels(signal), extra
