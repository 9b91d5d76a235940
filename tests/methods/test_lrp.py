"""LRP: canonised copies compute the same function; the rules match known identities on small networks."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from zennit.core import Composite
from zennit.layer import Sum

from method_helpers import wrap
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.methods.base import working_copy
from iba_core.methods.lrp import canonizers_for
from iba_core.networks.efficientnet_lite import has_identity_skip


def _bias_free_net() -> nn.Module:
    torch.manual_seed(5)
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.ReLU(),
        nn.Conv2d(6, 8, 3, stride=2, padding=1, bias=False), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3, bias=False),
    )


@pytest.mark.parametrize("name", ["offline", "resnet50", "vgg16"])
def test_canonised_copy_computes_the_same_logits(name, offline_model, resnet_random, vgg_random):
    network = {"offline": offline_model, "resnet50": resnet_random, "vgg16": vgg_random}[name]
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    model = working_copy(network.model)
    with torch.no_grad():
        reference = model(x)
        with Composite(canonizers=canonizers_for(network, model)).context(model) as canonised:
            sums = sum(isinstance(m, Sum) for m in canonised.modules())
            got = canonised(x)
        after = model(x)
    scale = float(reference.abs().max())
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-5 * scale)
    torch.testing.assert_close(after, reference, rtol=0, atol=0)  # canonizers removed cleanly
    expected_sums = {"resnet50": 16, "vgg16": 0}.get(name)
    if expected_sums is None:  # EfficientNet: one Sum per MBConv block with an identity skip
        expected_sums = sum(has_identity_skip(b) for b in network.model._blocks)
        assert 0 < expected_sums < len(network.model._blocks)
    assert sums == expected_sums


def test_epsilon_rule_with_tiny_epsilon_is_gradient_times_input():
    """For a bias-free ReLU network LRP-0 equals gradient ⊙ input (Ancona et al. 2018) when it starts from
    the logit; our maps start from relevance 1, so they are gradient ⊙ input / logit."""
    net = _bias_free_net()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    got = get_method("lrp_epsilon", epsilon=1e-9).attribute(wrap(net), x, 2).values
    xr = x.clone().requires_grad_(True)
    logit = net(xr)[0, 2]
    (grad,) = torch.autograd.grad(logit, xr)
    expected = (grad * x)[0].sum(dim=0).numpy() / float(logit.detach())
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-6 * np.abs(expected).max())


def test_alpha1beta0_is_non_negative_and_conservative_without_biases():
    net = _bias_free_net()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert net(x)[0, 0] != 0
    relevance = get_method("lrp_alpha1beta0").attribute(wrap(net), x, 0).values
    assert (relevance >= -1e-7).all()
    assert relevance.sum() == pytest.approx(1.0, rel=1e-3)  # relevance 1 at the target logit is conserved


def test_lrp_names_and_settings():
    assert get_method("lrp_alpha1beta0").name == "LRP α=1, β=0"
    assert get_method("lrp_epsilon").name == "LRP ε=0.25"
    assert get_method("lrp_epsilon", epsilon=5).name == "LRP ε=5"
    assert get_method("lrp_epsilon").settings == {"rule": "epsilon", "epsilon": 0.25}
    assert get_method("lrp_alpha0beta1eps5").settings == {"rule": "alpha0beta1", "epsilon": 5.0}
    assert get_method("lrp_alpha0beta1eps5").name == "LRP α=0, β=1, ε=5"
    # a key names the settings it was made with: another ε, another key
    assert get_method("lrp_alpha0beta1eps5", epsilon=1).key == "lrp_alpha0beta1eps1"
    assert get_method("lrp_alpha0beta1eps5", epsilon=5).key == "lrp_alpha0beta1eps5"
    assert get_method("lrp_epsilon", epsilon=0.1).key == "lrp_epsilon0_1"
    with pytest.raises(UserError):
        get_method("lrp_epsilon", gamma=1)


def _stabilised(d: np.ndarray, eps: float) -> np.ndarray:
    return d + eps * np.where(d == 0, 1.0, np.sign(d))


def test_alpha0beta1eps5_by_hand():
    """Böhle & Eitel's rule with β = −1: R_i = Σ_j z⁻_ij / (Σ_i z⁻_ij − ε) R_j, z⁻_ij = min(x_i w_ij, 0), biases
    left out; ReLUs pass relevance on. Checked on Flatten → Linear → ReLU → Linear with signed inputs."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 6), nn.ReLU(), nn.Linear(6, 3))
    x = torch.randn(1, 3, 2, 2, generator=torch.Generator().manual_seed(3))
    target, eps = 1, 5.0
    got = get_method("lrp_alpha0beta1eps5").attribute(wrap(net), x, target).values

    W1, b1 = net[1].weight.double().numpy(), net[1].bias.double().numpy()
    W2 = net[3].weight.double().numpy()
    xv = x.double().numpy().reshape(-1)
    hidden = np.maximum(W1 @ xv + b1, 0)
    z2 = np.minimum(hidden * W2[target], 0)
    r_hidden = z2 / _stabilised(z2.sum(), eps)
    z1 = np.minimum(xv[None, :] * W1, 0)  # (hidden, input)
    r_input = (z1 / _stabilised(z1.sum(1), eps)[:, None] * r_hidden[:, None]).sum(0)
    assert np.abs(r_input).max() > 0
    np.testing.assert_allclose(got, r_input.reshape(3, 2, 2).sum(0), rtol=1e-4, atol=1e-12)
    # ε → 0: relevance 1 is conserved through every neuron that has negative contributions
    tight = get_method("lrp_alpha0beta1eps5", epsilon=1e-9).attribute(wrap(net), x, target).values
    assert z2.sum() < 0 and (tight >= 0).all()
    passes = z1.sum(1) < 0  # hidden neurons that hand their relevance on
    assert tight.sum() == pytest.approx(float(z2[passes].sum() / z2.sum()), rel=1e-4)


def test_alpha0beta1eps5_is_non_negative_on_relu_networks(vgg_random, small_x):
    """Negative contributions over a negative denominator: relevance keeps its sign through every layer."""
    values = get_method("lrp_alpha0beta1eps5").attribute(vgg_random, small_x, 7).values
    assert (values >= 0).all() and values.max() > 0


@pytest.mark.parametrize("name", ["offline", "resnet50"])
def test_alpha0beta1eps5_runs_with_the_spec_canonizers(name, offline_model, resnet_random):
    """Beyond the paper (no skip-connection support there): the canonizers make it run on both."""
    from method_helpers import fingerprint

    network = {"offline": offline_model, "resnet50": resnet_random}[name]
    before = fingerprint(network.model)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(4))
    values = get_method("lrp_alpha0beta1eps5").attribute(network, x, 3).values
    assert np.isfinite(values).all() and np.abs(values).max() > 0
    assert fingerprint(network.model) == before
