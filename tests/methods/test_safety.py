"""No hooks, gradients or flag changes are left behind: after success, a bad target, or a failing network."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from method_helpers import TinyConvNet, fast_method, fingerprint, stats_settings, wrap
from iba_core.errors import UserError
from iba_core.methods import get_method, method_keys
from reference_impl import hook_count

#: No readout is trained for the random networks here; PatternAttribution would first estimate patterns:
#: test_pattern.py and test_pattern_graph.py check the same for it.
ALL = [k for k in method_keys() if k not in ("readout", "pattern_attribution")]
RUNS_THE_NETWORK = [k for k in ALL if k != "random"]
#: Methods with more than one forward pass: the second call fails mid-way through them.
MULTI_PASS = ["occlusion_8", "occlusion_14", "integrated_gradients", "smoothgrad", "guided_grad_cam",
              "iba_1", "iba_10", "iba_100", "coiba", "score_cam"]
FAILURES = [(k, 1) for k in RUNS_THE_NETWORK] + [(k, 2) for k in MULTI_PASS]


class Boom(RuntimeError):
    pass


def raise_on_call(n: int):
    calls = {"n": 0}

    def hook(module, inputs, output):
        calls["n"] += 1
        if calls["n"] >= n:
            raise Boom(f"forward call {calls['n']}")

    return hook


def _method(key, random_networks, network="resnet50"):
    net, stats = random_networks[network]
    extra = stats_settings(key, net, stats)
    if key in ("integrated_gradients", "smoothgrad"):
        extra["batch"] = 2  # several passes
    return fast_method(key, **extra)


@pytest.fixture(scope="module")
def resnet_before(random_networks):
    return fingerprint(random_networks["resnet50"][0].model)


@pytest.mark.parametrize("key", ALL)
def test_target_out_of_range(key, random_networks, small_x, resnet_before):
    network, _ = random_networks["resnet50"]
    before = resnet_before
    for bad in (1000, -1):
        with pytest.raises(UserError, match="out of range"):
            _method(key, random_networks).attribute(network, small_x, bad).values
    with pytest.raises(TypeError):
        _method(key, random_networks).attribute(network, small_x, 1.5).values
    assert fingerprint(network.model) == before


@pytest.mark.parametrize("key, nth", FAILURES)
def test_failing_forward_leaves_no_trace(key, nth, random_networks, small_x, resnet_before):
    """A forward hook on the classifier raises on its n-th call; only that hook remains afterwards."""
    network, _ = random_networks["resnet50"]
    before = resnet_before
    handle = network.model.fc.register_forward_hook(raise_on_call(nth))
    try:
        with pytest.raises(Boom):
            _method(key, random_networks).attribute(network, small_x, 3).values
        assert hook_count(network.model) == 1
    finally:
        handle.remove()
    assert fingerprint(network.model) == before
    assert hook_count(network.model) == 0


def test_random_map_does_not_run_the_network(random_networks, small_x):
    network, _ = random_networks["resnet50"]
    handle = network.model.fc.register_forward_hook(raise_on_call(1))
    try:
        values = fast_method("random").attribute(network, small_x, 3).values
    finally:
        handle.remove()
    assert values.shape == (32, 32) and (values >= 0).all() and (values < 1).all()


#: The methods that run on any module (the bottlenecks need named layers, M2IB's too though it needs no statistics)
GENERIC = [k for k in ALL if get_method(k).available_for(wrap(TinyConvNet())) is None]


@pytest.mark.parametrize("key", GENERIC)
def test_user_flags_gradients_and_train_mode_are_restored(key):
    """A network in train mode with some trainable parameters and a stale .grad gets them all back."""
    net = TinyConvNet()
    net.train()
    net.conv1.weight.requires_grad_(True)
    net.fc.bias.requires_grad_(True)
    stale = torch.ones_like(net.fc.bias)
    net.fc.bias.grad = stale
    network = wrap(net)
    net.train()  # wrap() sets eval; we want train mode here
    net.conv1.weight.requires_grad_(True)
    net.fc.bias.requires_grad_(True)
    state = [(m.training) for m in net.modules()], [p.requires_grad for p in net.parameters()]
    settings = {"layer": "act2"} if "cam" in key else {}
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    values = fast_method(key, **settings).attribute(network, x, 1).values
    assert np.isfinite(values).all() and values.shape == (16, 16)
    assert ([(m.training) for m in net.modules()], [p.requires_grad for p in net.parameters()]) == state
    assert net.fc.bias.grad is stale and net.conv1.weight.grad is None
    assert hook_count(net) == 0


def test_methods_run_in_eval_mode():
    """Dropout active in train mode would make the maps random; every method sees the eval network."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Dropout(0.9), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 2))
    network = wrap(net)
    net.train()
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    a = fast_method("gradient").attribute(network, x, 0).values
    b = fast_method("gradient").attribute(network, x, 0).values
    np.testing.assert_array_equal(a, b)
    assert net.training


def test_input_is_not_modified():
    network = wrap(TinyConvNet())
    x0 = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    x = x0.clone()
    for key in GENERIC:
        fast_method(key, **({"layer": "act2"} if "cam" in key else {})).attribute(network, x, 1).values
    assert torch.equal(x, x0) and not x.requires_grad and x.grad is None
