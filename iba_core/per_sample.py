"""The Per-Sample Bottleneck (paper §3.2): fit λ for one image, read off bits per pixel.

Two ways to run the network, with identical results for the same seed:
- split path (registered models): the prefix runs once; each step runs only the suffix, without
  parameter gradients;
- hook path (any nn.Module): a forward hook replaces the layer's output by Z; the whole network runs.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .bottleneck import (
    INIT_ALPHA,
    MIN_STD,
    information_map_bits,
    inject_noise,
    is_channels_last,
    kl_per_element,
    lambda_from_alpha,
    resize_preserving_total,
    standardise,
)
from .model_state import frozen_eval, replaced_output
from .stats import FeatureStats


@dataclass
class BottleneckSettings:
    """Hyperparameters; defaults are the paper's (Appendix, Per-Sample Bottleneck table)."""

    beta_k: float = 10.0  # β·k with k = h·w·c; paper β = 10/k
    steps: int = 10  # T = 10 Adam iterations
    batch: int = 10  # B = 10 noisy copies of the sample
    lr: float = 1.0  # η = 1
    sigma: float = 1.0  # σ_s = 1, Gaussian smoothing of the mask
    init_alpha: float = INIT_ALPHA  # α = 5 → λ ≈ 0.993
    min_std: float = MIN_STD
    seed: int | None = 0

    def validate(self) -> "BottleneckSettings":
        """Raise ValueError with a readable message for settings that cannot work."""
        if not np.isfinite(self.beta_k) or self.beta_k < 0:
            raise ValueError(f"β·k must be a non-negative number, got {self.beta_k}.")
        if self.steps < 0 or self.batch < 1:
            raise ValueError("steps must be ≥ 0 and batch ≥ 1.")
        if not self.lr > 0:
            raise ValueError(f"The learning rate must be positive, got {self.lr}.")
        if self.sigma < 0:
            raise ValueError(f"σ_s must be ≥ 0, got {self.sigma}.")
        return self


@dataclass
class StepInfo:
    """What one optimisation step looked like (values from that step's forward pass)."""

    step: int  # 1-based
    steps: int
    lambda_mean: np.ndarray  # (h, w): λ averaged over channels
    bits_per_pixel: np.ndarray  # (H, W) heatmap for the current λ
    ce: float  # L_CE on the noisy batch
    info: float  # L_I in nats
    beta_info: float  # β·L_I, the term that enters the loss
    p_target: float  # mean p(target) on the noisy batch


@dataclass
class AttributionResult:
    """Everything a view or a script needs from one run."""

    heatmap: np.ndarray  # (H, W) bits per input pixel; sums to total_bits
    feature_bits: np.ndarray  # (h, w) bits per feature-map cell
    lambda_mean: np.ndarray  # (h, w) final λ averaged over channels
    total_bits: float
    target: int
    p_without: float  # p(target) of the unmodified network
    p_with: float  # mean p(target) with the fitted bottleneck, on a fresh noisy batch
    history: list[StepInfo] = field(default_factory=list)
    seconds: float = 0.0
    settings: BottleneckSettings = field(default_factory=BottleneckSettings)
    feature_shape: tuple[int, int, int] = (0, 0, 0)

    def summary(self) -> dict:
        """JSON-friendly summary without the arrays."""
        return {
            "target": self.target,
            "p_without": self.p_without,
            "p_with": self.p_with,
            "total_bits": self.total_bits,
            "seconds": self.seconds,
            "feature_shape": list(self.feature_shape),
            "settings": asdict(self.settings),
            "history": [
                {"step": h.step, "ce": h.ce, "info_nats": h.info, "beta_info": h.beta_info, "p_target": h.p_target}
                for h in self.history
            ],
        }


StepCallback = Callable[[StepInfo], None]


def _fast_format(z: torch.Tensor) -> torch.Tensor:
    """channels_last lets oneDNN (CPU) and cuDNN pick faster convolution kernels for the suffix."""
    return z.contiguous(memory_format=torch.channels_last) if z.dim() == 4 else z


