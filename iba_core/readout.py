"""The Readout Bottleneck (paper §3.3, Fig. 2): a small network predicts λ for any image in one go.

First pass (no noise): the analysed network runs once and we collect the feature maps of several
layers and the logits. A *readout network* maps them to α at the bottleneck layer's resolution:

    normalise each map per channel  →  resize bilinearly to (h, w) (logits: broadcast over space)
    →  concatenate  →  1×1 conv → ReLU → 1×1 conv → ReLU → 1×1 conv  →  α

and λ = blur(σ_s, sigmoid(α)) exactly as for the Per-Sample Bottleneck (`bottleneck.lambda_from_alpha`).
Second pass (training only): Z = λR + (1-λ)ε replaces R and the rest of the network runs on Z.
The analysed network is never trained; only the readout network is.

Implementation notes
- The first 1×1 convolution is applied to each map *before* resizing: a 1×1 convolution and a
  per-channel affine normalisation are linear per pixel, and bilinear interpolation is a per-channel
  weighted average whose weights sum to 1, so the order does not change the result (a test checks
  this) — but the expensive part then runs at each map's own, mostly lower, resolution.
- Input normalisation is *per channel*: mean and std of each channel pooled over images and space
  (logits: per class over images), estimated once before training and stored in the checkpoint.
- The noise ε ~ N(μ_R, σ_R²) uses *per-element* statistics of the bottleneck layer (`stats.get_stats`,
  like the Per-Sample Bottleneck); they are stored in the checkpoint too, so a checkpoint is
  self-contained.
- Initialisation: the last convolution's weights are zero and its bias gives α = INIT_ALPHA = 5
  everywhere, so λ ≈ 0.993 and the bottleneck starts transparent, as the Per-Sample one does.
- Range: α = A·tanh(a / A) with A = ALPHA_MAX = 10, so λ ∈ [4.5e-5, 1 - 4.5e-5]: log(1-λ) and the
  KL stay finite for any weights, and the gradient never vanishes abruptly (as a clamp's would).
"""
from __future__ import annotations

import math
import os
import time
import weakref
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .bottleneck import (
    INIT_ALPHA,
    MIN_STD,
    information_map_bits,
    inject_noise,
    kl_per_element,
    lambda_from_alpha,
    resize_preserving_total,
    standardise,
)
from .model_state import frozen_eval
from .per_sample import AttributionResult, BottleneckSettings

#: Name used for the network's output (the logits) in a list of read-out layers.
LOGITS = "fc"

#: Layers read by the readout network, per network; the first entry after the key is the bottleneck
#: layer's own output. ResNet-50 and VGG-16: paper Appendix, Table "Hyperparameters for the Readout
#: Bottleneck". EfficientNet-Lite0 (not in the paper) by analogy with ResNet-50: the bottleneck at
#: block2_2 (last 56×56 block, like conv2_3), then the last block at 28×28 (block3_2 ~ conv3_4), the
#: last at 14×14 (block5_3 ~ conv4_6), the last 7×7 feature map (head ~ conv5_3), and the logits.
READOUT_READS: dict[str, tuple[str, ...]] = {
    "resnet50": ("conv2_3", "conv3_4", "conv4_6", "conv5_3", LOGITS),
    "vgg16": ("conv3_1", "conv4_1", "conv5_1", "conv5_3", LOGITS),
    "efficientnet_lite0": ("block2_2", "block3_2", "block5_3", "head", LOGITS),
}

#: α is kept in [-ALPHA_MAX, ALPHA_MAX] by a tanh scaling (see the module docstring).
ALPHA_MAX = 10.0
#: Widths of the two hidden 1×1 convolutions (the paper does not give them; kept modest so the
#: checkpoint stays small and a heatmap costs little more than one forward pass).
DEFAULT_HIDDEN = (128, 64)

CHECKPOINT_FORMAT = "iba-explorer/readout-bottleneck"
CHECKPOINT_VERSION = 1

#: The shipped checkpoints live here, named readout_<model key>.pt.
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"


