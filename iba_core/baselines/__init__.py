"""Attribution baselines of the paper (§4.1, Table 2) and the Per-Sample Bottleneck, behind one interface.

    >>> from iba_core.baselines import get_method, method_keys, run_method
    >>> method = get_method("integrated_gradients", steps=8)
    >>> amap = run_method(method, loaded, x, target)      # AttributionMap: values (H, W), seconds, …

Every method returns a finite float32 (H, W) array for one preprocessed image, explains the target
class's logit (IBA: its cross-entropy), leaves no hooks, gradients or flag changes on the user's network
(also after an error), and runs on registered networks (`iba_core.models`) — most also on any
`nn.Module` classifier wrapped as an object with `.model`.

Keys (registry order = display order):
    random, occlusion_8, occlusion_14, gradient, saliency, integrated_gradients, smoothgrad,
    guided_backprop, grad_cam, guided_grad_cam, lrp_alpha1beta0, lrp_epsilon, iba_1, iba_10, iba_100
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from .base import AttributionMap, AttributionMethod, run_method
from .cam import CAM_LAYERS, GradCam, GuidedGradCam
from .gradients import GuidedBackprop, Gradient, IntegratedGradients, Saliency, SmoothGrad
from .iba import PerSampleIBA
from .lrp import LRP
from .occlusion import Occlusion
from .random_map import RandomMap

MethodFactory = Callable[..., AttributionMethod]

#: key → factory(**settings) returning a method. Order is the display order of comparison grids.
METHODS: dict[str, MethodFactory] = {
    "random": RandomMap,
    "occlusion_8": partial(Occlusion, 8),
    "occlusion_14": partial(Occlusion, 14),
    "gradient": Gradient,
    "saliency": Saliency,
    "integrated_gradients": IntegratedGradients,
    "smoothgrad": SmoothGrad,
    "guided_backprop": GuidedBackprop,
    "grad_cam": GradCam,
    "guided_grad_cam": GuidedGradCam,
    "lrp_alpha1beta0": partial(LRP, "alpha1beta0"),
    "lrp_epsilon": partial(LRP, "epsilon"),
    "iba_1": partial(PerSampleIBA, 1.0),
    "iba_10": partial(PerSampleIBA, 10.0),
    "iba_100": partial(PerSampleIBA, 100.0),
}

class UnknownMethodError(ValueError):
    """A method key the registry does not know."""


def method_keys() -> list[str]:
    """All registered method keys, in display order."""
    return list(METHODS)


def get_method(key: str, **settings) -> AttributionMethod:
    """A fresh method instance; `settings` override its defaults (e.g. steps=8). Unknown keys raise ValueError."""
    try:
        factory = METHODS[key]
    except KeyError:
        raise UnknownMethodError(f"Unknown attribution method {key!r}; choose from: {', '.join(METHODS)}.") from None
    try:
        return factory(**settings)
    except TypeError as err:  # e.g. a setting the key already fixes (occlusion_8 with size=14)
        raise ValueError(f"Invalid settings for {key!r}: {err}") from None


def display_names() -> dict[str, str]:
    """key → display name with default settings, e.g. {"occlusion_8": "Occlusion-8×8", …}."""
    return {key: get_method(key).name for key in METHODS}


__all__ = [
    "AttributionMap", "AttributionMethod", "CAM_LAYERS", "METHODS", "MethodFactory",
    "UnknownMethodError", "display_names", "get_method", "method_keys", "run_method",
]