class _SplitRunner:
    """Prefix once, suffix per step."""

    def __init__(self, prefix: nn.Module, suffix: nn.Module):
        self.prefix, self.suffix = prefix, suffix
        self.modules = (prefix, suffix)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.prefix(x)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.suffix(_fast_format(z))

    def close(self) -> None:
        pass


class _HookRunner:
    """The whole network each step; a forward hook swaps the layer's output for Z."""

    def __init__(self, model: nn.Module, layer: nn.Module):
        self.model, self.layer = model, layer
        self.modules = (model,)
        self._x: torch.Tensor | None = None

    def features(self, x: torch.Tensor) -> torch.Tensor:
        self._x = x
        captured: list[torch.Tensor] = []

        def grab(out: torch.Tensor) -> torch.Tensor:
            captured.append(out.detach().clone())  # clone: a following in-place ReLU must not alter R
            return out

        with torch.no_grad(), replaced_output(self.layer, grab):
            self.model(x)
        if not captured:
            raise RuntimeError("The chosen layer did not run during the forward pass.")
        if len(captured) > 1:  # e.g. torchvision's ResNet blocks call one ReLU module three times
            raise ValueError(
                f"The chosen layer runs {len(captured)} times in one forward pass (a shared module), so a "
                "bottleneck there would be ambiguous; choose a module that runs once."
            )
        return captured[0]

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        def swap(out: torch.Tensor) -> torch.Tensor:
            if out.shape[1:] != z.shape[1:]:
                raise RuntimeError(f"Layer output shape {tuple(out.shape)} does not match Z {tuple(z.shape)}.")
            # Z in the layer's own memory layout: an arbitrary network may `.view()` what follows the layer,
            # which fails on channels-last strides.
            return _fast_format(z) if is_channels_last(out) else z.contiguous()

        x = self._x.expand(z.shape[0], *self._x.shape[1:])
        with replaced_output(self.layer, swap):
            return self.model(x)

    def close(self) -> None:
        self._x = None