class ReadoutCheckpointError(ValueError):
    """A readout checkpoint that is missing, unreadable, or made for another network/weights/layer.

    str(err) is one sentence a user can act on.
    """


# --------------------------------------------------------------------------------------------
# Configuration.


@dataclass(frozen=True)
class ReadoutConfig:
    """Everything that defines a Readout Bottleneck's shape and behaviour (stored in checkpoints)."""

    model: str  # registry key of the analysed network
    weights_id: str  # LoadedModel.weights_id the readout was trained for
    layer: str  # bottleneck layer
    reads: tuple[str, ...]  # read-out layers, LOGITS for the logits
    feature_shape: tuple[int, int, int]  # (C, h, w) of the bottleneck layer at input_size
    read_channels: tuple[int, ...]  # channels of each read-out layer
    input_size: tuple[int, int] = (224, 224)
    hidden: tuple[int, int] = DEFAULT_HIDDEN
    sigma: float = 1.0  # σ_s of the mask smoothing (paper: 1)
    beta_k: float = 10.0  # β·k (paper: β = 10/k)
    init_alpha: float = INIT_ALPHA
    alpha_max: float = ALPHA_MAX
    min_std: float = MIN_STD

    @property
    def k(self) -> int:
        """k = c·h·w, the number of bottleneck elements (β = beta_k / k)."""
        c, h, w = self.feature_shape
        return c * h * w

    @property
    def beta(self) -> float:
        return self.beta_k / self.k

    def to_dict(self) -> dict:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict) -> "ReadoutConfig":
        known = {f.name for f in fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        return cls(**kwargs)


def default_reads(spec) -> tuple[str, ...]:
    """Read-out layers for a registered network: the paper's where known, else a generic choice.

    Generic: the bottleneck layer, three later layers spread evenly over the rest, and the logits.
    """
    if spec.key in READOUT_READS:
        return READOUT_READS[spec.key]
    layer = spec.readout_layer or spec.default_layer
    later = list(spec.layers[spec.layers.index(layer) + 1 :])
    picks = [later[round(i * (len(later) - 1) / 2)] for i in range(3)] if len(later) >= 3 else later
    return (layer, *dict.fromkeys(picks), LOGITS)


# --------------------------------------------------------------------------------------------
# The analysed network, cut at the read-out layers.


class NetworkPasses:
    """The analysed network as segments ending at the bottleneck and read-out layers.

    Built from `LoadedModel.stages()`, with BatchNorms folded into convolutions per segment (the same
    function, faster). Not an nn.Module on purpose: a ReadoutBottleneck holding it must not register
    the analysed network as its submodule (its parameters would be trained, saved and synced).
    """

    def __init__(self, loaded, layer: str, reads: Sequence[str]):
        from .fast import fold_batchnorms

        stages = loaded.stages()
        index = {name: i for i, (name, _) in enumerate(stages) if name is not None}
        for name in (layer, *reads):
            if name != LOGITS and name not in index:
                raise ReadoutCheckpointError(
                    f"{loaded.spec.title} has no layer {name!r}; layers: {', '.join(loaded.spec.layers)}, "
                    f"and {LOGITS!r} for the logits."
                )
        if layer == LOGITS:
            raise ValueError("The bottleneck cannot sit on the logits.")
        cuts = sorted({index[layer]} | {index[r] for r in reads if r != LOGITS})
        modules = [m for _, m in stages]
        self.segments: list[tuple[str, nn.Module]] = []
        start = 0
        for cut in cuts:
            self.segments.append((stages[cut][0], fold_batchnorms(nn.Sequential(*modules[start : cut + 1]))))
            start = cut + 1
        self.segments.append((LOGITS, fold_batchnorms(nn.Sequential(*modules[start:]))))
        self.layer = layer
        self.split = next(i for i, (name, _) in enumerate(self.segments) if name == layer) + 1
        self.modules = tuple(m for _, m in self.segments)
        self.wanted = set(reads) | {layer}

    def first_pass(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Outputs of the bottleneck layer, the read-out layers and the logits, without noise.

        Captured maps are cloned: a following in-place ReLU (VGG) must not alter them.
        """
        out: dict[str, torch.Tensor] = {}
        h = x
        last = len(self.segments) - 1
        for i, (name, module) in enumerate(self.segments):
            h = module(h)
            if name in self.wanted or name == LOGITS:
                out[name] = h if i == last else h.clone()
        return out

    def suffix(self, z: torch.Tensor) -> torch.Tensor:
        """Logits from the bottleneck layer's (noisy) output onwards."""
        h = z.contiguous(memory_format=torch.channels_last)
        for _, module in self.segments[self.split :]:
            h = module(h)
        return h


_PASSES: "weakref.WeakKeyDictionary[nn.Module, dict]" = weakref.WeakKeyDictionary()


def network_passes(loaded, layer: str, reads: Sequence[str]) -> NetworkPasses:
    """NetworkPasses for (network, layer, reads), built once per loaded network and kept."""
    per_model = _PASSES.setdefault(loaded.model, {})
    key = (layer, tuple(reads))
    if key not in per_model:
        per_model[key] = NetworkPasses(loaded, layer, reads)
    return per_model[key]


# --------------------------------------------------------------------------------------------
# The readout network.


class ReadoutNetwork(nn.Module):
    """Feature maps at several depths → α at the bottleneck's resolution (three 1×1 convolutions).

    forward(features, size): `features` is a list, one entry per read-out layer: (N, C_i, h_i, w_i)
    maps or (N, C_i) vectors (logits). Returns α shaped (N, out_channels, *size).
    """

    def __init__(
        self,
        read_channels: Sequence[int],
        out_channels: int,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        init_alpha: float = INIT_ALPHA,
        alpha_max: float = ALPHA_MAX,
    ):
        super().__init__()
        h1, h2 = (int(h) for h in hidden)
        if not 0 < init_alpha < alpha_max:
            raise ValueError(f"init_alpha must lie in (0, alpha_max), got {init_alpha} and {alpha_max}.")
        self.alpha_max = float(alpha_max)
        # First 1×1 conv, split by source: conv(concat(maps)) == Σ_i conv_i(map_i).
        self.sources = nn.ModuleList(nn.Conv2d(int(c), h1, 1, bias=False) for c in read_channels)
        self.bias1 = nn.Parameter(torch.zeros(h1))
        bound = 1.0 / math.sqrt(sum(int(c) for c in read_channels))  # PyTorch's default for the bias
        nn.init.uniform_(self.bias1, -bound, bound)
        self.conv2 = nn.Conv2d(h1, h2, 1)
        self.conv3 = nn.Conv2d(h2, int(out_channels), 1)
        nn.init.zeros_(self.conv3.weight)
        nn.init.constant_(self.conv3.bias, self.alpha_max * math.atanh(init_alpha / self.alpha_max))
        for i, c in enumerate(read_channels):
            self.register_buffer(f"in_mean_{i}", torch.zeros(int(c)))
            self.register_buffer(f"in_std_{i}", torch.ones(int(c)))

    def normalisation(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return getattr(self, f"in_mean_{i}"), getattr(self, f"in_std_{i}")

    def set_normalisation(self, i: int, mean: torch.Tensor, std: torch.Tensor, min_std: float = MIN_STD) -> None:
        """Per-channel mean and std of read-out layer i (std floored so dead channels stay finite)."""
        m, s = self.normalisation(i)
        m.copy_(mean.reshape(m.shape))
        s.copy_(std.reshape(s.shape).clamp_min(min_std))

    def forward(self, features: Sequence[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        if len(features) != len(self.sources):
            raise ValueError(f"Expected {len(self.sources)} feature maps, got {len(features)}.")
        size = tuple(int(s) for s in size)
        h = self.bias1.view(1, -1, 1, 1)
        for i, (f, conv) in enumerate(zip(features, self.sources)):
            if f.dim() == 2:  # logits: a 1×1 map, broadcast over space
                f = f[:, :, None, None]
            mean, std = self.normalisation(i)
            y = conv((f - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1))
            if tuple(y.shape[-2:]) not in (size, (1, 1)):
                y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
            h = h + y
        if tuple(h.shape[-2:]) != size:
            h = h.expand(-1, -1, *size)
        h = self.conv2(F.relu(h))
        a = self.conv3(F.relu(h))
        return self.alpha_max * torch.tanh(a / self.alpha_max)


# --------------------------------------------------------------------------------------------
# The Readout Bottleneck.


@dataclass
class ReadoutOutput:
    """One training forward pass: the loss and its parts (scalars are batch means)."""

    loss: torch.Tensor
    ce: torch.Tensor
    info: torch.Tensor  # L_I in nats per sample
    logits: torch.Tensor  # noisy logits
    labels: torch.Tensor  # labels used (folder labels or the clean network's top-1)


class ReadoutBottleneck(nn.Module):
    """Readout network + bottleneck statistics, bound to a loaded network.

    Build one for training with `ReadoutBottleneck.create(loaded)`, or load a trained one with
    `load_readout(path, loaded)`. Then:

        >>> rb = load_readout("assets/readout_efficientnet_lite0.pt", loaded)
        >>> bits = rb.heatmap(loaded.preprocess(image))   # (224, 224) bits per pixel, one pass

    Its state_dict holds only the readout network and the statistics; the analysed network is used,
    never owned, and stays frozen.
    """

    def __init__(self, config: ReadoutConfig):
        super().__init__()
        self.config = config
        self.readout = ReadoutNetwork(
            config.read_channels, config.feature_shape[0], config.hidden, config.init_alpha, config.alpha_max
        )
        self.register_buffer("mean", torch.zeros(config.feature_shape))
        self.register_buffer("std", torch.ones(config.feature_shape))
        self._passes: NetworkPasses | None = None
        self._loaded = None
        self.stats_info: dict = {}  # where the statistics came from
        self.source_path = ""  # the checkpoint file, when loaded from one
        self.training_info: dict = {}  # the checkpoint's training record (config, history, …)

    # ---- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        loaded,
        layer: str | None = None,
        reads: Sequence[str] | None = None,
        *,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        sigma: float = 1.0,
        beta_k: float = 10.0,
    ) -> "ReadoutBottleneck":
        """An untrained readout for `loaded`; its statistics still have to be set (`set_statistics`)."""
        spec = loaded.spec
        layer = layer or spec.readout_layer or spec.default_layer
        reads = tuple(reads) if reads else default_reads(spec)
        if layer not in reads:
            reads = (layer, *reads)
        if len(set(reads)) != len(reads):
            raise ValueError(f"Read-out layers must be distinct, got {', '.join(reads)}.")
        if not np.isfinite(beta_k) or beta_k < 0:
            raise ValueError(f"β·k must be a non-negative number, got {beta_k}.")
        if sigma < 0:
            raise ValueError(f"σ_s must be ≥ 0, got {sigma}.")
        passes = network_passes(loaded, layer, reads)
        size = loaded.preprocess.crop_size
        probe = torch.zeros(1, 3, size, size, device=loaded.device)
        with frozen_eval(*passes.modules), torch.inference_mode():
            out = passes.first_pass(probe)
        config = ReadoutConfig(
            model=loaded.key,
            weights_id=loaded.weights_id,
            layer=layer,
            reads=reads,
            feature_shape=tuple(out[layer].shape[1:]),
            read_channels=tuple(int(out[r].shape[1]) for r in reads),
            input_size=(size, size),
            hidden=tuple(int(h) for h in hidden),
            sigma=float(sigma),
            beta_k=float(beta_k),
        )
        self = cls(config).to(loaded.device)
        self._bind(loaded, passes)
        return self

    def bind(self, loaded) -> "ReadoutBottleneck":
        """Attach to a loaded network after checking it is the one this readout was made for."""
        check_compatible(self.config, loaded)
        self._bind(loaded, network_passes(loaded, self.config.layer, self.config.reads))
        return self.to(loaded.device)

    def _bind(self, loaded, passes: NetworkPasses) -> None:
        self._loaded, self._passes = loaded, passes

    @property
    def passes(self) -> NetworkPasses:
        if self._passes is None:
            raise RuntimeError("This ReadoutBottleneck is not bound to a network; call .bind(loaded).")
        return self._passes

    @property
    def network_modules(self) -> tuple[nn.Module, ...]:
        """The analysed network's modules in use (to freeze them during training)."""
        return (self._loaded.model, *self.passes.modules)

    def set_statistics(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        read_stats: Sequence[tuple[torch.Tensor, torch.Tensor]],
        info: dict | None = None,
    ) -> None:
        """Bottleneck statistics (per element) and read-out normalisation (per channel)."""
        if tuple(mean.shape) != self.config.feature_shape or tuple(std.shape) != self.config.feature_shape:
            raise ValueError(
                f"Statistics shaped {tuple(mean.shape)} do not fit the bottleneck layer "
                f"{self.config.layer} {self.config.feature_shape}."
            )
        with torch.no_grad():
            self.mean.copy_(mean)
            self.std.copy_(std)
            for i, (m, s) in enumerate(read_stats):
                self.readout.set_normalisation(i, m.to(self.mean.device), s.to(self.mean.device), self.config.min_std)
        self.stats_info = dict(info or {})

    # ---- passes --------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            x = x[None]
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"Expected images shaped (N, 3, H, W), got {tuple(x.shape)}.")
        return x.to(self.mean.device)

    def first_pass(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Clean outputs of the analysed network at the bottleneck, the read-out layers and the logits."""
        out = self.passes.first_pass(x)
        r = out[self.config.layer]
        if tuple(r.shape[1:]) != self.config.feature_shape:
            raise ReadoutCheckpointError(
                f"The readout was made for {self.config.layer} feature maps shaped {self.config.feature_shape} "
                f"(inputs {self.config.input_size[0]}×{self.config.input_size[1]}), but this input gives "
                f"{tuple(r.shape[1:])}; use the network's standard preprocessing."
            )
        return out

    def alpha(self, out: dict[str, torch.Tensor]) -> torch.Tensor:
        """α from a first pass's outputs."""
        r = out[self.config.layer]
        return self.readout([out[name] for name in self.config.reads], r.shape[-2:])

    def _noise_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean[None], self.std.clamp_min(self.config.min_std)[None]

    def forward(
        self,
        x: torch.Tensor,
        labels: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> ReadoutOutput:
        """Training pass: loss = CE(noisy logits, labels) + β·L_I, with β = beta_k / k.

        labels: class indices; None or entries < 0 use the clean network's top-1 (unlabelled images).
        """
        x = self._check_input(x)
        with torch.no_grad(), frozen_eval(*self.passes.modules):
            out = self.first_pass(x)
            top1 = out[LOGITS].argmax(dim=1)
            if labels is None:
                labels = top1
            else:
                labels = labels.to(top1.device)
                labels = torch.where(labels >= 0, labels, top1)
        r = out[self.config.layer]
        alpha = self.alpha(out)
        lam, one_minus = lambda_from_alpha(alpha, self.config.sigma)
        mean, std = self._noise_stats()
        z = inject_noise(r, lam, one_minus, mean, std, r.shape[0], generator)
        with frozen_eval(*self.passes.modules):  # gradients reach Z, never the analysed network
            logits = self.passes.suffix(z)
        ce = F.cross_entropy(logits, labels)
        info = kl_per_element(standardise(r, mean, std), lam, one_minus).flatten(1).sum(dim=1).mean()
        return ReadoutOutput(ce + self.config.beta * info, ce, info, logits, labels)

    # ---- inference -----------------------------------------------------------------------
    def _maps(self, x: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.first_pass(x)
        lam, one_minus = lambda_from_alpha(self.alpha(out), self.config.sigma)
        mean, std = self._noise_stats()
        kl = kl_per_element(standardise(out[self.config.layer], mean, std), lam, one_minus)
        return out, lam, one_minus, kl

    def heatmaps(self, x: torch.Tensor) -> torch.Tensor:
        """Bits per input pixel for a batch (N, 3, H, W) → (N, H, W); each map sums to its total bits."""
        x = self._check_input(x)
        with frozen_eval(*self.passes.modules, self), torch.inference_mode():
            _, _, _, kl = self._maps(x)
            size = tuple(x.shape[-2:])
            return torch.stack([resize_preserving_total(information_map_bits(k), size) for k in kl])

    def heatmap(self, x: torch.Tensor) -> np.ndarray:
        """Bits per pixel (H, W) for one preprocessed image (1, 3, H, W), in one forward pass."""
        if x.dim() == 4 and x.shape[0] != 1:
            raise ValueError(f"heatmap() takes one image; use heatmaps() for a batch of {x.shape[0]}.")
        return self.heatmaps(x)[0].cpu().numpy()

    def explain(self, x: torch.Tensor, target: int | None = None, batch: int = 10, seed: int = 0) -> "ReadoutResult":
        """Heatmap plus what views show next to it, as a Per-Sample-like AttributionResult.

        The readout's λ does not depend on `target` (it is predicted from the image, as in the paper);
        target only selects which probabilities are reported. p_with is measured on `batch` noisy
        copies (a second pass; batch=0 skips it and reports NaN).
        """
        start = time.perf_counter()
        x = self._check_input(x)
        if x.shape[0] != 1:
            raise ValueError(f"Expected one image shaped (1, 3, H, W), got {tuple(x.shape)}.")
        with frozen_eval(*self.passes.modules, self), torch.inference_mode():
            out, lam, one_minus, kl = self._maps(x)
            probs = out[LOGITS].softmax(dim=1)[0]
            target = int(probs.argmax()) if target is None else int(target)
            if not 0 <= target < probs.numel():
                raise ValueError(f"Class index {target} is out of range 0…{probs.numel() - 1}.")
            p_with = float("nan")
            if batch > 0:
                mean, std = self._noise_stats()
                gen = torch.Generator(device=x.device).manual_seed(seed)
                z = inject_noise(out[self.config.layer], lam, one_minus, mean, std, batch, gen)
                p_with = float(self.passes.suffix(z).softmax(dim=1)[:, target].mean())
            feature_bits = information_map_bits(kl)
            heatmap = resize_preserving_total(feature_bits, tuple(x.shape[-2:]))
            lambda_mean = lam[0].mean(dim=0)
        c = self.config
        return ReadoutResult(
            heatmap=heatmap.cpu().numpy(),
            feature_bits=feature_bits.cpu().numpy(),
            lambda_mean=lambda_mean.cpu().numpy(),
            total_bits=float(feature_bits.sum()),
            target=target,
            p_without=float(probs[target]),
            p_with=p_with,
            seconds=time.perf_counter() - start,
            settings=BottleneckSettings(beta_k=c.beta_k, steps=0, batch=max(batch, 1), sigma=c.sigma, seed=seed),
            feature_shape=c.feature_shape,
            checkpoint=getattr(self, "source_path", ""),
            readout=c.to_dict(),
        )


@dataclass
class ReadoutResult(AttributionResult):
    """AttributionResult of the Readout Bottleneck: no optimisation history; the checkpoint used."""

    checkpoint: str = ""
    readout: dict = field(default_factory=dict)

    def summary(self) -> dict:
        s = super().summary()
        s.update(method="readout", checkpoint=self.checkpoint, layer=self.readout.get("layer"),
                 reads=self.readout.get("reads"))
        return s


# --------------------------------------------------------------------------------------------
# Checkpoints.


def check_compatible(config: ReadoutConfig, loaded) -> None:
    """Raise ReadoutCheckpointError unless `config` was made for this network, weights and layers."""
    if config.model != loaded.key:
        raise ReadoutCheckpointError(
            f"This readout checkpoint was trained for the network {config.model!r}, but the loaded network is "
            f"{loaded.key!r}. Use a checkpoint made for {loaded.key} (python -m iba_core train-readout "
            f"--model {loaded.key} …)."
        )
    if config.weights_id != loaded.weights_id:
        raise ReadoutCheckpointError(
            f"This readout checkpoint was trained for {config.model} with weights {config.weights_id!r}, but the "
            f"loaded network has weights {loaded.weights_id!r}; a readout only explains the weights it was "
            f"trained on."
        )
    names = set(loaded.spec.layers) | {LOGITS}
    missing = [n for n in (config.layer, *config.reads) if n not in names]
    if missing:
        raise ReadoutCheckpointError(
            f"This readout checkpoint uses layers {', '.join(missing)}, which {loaded.spec.title} does not have."
        )


def _cpu_state(module: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def state_digest(rb: nn.Module) -> str:
    """SHA-256 of a readout's weights and statistics (to compare ranks, runs and checkpoints)."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(rb.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def make_checkpoint(rb: ReadoutBottleneck, training: dict | None = None) -> dict:
    """A plain, torch.load(weights_only=True)-safe dict describing the readout (and training state)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": rb.config.to_dict(),
        "state_dict": _cpu_state(rb),
        "stats": dict(rb.stats_info),
        "torch_version": str(torch.__version__),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "training": training or {},
    }


def _plain(obj: Any) -> Any:
    """Containers of tensors and Python scalars only, so torch.load(weights_only=True) can read them."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def save_checkpoint(path: str | os.PathLike, checkpoint: dict) -> Path:
    """Write atomically: an interruption mid-write never leaves a half file under `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(_plain(checkpoint), tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read and sanity-check a readout checkpoint (no network needed); ReadoutCheckpointError if bad."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ReadoutCheckpointError(f"Readout checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and safety errors come in many types
        raise ReadoutCheckpointError(f"{path} is not a readable readout checkpoint ({type(err).__name__}).") from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ReadoutCheckpointError(f"{path} is not an IBA Explorer readout checkpoint.")
    if int(ckpt.get("version", 0)) > CHECKPOINT_VERSION:
        raise ReadoutCheckpointError(
            f"{path} was written by a newer IBA Explorer (format version {ckpt['version']}); please update."
        )
    try:
        ReadoutConfig.from_dict(ckpt["config"])
        if not isinstance(ckpt["state_dict"], dict):
            raise TypeError("state_dict")
    except (KeyError, TypeError, ValueError) as err:
        raise ReadoutCheckpointError(f"{path} is an incomplete readout checkpoint ({err}).") from err
    return ckpt


def readout_from_checkpoint(ckpt: dict, loaded, source: str = "") -> ReadoutBottleneck:
    """A ReadoutBottleneck from a loaded checkpoint dict, checked against and bound to `loaded`."""
    config = ReadoutConfig.from_dict(ckpt["config"])
    check_compatible(config, loaded)
    rb = ReadoutBottleneck(config)
    state = ckpt["state_dict"]
    expected = rb.state_dict()
    bad = [k for k in expected if k not in state or tuple(state[k].shape) != tuple(expected[k].shape)]
    extra = [k for k in state if k not in expected]
    if bad or extra:
        raise ReadoutCheckpointError(
            f"The readout checkpoint {source or ''} does not fit its own configuration "
            f"(mismatched entries: {', '.join((bad + extra)[:5])})."
        )
    rb.load_state_dict({k: v.float() for k, v in state.items()})
    rb.stats_info = dict(ckpt.get("stats", {}))
    rb.source_path = source
    rb.training_info = {k: v for k, v in ckpt.get("training", {}).items() if k not in ("optimizer", "rng")}
    return rb.bind(loaded).eval()


def load_readout(path: str | os.PathLike, loaded) -> ReadoutBottleneck:
    """Load a trained readout for `loaded`; ReadoutCheckpointError if it does not fit."""
    return readout_from_checkpoint(load_checkpoint(path), loaded, str(path))


def export_for_inference(src: str | os.PathLike, dst: str | os.PathLike, half: bool = False) -> Path:
    """Copy of a training checkpoint without optimiser and RNG state (what ships in assets/).

    half=True stores floating tensors as float16 (loading converts back to float32).
    """
    ckpt = load_checkpoint(src)
    training = {k: v for k, v in ckpt.get("training", {}).items() if k not in ("optimizer", "rng")}
    state = ckpt["state_dict"]
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    return save_checkpoint(dst, {**ckpt, "state_dict": state, "training": training})


def default_checkpoint(model_key: str) -> Path | None:
    """The shipped readout for a network (assets/readout_<key>.pt), if there is one."""
    path = ASSETS_DIR / f"readout_{model_key}.pt"
    return path if path.is_file() else None


# --------------------------------------------------------------------------------------------
# Entry points for the CLI and the method interface.

_LOADED_READOUTS: dict[tuple, tuple[weakref.ref, ReadoutBottleneck]] = {}
_MAX_CACHED = 4


def cached_readout(loaded, ckpt_path: str | os.PathLike) -> ReadoutBottleneck:
    """load_readout, kept per (file, modification time, network) so repeated calls are cheap."""
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ReadoutCheckpointError(f"Readout checkpoint not found: {path}")
    key = (str(path.resolve()), path.stat().st_mtime_ns, id(loaded.model), loaded.weights_id)
    hit = _LOADED_READOUTS.get(key)
    if hit is not None and hit[0]() is loaded.model:
        return hit[1]
    rb = load_readout(path, loaded)
    stale = [k for k, (ref, _) in _LOADED_READOUTS.items()
             if ref() is None or (k[0] == key[0] and k[2:] == key[2:])]  # gone, or an older version of the file
    for k in stale:
        del _LOADED_READOUTS[k]
    while len(_LOADED_READOUTS) >= _MAX_CACHED:  # oldest first (dicts keep insertion order)
        del _LOADED_READOUTS[next(iter(_LOADED_READOUTS))]
    _LOADED_READOUTS[key] = (weakref.ref(loaded.model), rb)
    return rb


def readout_attribute(loaded, ckpt_path: str | os.PathLike | None, x: torch.Tensor, target: int | None = None,
                      batch: int = 10, seed: int = 0) -> ReadoutResult:
    """Readout Bottleneck attribution for one preprocessed image (1, 3, H, W).

    ckpt_path None uses the shipped checkpoint for the network (assets/readout_<key>.pt).
    Returns a ReadoutResult (an AttributionResult: heatmap, feature_bits, lambda_mean, total_bits,
    target, p_without, p_with, seconds, …; history is empty).
    """
    if ckpt_path is None:
        ckpt_path = default_checkpoint(loaded.key)
        if ckpt_path is None:
            raise ReadoutCheckpointError(
                f"No readout checkpoint ships for {loaded.key}; train one with "
                f"`python -m iba_core train-readout --model {loaded.key} --images DIR` and pass --readout CKPT."
            )
    return cached_readout(loaded, ckpt_path).explain(x, target, batch=batch, seed=seed)


class ReadoutMethod:
    """The Readout Bottleneck behind the shared method interface (iba_core.baselines.base).

    attribute(loaded, x, target) returns bits per pixel; λ does not depend on `target` (the readout
    predicts it from the image and the logits, as in the paper).
    """

    key = "readout"
    name = "Readout Bottleneck"
    signed = False
    unit = "bits/pixel"

    def __init__(self, checkpoint: str | os.PathLike | None = None):
        self.checkpoint = checkpoint

    def attribute(self, loaded, x: torch.Tensor, target: int) -> np.ndarray:
        path = self.checkpoint or default_checkpoint(loaded.key)
        if path is None:
            raise ReadoutCheckpointError(f"No readout checkpoint for {loaded.key}; pass one to ReadoutMethod(...).")
        return cached_readout(loaded, path).heatmap(x)
