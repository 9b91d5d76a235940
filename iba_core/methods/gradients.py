"""Gradient-based baselines: Gradient, Saliency, Integrated Gradients, SmoothGrad, Guided Backprop.

All of them explain the **target logit** (pre-softmax) with respect to the normalised input image, and
reduce the three colour channels to one map:
- signed maps (Gradient, Integrated Gradients, Guided Backprop) sum over channels;
- Saliency and SmoothGrad take the maximum absolute value over channels (Simonyan et al. 2014).

Gradients come from captum (`Saliency`, `IntegratedGradients`, `NoiseTunnel`); nothing is registered on
the user's network. Guided Backprop runs on a private copy whose ReLU/ReLU6 modules are replaced by
guided versions (see `guided_copy`).
"""
from __future__ import annotations

import torch
from captum.attr import IntegratedGradients as _CaptumIG
from captum.attr import NoiseTunnel, Saliency as _CaptumSaliency
from torch import nn

from ..errors import UserError
from .base import Method, image_mean, max_abs_channels, sum_channels, working_copy


def input_gradient(model: nn.Module, x: torch.Tensor, target: int | list[int]) -> torch.Tensor:
    """∂ logit_target / ∂x, shaped like x (captum's Saliency without the absolute value); for a batch, one
    target per image (each image's logit depends on that image alone: the network is in eval mode)."""
    return _CaptumSaliency(model).attribute(x, target=target, abs=False)


def per_image(maps: torch.Tensor) -> list[torch.Tensor]:
    """(B, H, W) maps → one (H, W) map per image; an (H, W) map of a single image stays one."""
    return [maps] if maps.dim() == 2 else list(maps)


class Gradient(Method):
    key = "gradient"
    name = "Gradient"
    signed = True
    batched = True  # one backward pass for the batch
    description = "Gradient of the target logit w.r.t. the input, summed over colour channels."

    def _compute_batch(self, network, x, targets):
        return per_image(sum_channels(input_gradient(network.model, x, targets)))


class Saliency(Method):
    key = "saliency"
    name = "Saliency"
    signed = False
    batched = True
    description = "Largest absolute input gradient over the colour channels (Simonyan et al.)."

    def _compute_batch(self, network, x, targets):
        return per_image(max_abs_channels(input_gradient(network.model, x, targets)))


class IntegratedGradients(Method):
    """Sundararajan et al. 2017; reference image = the image's mean colour everywhere."""

    key = "integrated_gradients"
    cost = "slow"
    name = "Integrated Gradients"
    signed = True
    description = "Path integral of gradients from a mean-colour image to the input, summed over channels."

    @classmethod
    def default_settings(cls) -> dict:
        # batch: interpolated images per forward/backward pass (memory vs. speed; same result)
        return {"steps": 50, "batch": 10}

    def forward_passes(self, network, height: int, width: int) -> int:
        """A forward and a backward pass per step of the path."""
        return 2 * int(self.settings["steps"])

    def _compute(self, network, x, target):
        steps = int(self.settings["steps"])
        if steps < 1:
            raise UserError(f"Integrated Gradients needs ≥ 1 step, got {steps}.")
        attr = _CaptumIG(network.model).attribute(
            x,
            baselines=image_mean(x),
            target=target,
            n_steps=steps,
            internal_batch_size=max(1, int(self.settings["batch"])),
        )
        return sum_channels(attr)


