"""Gradient, Saliency, Integrated Gradients, SmoothGrad and Guided Backprop against their definitions."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from method_helpers import TinyConvNet, wrap
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.methods.gradients import GuidedReLU, guided_copy


@pytest.fixture(scope="module")
def offline_gradient(offline_model, chelsea_x):
    """∂ logit_285 / ∂x per channel, computed directly with autograd."""
    x = chelsea_x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(offline_model.model(x)[0, 285], x)
    return grad[0]


def test_gradient_and_saliency_relation(offline_model, chelsea_x, offline_gradient):
    gradient = get_method("gradient").attribute(offline_model, chelsea_x, 285).values
    saliency = get_method("saliency").attribute(offline_model, chelsea_x, 285).values
    g = offline_gradient
    np.testing.assert_allclose(gradient, g.sum(dim=0).numpy(), rtol=1e-4, atol=1e-7)  # signed channel sum
    np.testing.assert_allclose(saliency, g.abs().amax(dim=0).numpy(), rtol=1e-4, atol=1e-7)  # Simonyan
    assert (saliency >= 0).all()
    assert (np.abs(gradient) <= 3 * saliency + 1e-6).all()
    assert (gradient < 0).any() and (gradient > 0).any(), "the gradient map keeps its sign"


def test_integrated_gradients_completeness():
    """Σ IG ≈ logit(x) − logit(mean-colour image) (Sundararajan et al.'s completeness axiom)."""
    net = TinyConvNet()
    x = torch.randn(1, 3, 10, 10, generator=torch.Generator().manual_seed(2))
    ig = get_method("integrated_gradients", steps=200).attribute(wrap(net), x, 1).values
    with torch.no_grad():
        gap = net(x)[0, 1] - net(x.mean(dim=(2, 3), keepdim=True).expand_as(x))[0, 1]
    assert ig.sum() == pytest.approx(float(gap), rel=1e-2, abs=1e-4)


def test_integrated_gradients_of_a_linear_model_is_gradient_times_difference():
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 6 * 6, 4))
    x = torch.randn(1, 3, 6, 6, generator=torch.Generator().manual_seed(3))
    ig = get_method("integrated_gradients", steps=3).attribute(wrap(net), x, 2).values
    w = net[1].weight[2].detach().reshape(3, 6, 6)
    expected = (w * (x[0] - x[0].mean(dim=(1, 2), keepdim=True))).sum(dim=0)
    np.testing.assert_allclose(ig, expected.numpy(), rtol=1e-4, atol=1e-6)


def test_smoothgrad_without_noise_is_saliency_and_is_reproducible():
    net = TinyConvNet()
    x = torch.randn(1, 3, 10, 10, generator=torch.Generator().manual_seed(4))
    saliency = get_method("saliency").attribute(wrap(net), x, 3).values
    no_noise = get_method("smoothgrad", samples=3, noise=0.0).attribute(wrap(net), x, 3).values
    np.testing.assert_allclose(no_noise, saliency, rtol=1e-4, atol=1e-6)
    state = torch.get_rng_state()
    a = get_method("smoothgrad", samples=5).attribute(wrap(net), x, 3).values
    b = get_method("smoothgrad", samples=5).attribute(wrap(net), x, 3).values
    np.testing.assert_array_equal(a, b)
    assert torch.equal(torch.get_rng_state(), state), "the global RNG is left alone"
    assert not np.allclose(a, saliency)


def test_smoothgrad_noise_is_fifteen_percent_of_the_input_range(monkeypatch):
    from captum.attr import NoiseTunnel

    seen = {}
    original = NoiseTunnel.attribute

    def spy(self, inputs, **kwargs):
        seen.update(kwargs)
        return original(self, inputs, **kwargs)

    monkeypatch.setattr(NoiseTunnel, "attribute", spy)
    x = torch.linspace(-1, 3, 3 * 8 * 8).reshape(1, 3, 8, 8)
    get_method("smoothgrad", samples=2).attribute(wrap(TinyConvNet()), x, 0).values
    assert seen["stdevs"] == pytest.approx(0.15 * 4.0)
    assert seen["nt_samples"] == 2 and seen["nt_type"] == "smoothgrad"
    assert get_method("smoothgrad").settings["samples"] == 50
    assert get_method("integrated_gradients").settings["steps"] == 50


@pytest.mark.parametrize("activation, upper", [(nn.ReLU, None), (nn.ReLU6, 6.0)])
def test_guided_backprop_equals_hand_computation(activation, upper):
    """f = v · act(W x): guided gradient = Wᵀ (max(v, 0) ⊙ [unit active]), active = 0 < Wx (< 6 for ReLU6)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, 20), activation(), nn.Linear(20, 2))
    net[1].weight.data *= 6  # push some ReLU6 units into saturation
    x = torch.randn(1, 3, 4, 4, generator=torch.Generator().manual_seed(1))
    pre = net[1](x.flatten(1))[0].detach()
    active = pre > 0
    if upper is not None:
        active &= pre < upper
        assert (pre > upper).any(), "the test should exercise the ReLU6 cap"
    v = net[3].weight[1].detach()
    expected = (net[1].weight.detach().T @ (v.clamp(min=0) * active)).reshape(3, 4, 4).sum(dim=0)
    got = get_method("guided_backprop").attribute(wrap(net), x, 1).values
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)
    assert type(net[2]) is activation, "the user's network keeps its own activation"


def test_guided_copy_replaces_reused_and_relu6_modules(resnet_random, offline_model):
    copy = guided_copy(resnet_random.model)
    assert not any(type(m) is nn.ReLU for m in copy.modules())
    assert isinstance(copy.layer1[0].relu, GuidedReLU)  # the module torchvision calls three times per block
    assert any(type(m) is nn.ReLU for m in resnet_random.model.modules())
    copy = guided_copy(offline_model.model)
    assert not any(type(m) is nn.ReLU6 for m in copy.modules())
    assert any(isinstance(m, GuidedReLU) and m.upper == 6.0 for m in copy.modules())
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():  # same forward function
        torch.testing.assert_close(copy(x), offline_model.model(x))


def test_guided_backprop_needs_relus():
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 2))
    with pytest.raises(UserError, match="ReLU"):
        get_method("guided_backprop").attribute(wrap(net), torch.zeros(1, 3, 2, 2), 0).values


def test_smoothgrad_reduction_as_in_the_papers_code():
    """reduce="mean": the signed channel mean of the averaged gradient (the IBA paper's code); default max |·|."""
    net = TinyConvNet()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    mean = get_method("smoothgrad", samples=3, noise=0.0, reduce="mean")
    assert mean.signed and not get_method("smoothgrad").signed
    gradient = get_method("gradient").attribute(wrap(net), x, 2).values  # signed channel sum
    np.testing.assert_allclose(mean.attribute(wrap(net), x, 2).values, gradient / 3, rtol=1e-4, atol=1e-7)
    with pytest.raises(UserError, match="reduction"):
        get_method("smoothgrad", reduce="median")
