"""CoIBA (`iba_core/coiba.py`): one mask across a range of layers, checked against the Per-Sample Bottleneck, a
hand-written reference of the paper's equations and the closed-form information of a linear-Gaussian chain."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.coiba import (
    CoIBABottleneck,
    CoIBASettings,
    default_range,
    layer_range,
    range_label,
    resize_mask,
    stats_for_range,
)
from iba_core.errors import UserError
from iba_core.feature_stats import FeatureStats, estimate_stats
from iba_core.networks import network_from_module
from iba_core.networks.spec import Network, NetworkSpec, Preprocess
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from reference_impl import hook_count

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 16  # input side of the small CNN: its grids are 16 × 16 (c1, c2) and 8 × 8 (c3)


class SmallCNN(nn.Module):
    """Three stages (the last halves the grid) and a linear head; BatchNorm with running statistics that are
    not the identity, so folding it changes the arithmetic, not the function."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5))
        with torch.no_grad():
            self.c1[1].running_mean.uniform_(-0.5, 0.5)
            self.c1[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.c3(self.c2(self.c1(x))))


def small_cnn(staged: bool = True) -> Network:
    """SmallCNN as a Network: with a stage list (the stages path) or without (fx, else the hook path)."""
    model = SmallCNN().eval()
    stages = (lambda m: [("c1", m.c1), ("c2", m.c2), ("c3", m.c3), (None, m.head)]) if staged else None
    spec = NetworkSpec(key=f"small-cnn-{staged}", title="Small CNN", build=lambda state: model,
                       layers=("c1", "c2", "c3"), default_layer="c1", stages=stages,
                       hook_modules={"c1": "c1", "c2": "c2", "c3": "c3"}, resize=SIZE, crop=SIZE)
    return Network(spec, model, "random", torch.device("cpu"), Preprocess.of(spec), [])


def layer_stats(network, layers, size: int = SIZE) -> dict[str, FeatureStats]:
    """Statistics of each layer on random images of `size` pixels."""
    out = {}
    for layer in layers:
        g = torch.Generator().manual_seed(1)
        batches = [torch.randn(16, 3, size, size, generator=g) for _ in range(2)]
        mean, std, n = estimate_stats(network.prefix(layer), batches)
        out[layer] = FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")
    return out


def images(n: int, size: int = SIZE, seed: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def tiny_vit():
    """The tiny ViT of tests/networks (a class token that mixes every patch)."""
    spec = importlib.util.spec_from_file_location(
        "tiny_transformer", Path(__file__).parent / "networks" / "tiny_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return network_from_module(module.TinyViT(True), "tiny-vit-coiba")


FAST = dict(steps=3, batch=3, precision="fp32")


# ---- (a) a one-layer range with one λ per unit is the Per-Sample Bottleneck ------------------------------------


@pytest.mark.parametrize("staged", [True, False])
def test_one_layer_element_mask_is_the_per_sample_bottleneck(staged):
    net = small_cnn(staged)
    stats = layer_stats(net, ["c2"])
    x = images(1)
    coiba = CoIBABottleneck.for_network(net, ["c2"], stats, CoIBASettings(sigma=1.0, mask="element", **FAST))
    iba = PerSampleBottleneck.for_network(net, "c2", stats["c2"], BottleneckSettings(sigma=1.0, **FAST))
    got, want = coiba.attribute(x, 2), iba.attribute(x, 2)
    assert got.path == want.path
    np.testing.assert_allclose(got.heatmap, want.heatmap, rtol=1e-4, atol=1e-6 * want.heatmap.max())
    assert got.total_bits == pytest.approx(want.total_bits, rel=1e-4)
    assert got.p_with == pytest.approx(want.p_with, rel=1e-4)


def test_one_layer_element_mask_is_the_per_sample_bottleneck_on_a_vit():
    net = tiny_vit()
    layer = net.spec.default_layer
    stats = layer_stats(net, [layer], size=32)
    x = images(1, 32)
    coiba = CoIBABottleneck.for_network(net, [layer], stats, CoIBASettings(sigma=1.0, mask="element", **FAST))
    want = PerSampleBottleneck.for_network(net, layer, stats[layer], BottleneckSettings(sigma=1.0, **FAST)).attribute(x, 1)
    got = coiba.attribute(x, 1)
    np.testing.assert_allclose(got.heatmap, want.heatmap, rtol=1e-4, atol=1e-6 * want.heatmap.max())
    assert got.total_bits == pytest.approx(want.total_bits, rel=1e-4)
    assert got.unlocated_bits == pytest.approx(want.unlocated_bits, rel=1e-4) and got.unlocated_bits > 0


# ---- (i) the method on the offline network -------------------------------------------------------------------


def test_the_method_on_the_offline_network(offline_model, chelsea_x):
    from iba_core.methods import get_method

    method = get_method("coiba", steps=2, batch=2)
    assert method.key == "coiba" and method.name == "CoIBA β=10/k" and method.needs_stats and method.batched
    amap = method.attribute(offline_model, chelsea_x, 285)
    assert amap.values.shape == (224, 224) and np.isfinite(amap.values).all() and amap.values.min() >= 0
    extra = amap.extra
    assert extra["layers"][0] == "block3_2" and extra["layers"][-1] == "block7_1" and len(extra["layers"]) == 12
    assert extra["total_bits"] > 0 and 0 <= extra["p_with"] <= 1 and extra["path"] == "stages"
    assert float(amap.values.sum()) == pytest.approx(extra["total_bits"], rel=1e-3)
    assert method.settings_identity(offline_model)["layers"] == extra["layers"]
    assert hook_count(offline_model.model) == 0