class SmoothGrad(Method):
    """Smilkov et al. 2017: the gradient averaged over noisy copies, shown like Saliency.

    Noise σ = `noise` × (max − min) of the input (0.15, the authors' suggestion). The average is of the
    signed gradients; the map is its largest absolute value over colour channels (`reduce="max_abs"`, the
    default, like Saliency) or, as the IBA paper's code reduced it, the signed mean over colour channels
    (`reduce="mean"`; the map is then signed). docs/science/fidelity.md gives the measured effect.
    """

    key = "smoothgrad"
    cost = "slow"
    name = "SmoothGrad"
    signed = False
    description = "Input gradient averaged over 50 noisy copies (σ = 15 % of the input range), max |·| over channels."

    REDUCTIONS = ("max_abs", "mean")

    def __init__(self, **settings):
        super().__init__(**settings)
        if self.settings["reduce"] not in self.REDUCTIONS:
            raise UserError(f"Unknown reduction {self.settings['reduce']!r}; choose one of: {', '.join(self.REDUCTIONS)}.")
        if self.settings["reduce"] == "mean":
            self.signed = True
            self.description = "Input gradient averaged over noisy copies, signed mean over colour channels."

    @classmethod
    def default_settings(cls) -> dict:
        return {"samples": 50, "noise": 0.15, "batch": 10, "seed": 0, "reduce": "max_abs"}

    def forward_passes(self, network, height: int, width: int) -> int:
        """A forward and a backward pass per noisy copy."""
        return 2 * int(self.settings["samples"])

    def _compute(self, network, x, target):
        samples = int(self.settings["samples"])
        if samples < 1:
            raise UserError(f"SmoothGrad needs ≥ 1 sample, got {samples}.")
        sigma = float(self.settings["noise"]) * float(x.max() - x.min())
        tunnel = NoiseTunnel(_CaptumSaliency(network.model))
        devices = [x.device] if x.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # reproducible noise; the global RNG is restored after
            if self.settings["seed"] is not None:
                torch.manual_seed(int(self.settings["seed"]))
            attr = tunnel.attribute(
                x, nt_type="smoothgrad", nt_samples=samples, stdevs=sigma,
                nt_samples_batch_size=max(1, int(self.settings["batch"])), target=target, abs=False,
            )
        return max_abs_channels(attr) if self.settings["reduce"] == "max_abs" else attr.detach()[0].mean(dim=0)


# ---- Guided Backprop -------------------------------------------------------------------------


class _GuidedClamp(torch.autograd.Function):
    """Forward: clamp(x, 0, upper). Backward (guided): only positive gradients, only where the unit was active."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, upper: float | None):
        active = x > 0
        if upper is not None:
            active &= x < upper
        ctx.save_for_backward(active)
        return x.clamp(min=0) if upper is None else x.clamp(0, upper)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (active,) = ctx.saved_tensors
        return grad.clamp(min=0) * active, None


class GuidedReLU(nn.Module):
    """ReLU (upper=None) or ReLU6 (upper=6) with Springenberg et al.'s guided backward rule."""

    def __init__(self, upper: float | None = None):
        super().__init__()
        self.upper = upper

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _GuidedClamp.apply(x, self.upper)

    def extra_repr(self) -> str:
        return f"upper={self.upper}"


def guided_copy(model: nn.Module) -> nn.Module:
    """A private copy of `model` whose nn.ReLU / nn.ReLU6 modules are guided.

    Why a copy, not captum's GuidedBackprop on the original: captum hooks `nn.ReLU` modules only (not
    EfficientNet-Lite's ReLU6), and torchvision's ResNet calls one ReLU module three times per block, which
    module hooks cannot tell apart. Replacing the modules on a copy handles both and never touches the
    user's network. Activations called functionally (F.relu) are not guided.
    """
    clone = working_copy(model)
    replaced = 0
    for parent in list(clone.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.ReLU:
                setattr(parent, name, GuidedReLU())
                replaced += 1
            elif type(child) is nn.ReLU6:
                setattr(parent, name, GuidedReLU(6.0))
                replaced += 1
    if not replaced:
        raise UserError("Guided Backprop needs ReLU or ReLU6 modules; this network has none.")
    return clone


def no_guided_units(model: nn.Module) -> str | None:
    """Why Guided Backprop cannot run on `model` (None when it can): it guides nn.ReLU / nn.ReLU6 modules only."""
    if any(type(m) in (nn.ReLU, nn.ReLU6) for m in model.modules()):
        return None
    return ("Guided Backprop guides ReLU and ReLU6 modules, and this network has none (e.g. a transformer's "
            "GELUs).")


def guided_gradient(model: nn.Module, x: torch.Tensor, target: int | list[int]) -> torch.Tensor:
    """Guided Backprop attribution per colour channel, shaped like x (one target per image for a batch)."""
    return input_gradient(guided_copy(model), x, target)


class GuidedBackprop(Method):
    key = "guided_backprop"
    name = "Guided Backprop"
    signed = True
    batched = True  # one private copy and one backward pass for the batch
    description = "Gradient with only positive signals passed back through ReLUs, summed over colour channels."

    def available_for(self, network) -> str | None:
        return no_guided_units(network.model)

    def _compute_batch(self, network, x, targets):
        return per_image(sum_channels(guided_gradient(network.model, x, targets)))
