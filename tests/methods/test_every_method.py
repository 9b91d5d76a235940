"""Every registered method: a finite float32 H×W map, no hooks, model untouched — on all three networks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iba_core.methods import get_method, method_keys
from reference_impl import hook_count

from method_helpers import fast_method, fingerprint, stats_settings

ALL = method_keys()
OCCLUSION = {"occlusion_8", "occlusion_14"}
#: Methods that estimate patterns on first use (from 2 offline photos here: `fast_method`).
PATTERN_METHODS = {"pattern_attribution"}


def _check(amap, x, model, before):
    assert amap.values.shape == tuple(x.shape[-2:])
    assert amap.values.dtype == np.float32
    assert np.isfinite(amap.values).all()
    assert 0 < amap.seconds < 600  # measured: a method takes time, and not the suite's
    assert hook_count(model) == 0
    assert fingerprint(model) == before


@pytest.mark.parametrize("key", ALL)
def test_offline_model(key, offline_model, chelsea_x, offline_stats):
    x = chelsea_x
    if key in OCCLUSION:
        # One forward pass per tile (784 at 224 px: minutes on a shared CPU). The tile values themselves
        # are checked by hand on a tiny network; here the real crop, downsampled, keeps it to seconds.
        x = F.interpolate(chelsea_x, size=(64, 64), mode="bilinear", align_corners=False)
    reason = get_method(key).available_for(offline_model)
    if key in PATTERN_METHODS:  # beyond plain networks: BatchNorm, ReLU6 and skip connections
        assert reason is None, reason
    x_before = x.clone()
    before = fingerprint(offline_model.model)
    amap = fast_method(key).attribute(offline_model, x, 285)
    _check(amap, x, offline_model.model, before)
    assert torch.equal(x, x_before) and not x.requires_grad
    if key not in ("random",):
        assert np.abs(amap.values).max() > 0, "an all-zero map explains nothing"
    if get_method(key).needs_stats:
        assert amap.unit == "bits/pixel" and amap.values.min() >= 0
        assert amap.extra["layer"] == offline_model.spec.default_layer


@pytest.mark.parametrize("name", ["resnet50", "vgg16"])
@pytest.mark.parametrize("key", ALL)
def test_random_networks(key, name, random_networks, small_x, request):
    network, stats = random_networks[name]
    extra = stats_settings(key, network, stats)
    before = fingerprint(network.model)
    if key == "readout":  # no readout is trained for these networks: the method says so, and why
        assert "readout checkpoint" in get_method(key).available_for(network)
        return
    if key in PATTERN_METHODS and name == "vgg16":  # ResNet-50: from 2 offline photos (`fast_method`)
        extra["patterns"] = request.getfixturevalue("vgg_patterns")
    amap = fast_method(key, **extra).attribute(network, small_x, 7)
    _check(amap, small_x, network.model, before)


def test_signed_and_unsigned_flags():
    unsigned = {k for k in ALL if not get_method(k).signed}
    assert unsigned == {"random", "saliency", "smoothgrad", "grad_cam", "grad_cam_pp", "score_cam", "layer_cam",
                        "eigen_cam", "iba_1", "iba_10", "iba_100", "coiba", "readout"}
    assert {"lrp_alpha0beta1eps5", "pattern_attribution"} <= set(ALL)
