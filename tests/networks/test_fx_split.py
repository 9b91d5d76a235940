"""Speed for any network: a torch.fx cut at the layer (prefix once, suffix per step), else the hook path."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from any_network_sizes import SIZES
from reference_impl import hook_count
from iba_core.errors import UserError
from iba_core.networks import network_from_module
from iba_core.networks.fx_split import CutError, cut_at
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.feature_stats import FeatureStats


def _image(size: int) -> torch.Tensor:
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2))


def _same(a, b) -> None:
    np.testing.assert_allclose(a.heatmap, b.heatmap, rtol=1e-4, atol=1e-6 * float(np.abs(b.heatmap).max()))
    assert a.total_bits == pytest.approx(b.total_bits, rel=1e-4)
    assert a.unlocated_bits == pytest.approx(b.unlocated_bits, rel=1e-4, abs=1e-6)
    assert a.p_with == pytest.approx(b.p_with, rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("name, layer, steps", [
    ("resnet18", "layer2", 4),
    ("vit_b_16", "encoder.layers.encoder_layer_5", 2),
])
def test_split_path_equals_hook_path(any_network, noise_stats, name, layer, steps):
    """Same seed, fp32: the fx cut (BatchNorms folded) gives the hook path's heatmap, bits and p(target)."""
    net = any_network(name)
    size = SIZES[name]
    stats = noise_stats(net, layer, size)
    settings = BottleneckSettings(steps=steps, batch=2, seed=0, precision="fp32")
    x = _image(size)
    fast = PerSampleBottleneck.for_network(net, layer, stats, settings)
    assert fast.path == "fx" and net.split_path(layer) == "fx" and not net.can_split
    split = fast.attribute(x, 3)
    hook = PerSampleBottleneck(net.model, net.hook_module(layer), stats, settings, net.layout(layer)).attribute(x, 3)
    assert split.path == "fx" and hook.path == "hook"
    _same(split, hook)
    assert hook_count(net.model) == 0


def test_cut_shares_the_modules_and_computes_the_network(any_network):
    net = any_network("resnet18")
    prefix, suffix = cut_at(net.model, "layer2", input_size=64)
    # the graph's modules are the network's own (fx rebuilds only the containers around them)
    assert suffix.get_submodule("layer3.0.conv1") is net.model.layer3[0].conv1
    assert prefix.get_submodule("layer2") is net.model.layer2  # the cut layer: one call, kept whole
    x = _image(64)
    with torch.no_grad():
        torch.testing.assert_close(suffix(prefix(x)), net.model(x))
        assert prefix(x).shape == (1, 128, 8, 8)


def test_a_skip_connection_around_the_layer_falls_back_to_the_hook(any_network, noise_stats):
    net = any_network("resnet18")
    layer = "layer2.0.conv1"  # the block's input crosses the cut on the skip connection
    assert net.split_path(layer) == "hook"
    assert "cross the cut" in net.fx_split_reason(layer) and "skip connection" in net.fx_split_reason(layer)
    stats = noise_stats(net, layer, 64)
    result = PerSampleBottleneck.for_network(net, layer, stats, BottleneckSettings(steps=1, batch=1)).attribute(
        _image(64), 3)
    assert result.path == "hook" and np.isfinite(result.heatmap).all() and hook_count(net.model) == 0


class Branchy(nn.Module):
    """Python control flow on a tensor value: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        if h.mean() > 100:  # data-dependent branch
            h = -h
        return self.fc(h.mean(dim=(2, 3)))


def test_an_untraceable_network_takes_the_hook_path():
    net = network_from_module(Branchy(), "branchy")
    assert net.split_path("conv") == "hook" and "cannot trace" in net.fx_split_reason("conv")
    with pytest.raises(CutError, match="no module"):
        cut_at(net.model, "nope")
    stats = FeatureStats(torch.zeros(4, 16, 16), torch.ones(4, 16, 16), 10)
    result = PerSampleBottleneck.for_network(net, "conv", stats, BottleneckSettings(steps=2, batch=2)).attribute(
        _image(16), 1)
    assert result.path == "hook" and result.heatmap.shape == (16, 16)


def test_hooks_and_flags_restored_on_errors(any_network):
    net = any_network("resnet18")
    wrong = FeatureStats(torch.zeros(7, 8, 8), torch.ones(7, 8, 8), 10)  # not layer2's shape
    settings = BottleneckSettings(precision="fp32")
    for path in ("fx", "hook"):
        iba = (PerSampleBottleneck.for_network(net, "layer2", wrong, settings) if path == "fx"
               else PerSampleBottleneck(net.model, "layer2", wrong, settings))
        with pytest.raises(UserError, match="Statistics are for a layer shaped"):
            iba.attribute(_image(64), 3)
        assert hook_count(net.model) == 0 and not net.model.training
        assert not any(p.requires_grad for p in net.model.parameters())


def test_the_trace_leaves_a_training_model_as_it_was():
    model = Branchy().train()
    model.conv.weight.requires_grad_(True)
    net_model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    net_model.train()
    prefix, suffix = cut_at(net_model, "1", input_size=8)
    assert net_model.training and all(m.training for m in net_model.modules())
    with pytest.raises(CutError):
        cut_at(model, "conv", input_size=8)
    assert model.training and model.conv.weight.requires_grad


SCALE = torch.tensor([2.0, 1.0, 0.5, 1.0]).view(1, 4, 1, 1)


class WithConstant(nn.Module):
    """Uses a module-level tensor: fx stores it on the traced module as `_tensor_constant0`."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc((self.conv(x) * SCALE).mean(dim=(2, 3)))


def test_the_cut_adds_nothing_to_the_network():
    model = WithConstant().eval()
    before = (set(vars(model)), set(model._buffers), set(model._parameters))
    prefix, suffix = cut_at(model, "conv", input_size=8)
    assert (set(vars(model)), set(model._buffers), set(model._parameters)) == before
    x = _image(8)
    with torch.no_grad():
        torch.testing.assert_close(suffix(prefix(x)), model(x))
