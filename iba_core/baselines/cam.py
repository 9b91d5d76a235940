"""Grad-CAM and Guided Grad-CAM (Selvaraju et al. 2017).

Grad-CAM: at the last convolutional block's (rectified) output A, weights α_k = spatial mean of
∂ logit_target / ∂A_k, map = ReLU(Σ_k α_k A_k), bilinearly upsampled to the image size (captum's
`LayerGradCam` + `LayerAttribution.interpolate`).

The layer per registered network (`CAM_LAYERS`: module path, and whether it is the module's input):
- resnet50: `layer4` output — the last bottleneck block, conv5_3 in He et al.'s naming (7×7 at 224 px);
- vgg16: `features.29` output — the ReLU after conv5_3 (relu5_3, 14×14), i.e. rectified conv5_3, the layer
  Selvaraju et al. use (before the last max-pool);
- efficientnet_lite0: the input of `_avg_pooling` — the `head` stage (1×1 conv, BN, ReLU6; 7×7×1280). The
  head's ReLU6 module is shared with the stem, so hooking the module itself would fire twice.

Guided Grad-CAM: Guided Backprop (per channel, on a private copy, see `gradients.guided_copy`) times the
upsampled Grad-CAM, summed over colour channels.

Other networks: pass `layer="dotted.module.path"` (and `layer_input=True` to use that module's input).
"""
from __future__ import annotations

import torch
from captum.attr import LayerAttribution, LayerGradCam

from ._common import Method, model_key, sum_channels
from .gradients import guided_gradient

CAM_LAYERS: dict[str, tuple[str, bool]] = {
    "resnet50": ("layer4", False),
    "vgg16": ("features.29", False),
    "efficientnet_lite0": ("_avg_pooling", True),
}


def cam_layer(loaded, layer: str | None = None, layer_input: bool | None = None) -> tuple[str, bool]:
    """(module path, use the module's input) for Grad-CAM on `loaded`."""
    if layer is not None:
        return layer, bool(layer_input)
    key = model_key(loaded)
    if key not in CAM_LAYERS:
        raise ValueError(
            f"Grad-CAM has no default layer for {key or type(loaded.model).__name__!r} "
            f"(known: {', '.join(CAM_LAYERS)}); pass layer='module.path'."
        )
    path, is_input = CAM_LAYERS[key]
    return path, is_input if layer_input is None else bool(layer_input)


def grad_cam(loaded, x: torch.Tensor, target: int, layer: str | None = None, layer_input: bool | None = None):
    """(1, 1, H, W) upsampled Grad-CAM map (≥ 0)."""
    path, is_input = cam_layer(loaded, layer, layer_input)
    try:
        module = loaded.model.get_submodule(path)
    except AttributeError as err:
        raise ValueError(f"The network has no module {path!r} for Grad-CAM.") from err
    cam = LayerGradCam(loaded.model, module).attribute(
        x, target=target, attribute_to_layer_input=is_input, relu_attributions=True
    )
    if isinstance(cam, tuple):
        cam = cam[0]
    if cam.dim() != 4:
        raise ValueError(f"Grad-CAM needs a convolutional layer (N, C, h, w); {path!r} gives {tuple(cam.shape)}.")
    return LayerAttribution.interpolate(cam.detach(), tuple(x.shape[-2:]), interpolate_mode="bilinear")


class GradCam(Method):
    key = "grad_cam"
    name = "Grad-CAM"
    signed = False
    description = "Last conv block's activations weighted by their mean gradient, rectified and upsampled."

    @classmethod
    def default_settings(cls) -> dict:
        return {"layer": None, "layer_input": None}

    def _compute(self, loaded, x, target):
        return grad_cam(loaded, x, target, self.settings["layer"], self.settings["layer_input"])[0, 0]


class GuidedGradCam(Method):
    key = "guided_grad_cam"
    name = "Guided Grad-CAM"
    signed = True
    description = "Guided Backprop times the upsampled Grad-CAM map, summed over colour channels."

    @classmethod
    def default_settings(cls) -> dict:
        return {"layer": None, "layer_input": None}

    def _compute(self, loaded, x, target):
        cam = grad_cam(loaded, x, target, self.settings["layer"], self.settings["layer_input"])
        return sum_channels(guided_gradient(loaded.model, x, target) * cam)
