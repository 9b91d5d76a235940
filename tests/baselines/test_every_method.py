"""Every registered method: a finite float32 H×W map, no hooks, model untouched — on all three networks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iba_core.baselines import method_keys, run_method
from iba_core.model_state import hook_count

from baseline_helpers import fast_method, fingerprint

ALL = method_keys()
OCCLUSION = {"occlusion_8", "occlusion_14"}


def _check(amap, x, model, before):
    assert amap.values.shape == tuple(x.shape[-2:])
    assert amap.values.dtype == np.float32
    assert np.isfinite(amap.values).all()
    assert amap.seconds >= 0
    assert hook_count(model) == 0
    assert fingerprint(model) == before


@pytest.mark.parametrize("key", ALL)
def test_offline_model(key, offline_model, chelsea_x, offline_stats):
    x = chelsea_x
    if key in OCCLUSION:
        # One forward pass per tile (784 at 224 px: minutes on a shared CPU). The tile values themselves
        # are checked by hand on a tiny network; here the real crop, downsampled, keeps it to seconds.
        x = F.interpolate(chelsea_x, size=(64, 64), mode="bilinear", align_corners=False)
    x_before = x.clone()
    before = fingerprint(offline_model.model)
    amap = run_method(fast_method(key), offline_model, x, 285)
    _check(amap, x, offline_model.model, before)
    assert torch.equal(x, x_before) and not x.requires_grad
    if key not in ("random",):
        assert np.abs(amap.values).max() > 0, "an all-zero map explains nothing"
    if key.startswith("iba_"):
        assert amap.unit == "bits/pixel" and amap.values.min() >= 0
        assert amap.extra["layer"] == offline_model.spec.default_layer


@pytest.mark.parametrize("network", ["resnet50", "vgg16"])
@pytest.mark.parametrize("key", ALL)
def test_random_networks(key, network, random_networks, small_x):
    loaded, stats = random_networks[network]
    extra = {"stats": stats} if key.startswith("iba_") else {}
    before = fingerprint(loaded.model)
    amap = run_method(fast_method(key, **extra), loaded, small_x, 7)
    _check(amap, small_x, loaded.model, before)


def test_signed_and_unsigned_flags():
    from iba_core.baselines import get_method

    unsigned = {k for k in ALL if not get_method(k).signed}
    assert unsigned == {"random", "saliency", "smoothgrad", "grad_cam", "iba_1", "iba_10", "iba_100"}
