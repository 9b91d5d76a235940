"""Vision transformers: the bottleneck on a block's patch tokens, viewed as a map; the class token's bits."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from reference_impl import hook_count
from iba_core.networks import network_from_module
from iba_core.networks.tokens import FeatureLayout
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.feature_stats import FeatureStats, compute_stats, estimate_stats
from tiny_transformer import TinyViT

FAST = BottleneckSettings(steps=2, batch=2, precision="fp32")


def _image(size: int, seed: int = 2) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _check_heatmap(result, size: int = 224) -> None:
    assert result.heatmap.shape == (size, size)
    assert np.isfinite(result.heatmap).all() and result.heatmap.std() > 0  # finite and not constant
    assert result.heatmap.min() >= 0
    # bits on the patch grid are the heatmap; the class token's are counted apart
    assert result.heatmap.sum() == pytest.approx(result.total_bits - result.unlocated_bits, rel=1e-4)


@pytest.mark.parametrize("name, grid, unlocated", [("vit_b_16", (14, 14), True), ("swin_t", (14, 14), False)])
def test_random_transformers_give_finite_non_constant_224_heatmaps(any_network, noise_stats, name, grid, unlocated):
    net = any_network(name)
    layer = net.spec.default_layer
    stats = noise_stats(net, layer, 224)
    result = PerSampleBottleneck.for_network(net, layer, stats, FAST).attribute(_image(224), 3)
    _check_heatmap(result)
    assert result.feature_bits.shape == grid and result.lambda_mean.shape == grid
    assert result.path == "fx" and hook_count(net.model) == 0
    assert (result.unlocated_bits > 0) == unlocated
    assert result.summary()["unlocated_bits"] == result.unlocated_bits


def test_statistics_of_a_token_layer_and_their_map_view(any_network):
    """get_stats' estimator on a ViT block: per element in the layer's layout; its map view per token channel."""
    net = any_network("vit_b_16")
    layer = net.spec.default_layer
    stats = compute_stats(net, layer, n=2, batch_size=2)
    assert stats.mean.shape == (197, 768) and stats.n == 2 and torch.isfinite(stats.std).all()
    grid, cls = net.layout(layer).to_map_stats(stats.mean)
    assert grid.shape == (768, 14, 14) and cls.shape == (768, 1, 1)
    assert torch.equal(grid[:, 3, 5], stats.mean[1 + 3 * 14 + 5]) and torch.equal(cls[:, 0, 0], stats.mean[0])


# ---- the class token, on a tiny transformer (fast) ------------------------------------------------------


def _tiny(class_token: bool):
    net = network_from_module(TinyViT(class_token), f"tiny-vit-{class_token}")
    layer = net.spec.default_layer  # blocks.1
    g = torch.Generator().manual_seed(1)
    mean, std, n = estimate_stats(net.prefix(layer), [torch.randn(16, 3, 32, 32, generator=g)])
    return net, layer, FeatureStats(mean, std, n)


@pytest.mark.parametrize("class_token", [True, False])
def test_class_token_bits_count_in_the_total_not_in_the_heatmap(class_token):
    net, layer, stats = _tiny(class_token)
    # found at 224 px (a 28×28 grid); at 32 px the same layout gives the 4×4 grid
    assert net.layout(layer) == FeatureLayout("nlc", (28, 28), 1 if class_token else 0)
    assert net.layout(layer).grid_for(16 + class_token) == (4, 4)
    settings = BottleneckSettings(steps=5, batch=4, precision="fp32", read_point="last_step")
    result = PerSampleBottleneck.for_network(net, layer, stats, settings).attribute(_image(32), 1)
    _check_heatmap(result, 32)
    assert result.feature_shape == (8, 4, 4)
    if class_token:
        assert result.unlocated_bits > 0
    else:
        assert result.unlocated_bits == 0 and result.heatmap.sum() == pytest.approx(result.total_bits, rel=1e-5)
    # The information term of the loss (nats) holds the class token's bits too: total = L_I / ln 2.
    assert result.total_bits == pytest.approx(result.history[-1].info / math.log(2), rel=1e-4)


def test_class_token_has_its_own_bottleneck():
    """A large β squeezes the class token too: it is not let through (it would carry every patch's content)."""
    net, layer, stats = _tiny(True)
    bits = {}
    for beta_k in (0.1, 1000.0):
        s = BottleneckSettings(beta_k=beta_k, steps=10, batch=4, precision="fp32")
        bits[beta_k] = PerSampleBottleneck.for_network(net, layer, stats, s).attribute(_image(32), 1).unlocated_bits
    assert bits[1000.0] < 0.5 * bits[0.1]


def test_tiny_transformer_split_equals_hook():
    net, layer, stats = _tiny(True)
    fast = PerSampleBottleneck.for_network(net, layer, stats, FAST)
    hook = PerSampleBottleneck(net.model, layer, stats, FAST)  # layout guessed from the statistics' (17, 8)
    assert fast.path == "fx" and hook.layout == FeatureLayout("nlc", (4, 4), 1)
    a, b = fast.attribute(_image(32), 2), hook.attribute(_image(32), 2)
    np.testing.assert_allclose(a.heatmap, b.heatmap, rtol=1e-4)
    assert a.unlocated_bits == pytest.approx(b.unlocated_bits, rel=1e-4)


@pytest.mark.skipif(not os.environ.get("IBA_SLOW_TESTS"), reason="the paper's defaults on ViT-B / Swin-T on CPU take "
                    "minutes; set IBA_SLOW_TESTS=1")
@pytest.mark.parametrize("name", ["vit_b_16", "swin_t"])
def test_transformers_with_default_settings(any_network, noise_stats, name):
    net = any_network(name)
    layer = net.spec.default_layer
    result = PerSampleBottleneck.for_network(net, layer, noise_stats(net, layer, 224)).attribute(_image(224), 3)
    _check_heatmap(result)
    assert len(result.history) == BottleneckSettings().steps
