"""Grad-CAM and Guided Grad-CAM (Selvaraju et al. 2017).

Grad-CAM: at the last convolutional block's (rectified) output A, weights α_k = spatial mean of
∂ logit_target / ∂A_k, map = ReLU(Σ_k α_k A_k), bilinearly upsampled to the image size (captum's
`LayerGradCam` + `LayerAttribution.interpolate`).

The layer comes from the network's spec (`NetworkSpec.cam_layer`: module path, and whether it is the
module's input); each spec says why it chose its layer. A network whose spec knows none (a derived spec)
needs the setting `layer`; without it the method says it is unavailable.

Guided Grad-CAM: Guided Backprop (per channel, on a private copy, see `gradients.guided_copy`) times the
upsampled Grad-CAM, summed over colour channels.

Other networks: pass `layer="dotted.module.path"` (and `layer_input=True` to use that module's input).
"""
from __future__ import annotations

import torch
from torch import nn
from captum.attr import LayerAttribution, LayerGradCam

from ..errors import UserError
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
        return f"no Grad-CAM layer is known for {title}; give the setting layer='module.path'."
    return None


def cam_module(network, layer: str | None = None, layer_input: bool | None = None) -> tuple[nn.Module, str, bool]:
    """(module, its path, use its input) of the CAM layer on `network`: the setting, else the spec's."""
    path, is_input = cam_layer(network, layer, layer_input)
    try:
        return network.model.get_submodule(path), path, is_input
    except AttributeError as err:
        raise UserError(f"The network has no module {path!r} for Grad-CAM.") from err


def grad_cam(network, x: torch.Tensor, target: int | list[int], layer: str | None = None,
             layer_input: bool | None = None):
    """(B, 1, H, W) upsampled Grad-CAM maps (≥ 0), one target per image."""
    module, path, is_input = cam_module(network, layer, layer_input)
    cam = LayerGradCam(network.model, module).attribute(
        x, target=target, attribute_to_layer_input=is_input, relu_attributions=True
    )
    if isinstance(cam, tuple):
        cam = cam[0]
    if cam.dim() != 4:
        raise UserError(f"Grad-CAM needs a convolutional layer (N, C, h, w); {path!r} gives {tuple(cam.shape)}.")
    return LayerAttribution.interpolate(cam.detach(), tuple(x.shape[-2:]), interpolate_mode="bilinear")


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
    description = "Last conv block's activations weighted by their mean gradient, rectified and upsampled."

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
