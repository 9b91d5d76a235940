"""Every registered method on any network: it works on torchvision's ResNet-18, ViT-B/16 and Swin-T (random
weights), or `available_for` says in one sentence why not."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from any_network_sizes import SIZES
from iba_core.errors import UserError
from iba_core.methods import get_method, method_keys
from reference_impl import hook_count

#: Cheap settings (the defaults are the paper's: 50 IG steps, 50 SmoothGrad samples, 10 IBA steps × 10 copies).
CHEAP = {
    "integrated_gradients": {"steps": 3, "batch": 3},
    "smoothgrad": {"samples": 3, "batch": 3},
    "iba_1": {"steps": 1, "batch": 1, "precision": "fp32"},  # fp32: no speed measurement
    "iba_10": {"steps": 1, "batch": 1, "precision": "fp32"},  # fp32: no speed measurement
    "iba_100": {"steps": 1, "batch": 1, "precision": "fp32"},  # fp32: no speed measurement
    "coiba": {"steps": 1, "batch": 1, "precision": "fp32"},  # fp32: no speed measurement
    "pattern_attribution": {"samples": 2},
    "score_cam": {"channels": 8},  # one forward pass per channel: 8, not 512 (ResNet-18) or 768 (Swin-T)
}

LRP = {"lrp_alpha1beta0", "lrp_epsilon", "lrp_alpha0beta1eps5"}
#: What cannot run, per network (PatternAttribution, owned elsewhere, is only held to "works or says why").
UNAVAILABLE = {
    "resnet18": LRP | {"readout"},
    "swin_t": LRP | {"readout", "guided_backprop", "guided_grad_cam"},
    "vit_b_16": LRP | {"readout", "guided_backprop", "guided_grad_cam"},  # the CAMs read encoder_layer_10's tokens
}
#: A word the reason names, per method (any of them).
REASON_WORDS = {"lrp_alpha1beta0": ("canonizers",), "readout": ("readout checkpoint",), "guided_backprop": ("ReLU",),
                "guided_grad_cam": ("ReLU", "Grad-CAM layer"), "grad_cam": ("Grad-CAM layer",),
                **{key: ("Grad-CAM layer",) for key in ("grad_cam_pp", "score_cam", "layer_cam", "eigen_cam")}}


def _state(model) -> tuple:
    """Flags, gradients and a checksum of the weights: what a method must leave as it found it."""
    params = list(model.parameters())
    return ([m.training for m in model.modules()], [p.requires_grad for p in params], [p.grad is None for p in params],
            float(sum(p.detach().double().sum() for p in params)))


def _is_one_sentence(text: str) -> bool:
    return bool(text) and "\n" not in text and text.rstrip().endswith(".") and not re.search(r"[.!?]\s+[A-Z]", text)


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("key", method_keys())
def test_method_works_or_says_why(any_network, noise_stats, name, key):
    net = any_network(name)
    size = SIZES[name]
    method = get_method(key)
    reason = method.available_for(net)
    if key != "pattern_attribution":
        assert (reason is not None) == (key in UNAVAILABLE[name]), reason
    if reason:
        assert _is_one_sentence(reason), reason
        words = REASON_WORDS.get("lrp_alpha1beta0" if key in LRP else key, ("",))
        assert any(word in reason for word in words), reason
        with pytest.raises(UserError, match="not available"):
            method.attribute(net, torch.zeros(1, 3, size, size), 3)
        return
    settings = dict(CHEAP.get(key, {}))
    if method.needs_stats:
        settings["stats"] = noise_stats(net, net.spec.default_layer, size)
    if key == "coiba":  # a two-layer range from the default layer (a ViT's next block, a CNN's next stage)
        layers = list(net.spec.layers)
        pair = layers[layers.index(net.spec.default_layer):][:2]
        settings["layers"] = (pair[0], pair[-1])
        settings["stats"] = {layer: noise_stats(net, layer, size) for layer in pair}
        settings["placement"] = "output"  # the given layers themselves (the preset's branch inputs: test_presets_everywhere)
    method = get_method(key, **settings)
    if key.startswith("occlusion") and name == "vit_b_16" and not os.environ.get("IBA_SLOW_TESTS"):
        # ViT-B takes only 224 px: 784 (8×8) or 256 (14×14) forward passes. The same code with 112 px tiles:
        # four passes (IBA_SLOW_TESTS=1 runs the real tile sizes).
        method = method.with_settings(size=112)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(5))
    before = _state(net.model)
    amap = method.attribute(net, x, 3)
    assert amap.values.shape == (size, size) and amap.values.dtype == np.float32
    assert np.isfinite(amap.values).all()
    if key != "random":
        assert np.abs(amap.values).max() > 0, "an all-zero map explains nothing"
    assert hook_count(net.model) == 0 and _state(net.model) == before
    if method.needs_stats:
        assert amap.extra["layer"] == net.spec.default_layer and amap.values.min() >= 0
