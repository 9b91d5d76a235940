"""Grad-CAM and Guided Grad-CAM (Selvaraju et al. 2017), and the CAM layer every CAM variant reads.

Grad-CAM: at the CAM layer's activations A (B, C, h, w), weights α_k = spatial mean of ∂ logit_target / ∂A_k,
map = ReLU(Σ_k α_k A_k), bilinearly upsampled to the image size (captum's `LayerGradCam` +
`LayerAttribution.interpolate`, which the tests compare against on CNN maps).

The layer comes from the network's spec (`NetworkSpec.cam_layer`: module path, and whether it is the
module's input); each spec says why it chose its layer (a derived spec by `spec.cam_layer_of`). A network
whose spec knows none needs the setting `layer`; without it the method says it is unavailable.

Token layers need no glue from the user: a layer's output is read in its layout (`networks.tokens`): a CNN map
as it is; a ViT's (N, E + h·w, C) tokens with the E class, distillation or register tokens dropped and the
patches laid back on their h × w grid; a Swin's (N, h, w, C) grid (its windows already merged back by the
block) with channels moved first. That is what pytorch-grad-cam's `reshape_transform` does by hand; the
gradients get the same view, so every CAM variant's formula runs unchanged on the grid.

Guided Grad-CAM: Guided Backprop (per channel, on a private copy, see `gradients.guided_copy`) times the
upsampled Grad-CAM, summed over colour channels.

Other networks: pass `layer="dotted.module.path"` (and `layer_input=True` to use that module's input). Hooks
live only inside `layer_capture` and are removed on exit, also on errors.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..model_state import layer_tensor, with_layer_tensor
from ..networks.tokens import FeatureLayout, layout_of_shape
from .base import Method, spec_of, sum_channels
from .gradients import guided_gradient, no_guided_units, per_image


def cam_layer(network, layer: str | None = None, layer_input: bool | None = None) -> tuple[str, bool]:
    """(module path, use the module's input) for Grad-CAM on `network`."""
    if layer is not None:
        return layer, bool(layer_input)
    reason = no_cam_layer(network, layer)
    if reason:
        raise UserError(reason)
    path, is_input = spec_of(network).cam_layer
    return path, is_input if layer_input is None else bool(layer_input)


def no_cam_layer(network, layer: str | None) -> str | None:
    """Why Grad-CAM cannot pick its layer on `network` (None when it can)."""
    if layer is not None:
        return None
    spec = spec_of(network)
    if spec is None or spec.cam_layer is None:
        title = spec.title if spec is not None else type(network.model).__name__
        why = f" ({spec.no_cam_reason})" if spec is not None and spec.no_cam_reason else ""
        # the app and the CLI offer no CAM-layer setting: only a Python caller can name one
        return f"no Grad-CAM layer is known for {title}{why}; in Python the setting layer='module.path' names one."
    return None


def cam_module(network, layer: str | None = None, layer_input: bool | None = None) -> tuple[nn.Module, str, bool]:
    """(module, its path, use its input) of the CAM layer on `network`: the setting, else the spec's."""
    path, is_input = cam_layer(network, layer, layer_input)
    try:
        return network.model.get_submodule(path), path, is_input
    except AttributeError as err:
        raise UserError(f"The network has no module {path!r} for Grad-CAM.") from err


@contextmanager
def layer_capture(module: nn.Module, is_input: bool, track_grad: bool) -> Iterator[list[torch.Tensor]]:
    """The tensors `module` outputs (or, `is_input`, receives) during the block, one per call, in the layer's own
    layout (tokens stay tokens: `grid_map` lays them out).

    Each is a copy, so an in-place operation after the layer (a skip connection's `+=`) cannot change it. With
    `track_grad`, each is a leaf that requires gradients and the network runs on from a copy of it, so
    `torch.autograd.grad(score, kept)` gives ∂score/∂A.
    """
    kept: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        a = t.detach().clone().requires_grad_(track_grad)
        kept.append(a)
        return a.clone() if track_grad else t

    def keep_input(_m, args):
        if not args:  # a module called with keyword arguments only gives its input no position to read
            raise UserError("The CAM layer's input is passed by keyword; choose the layer before it (its output).")
        return (keep(args[0]), *args[1:])

    if is_input:
        handle = module.register_forward_pre_hook(keep_input)
    else:
        handle = module.register_forward_hook(lambda _m, _i, out: with_layer_tensor(out, keep(layer_tensor(out))))
    try:
        yield kept
    finally:
        handle.remove()


def layer_layout(network, path: str, is_input: bool, shape: tuple[int, ...],
                 image_size: tuple[int, int]) -> FeatureLayout | None:
    """How the CAM layer's tensor lies on the image: the layout the spec found in its dry pass for that layer's
    output, else the one its shape gives (`tokens.layout_of_shape`); None when it lies on no grid."""
    spec = spec_of(network)
    if spec is not None and not is_input:
        for info in getattr(spec, "layer_info", ()):
            if info.name == path:
                return info.layout
    return layout_of_shape(shape, image_size)


def grid_map(network, t: torch.Tensor, path: str, is_input: bool, image_size: tuple[int, int], name: str,
             batch: int) -> torch.Tensor:
    """(B, C, h, w): the layer's tensor `t` (activations or their gradients) on its grid, unlocated tokens dropped
    (module docstring), or a clear error for a layer that does not lie on the image."""
    shape = tuple(t.shape)
    layout = layer_layout(network, path, is_input, shape, image_size) if t.dim() in (3, 4) else None
    if layout is None:
        raise UserError(f"{name} needs a layer whose output lies on the image, a feature map (N, C, h, w) or tokens "
                        f"on a patch grid; {path!r} gives {shape}.")
    if shape[0] != batch:
        raise UserError(f"{name} needs a layer whose first axis is the image batch; {path!r} gives {shape} for "
                        f"{batch} image(s) (the block folds positions into the batch).")
    try:
        grid, _ = layout.to_map(t)
    except (ValueError, RuntimeError) as err:
        raise UserError(f"{name} cannot lay {path!r}'s output {shape} on a grid: {err}") from err
    return grid


def _one_tensor(kept: list[torch.Tensor], path: str, name: str) -> torch.Tensor:
    """The one tensor the layer gave in a forward pass, or a clear error."""
    if len(kept) != 1:
        raise UserError(f"{name} needs a layer that runs once per forward pass; {path!r} ran {len(kept)} times.")
    return kept[0]


def target_scores(logits: torch.Tensor, targets: list[int] | torch.Tensor) -> torch.Tensor:
    """(B,) logits[i, targets[i]]."""
    index = torch.as_tensor(targets, device=logits.device).reshape(-1, 1)
    return logits.gather(1, index)[:, 0]


def activations(network, x: torch.Tensor, module: nn.Module, path: str, is_input: bool, name: str) -> torch.Tensor:
    """The layer's activations on their grid (B, C, h, w) for x, from one forward pass without gradients."""
    with layer_capture(module, is_input, track_grad=False) as kept, torch.no_grad():
        network.model(x)
    a = _one_tensor(kept, path, name)
    return grid_map(network, a, path, is_input, tuple(x.shape[-2:]), name, x.shape[0])


def activations_and_gradients(network, x: torch.Tensor, targets: list[int], module: nn.Module, path: str,
                              is_input: bool, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, ∂logit_target/∂A), both on the layer's grid (B, C, h, w): one forward and one backward pass for the
    batch (each image's logit depends on that image alone: the network is in eval mode). The gradient is taken in
    the layer's own layout, then laid on the grid like the activations."""
    with layer_capture(module, is_input, track_grad=True) as kept, torch.enable_grad():
        logits = network.model(x)
        a = _one_tensor(kept, path, name)
        if not logits.requires_grad:  # parameters are frozen: only the layer's output can carry a gradient
            raise UserError(f"{name} cannot read {path!r}: the network's output does not depend on it (its head "
                            "reads something carried past that layer, such as a class token); choose a later layer.")
        (grad,) = torch.autograd.grad(target_scores(logits, targets).sum(), a)
    size = tuple(x.shape[-2:])
    return (grid_map(network, a.detach(), path, is_input, size, name, x.shape[0]),
            grid_map(network, grad, path, is_input, size, name, x.shape[0]))


def upsampled(cam: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(B, h, w) → (B, H, W), bilinear as Grad-CAM's (captum's `interpolate`, corners not aligned)."""
    return F.interpolate(cam[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]


def grad_cam(network, x: torch.Tensor, target: int | list[int], layer: str | None = None,
             layer_input: bool | None = None) -> torch.Tensor:
    """(B, 1, H, W) upsampled Grad-CAM maps (≥ 0), one target per image."""
    module, path, is_input = cam_module(network, layer, layer_input)
    targets = [target] * x.shape[0] if isinstance(target, int) else list(target)
    a, grad = activations_and_gradients(network, x, targets, module, path, is_input, "Grad-CAM")
    cam = (grad.mean(dim=(2, 3), keepdim=True) * a).sum(dim=1).clamp(min=0)
    return upsampled(cam, tuple(x.shape[-2:]))[:, None]


class CamMethod(Method):
    """What the class-activation-map family shares: the settings `layer` and `layer_input` (None: the spec's CAM
    layer), unsigned maps, and unavailability where no CAM layer is known."""

    signed = False

    @classmethod
    def default_settings(cls) -> dict:
        return {"layer": None, "layer_input": None}

    def available_for(self, network) -> str | None:
        return no_cam_layer(network, self.settings["layer"])

    def layers_read(self, network) -> list[str]:
        """The CAM's target layer (the setting, else the spec's; "… (input)" where the module's input is used): a
        Grad-CAM report names it, not the run's bottleneck layer."""
        if self.available_for(network) is not None:
            return []
        path, is_input = cam_layer(network, self.settings["layer"], self.settings["layer_input"])
        return [f"{path} (input)" if is_input else path]


class GradCam(CamMethod):
    key = "grad_cam"
    name = "Grad-CAM"
    description = ("The CAM layer's activations (a CNN's last conv block, a transformer's patch tokens) weighted by "
                   "their mean gradient, rectified and upsampled.")

    batched = True  # one forward and backward pass for the batch

    def cam(self, network, x, target) -> torch.Tensor:
        """(B, 1, H, W) upsampled Grad-CAM at this method's layer."""
        return grad_cam(network, x, target, self.settings["layer"], self.settings["layer_input"])

    def _compute_batch(self, network, x, targets):
        return list(self.cam(network, x, targets)[:, 0])


class GuidedGradCam(GradCam):
    key = "guided_grad_cam"
    name = "Guided Grad-CAM"
    signed = True
    description = "Guided Backprop times the upsampled Grad-CAM map, summed over colour channels."

    def available_for(self, network) -> str | None:
        return super().available_for(network) or no_guided_units(network.model)

    PASSES = 4  # Grad-CAM's forward and backward pass, then Guided Backprop's

    def _compute_batch(self, network, x, targets):
        return per_image(sum_channels(guided_gradient(network.model, x, targets) * self.cam(network, x, targets)))