class PerSampleBottleneck:
    """Per-Sample Bottleneck attribution. One call: `attribute(x, target)`.

    Example:
        >>> loaded = load_model("efficientnet_lite0")
        >>> stats = get_stats(loaded, "block3_2")
        >>> iba = PerSampleBottleneck.for_model(loaded, "block3_2", stats)
        >>> result = iba.attribute(loaded.preprocess(image), target=285)
        >>> result.heatmap.shape, result.total_bits
    """

    def __init__(
        self,
        model: nn.Module,
        layer: str | nn.Module,
        stats: FeatureStats,
        settings: BottleneckSettings | None = None,
    ):
        """Generic hook path: `layer` is a module of `model` or its dotted name."""
        module = model.get_submodule(layer) if isinstance(layer, str) else layer
        self._make_runner = lambda: _HookRunner(model, module)
        self.stats = stats
        self.settings = (settings or BottleneckSettings()).validate()

    @classmethod
    def for_model(
        cls, loaded, layer: str, stats: FeatureStats, settings: BottleneckSettings | None = None
    ) -> "PerSampleBottleneck":
        """Fast split path for a registered network (a `LoadedModel`)."""
        return cls.from_split(*loaded.fast_split(layer), stats, settings)

    @classmethod
    def from_split(
        cls, prefix: nn.Module, suffix: nn.Module, stats: FeatureStats, settings: BottleneckSettings | None = None
    ) -> "PerSampleBottleneck":
        """Fast split path for any network given as prefix (input → layer) and suffix (layer → logits)."""
        self = cls.__new__(cls)
        self._make_runner = lambda: _SplitRunner(prefix, suffix)
        self.stats = stats
        self.settings = (settings or BottleneckSettings()).validate()
        return self

    def attribute(
        self,
        x: torch.Tensor,
        target: int | None = None,
        callback: StepCallback | None = None,
    ) -> AttributionResult:
        """Fit the bottleneck for one preprocessed image (1, 3, H, W) and return its heatmap.

        target: class index; None explains the network's top-1 prediction.
        callback: called after every step with a StepInfo (for live views and progress bars).
        """
        start = time.perf_counter()
        s = self.settings
        if x.dim() == 3:
            x = x[None]
        if x.dim() != 4 or x.shape[0] != 1:
            raise ValueError(f"Expected one image shaped (1, 3, H, W), got {tuple(x.shape)}.")
        runner = self._make_runner()
        with ExitStack() as stack:
            stack.enter_context(frozen_eval(*runner.modules))
            stack.callback(runner.close)
            device = next((p.device for m in runner.modules for p in m.parameters()), x.device)
            x = x.to(device)
            r = runner.features(x)
            if r.shape[1:] != self.stats.mean.shape:
                raise ValueError(
                    f"Statistics are for a layer shaped {tuple(self.stats.mean.shape)}, "
                    f"but the layer's output is {tuple(r.shape[1:])}."
                )
            # One memory layout for R, μ, σ, α and so Z: channels-last, which the suffix convolutions want.
            r = _fast_format(r)
            mean = _fast_format(self.stats.mean.to(device, r.dtype)[None])
            std = _fast_format(self.stats.std.to(device, r.dtype).clamp_min(s.min_std)[None])
            r_std = standardise(r, mean, std)
            with torch.no_grad():
                probs = runner.logits(r.clone()).softmax(dim=1)[0]  # clone: in-place ReLUs
            if target is None:
                target = int(probs.argmax())
            p_without = float(probs[target])

            k = r[0].numel()
            beta = s.beta_k / k
            size = tuple(x.shape[-2:])
            generator = torch.Generator(device=device)
            generator.manual_seed(s.seed if s.seed is not None else int(torch.seed() % (2**63)))
            alpha = torch.full_like(r, s.init_alpha, requires_grad=True)
            optimiser = torch.optim.Adam([alpha], lr=s.lr)
            labels = torch.full((s.batch,), target, device=device, dtype=torch.long)
            history: list[StepInfo] = []
            for step in range(1, s.steps + 1):
                optimiser.zero_grad(set_to_none=True)
                lam, one_minus = lambda_from_alpha(alpha, s.sigma)
                z = inject_noise(r, lam, one_minus, mean, std, s.batch, generator)
                logits = runner.logits(z)
                ce = F.cross_entropy(logits, labels)
                kl = kl_per_element(r_std, lam, one_minus)
                info = kl.sum()
                loss = ce + beta * info
                loss.backward()
                optimiser.step()
                with torch.no_grad():
                    info_step = StepInfo(
                        step=step,
                        steps=s.steps,
                        lambda_mean=lam[0].mean(dim=0).cpu().numpy(),
                        bits_per_pixel=resize_preserving_total(information_map_bits(kl.detach()), size).cpu().numpy(),
                        ce=float(ce),
                        info=float(info),
                        beta_info=float(beta * info),
                        p_target=float(logits.softmax(dim=1)[:, target].mean()),
                    )
                history.append(info_step)
                if callback is not None:
                    callback(info_step)

            with torch.no_grad():
                lam, one_minus = lambda_from_alpha(alpha, s.sigma)
                kl = kl_per_element(r_std, lam, one_minus)
                z = inject_noise(r, lam, one_minus, mean, std, s.batch, generator)
                p_with = float(runner.logits(z).softmax(dim=1)[:, target].mean())
                feature_bits = information_map_bits(kl)
                heatmap = resize_preserving_total(feature_bits, size)
                lambda_mean = lam[0].mean(dim=0)
        return AttributionResult(
            heatmap=heatmap.cpu().numpy(),
            feature_bits=feature_bits.cpu().numpy(),
            lambda_mean=lambda_mean.cpu().numpy(),
            total_bits=float(feature_bits.sum()),
            target=target,
            p_without=p_without,
            p_with=p_with,
            history=history,
            seconds=time.perf_counter() - start,
            settings=s,
            feature_shape=tuple(r.shape[1:]),
        )
