"""The method registry: keys, display names, settings, the shared interface."""
from __future__ import annotations

import pytest

from iba_core.errors import UserError
from iba_core.methods import METHODS, UnknownMethodError, display_names, get_method, method_keys
from iba_core.methods import Method

EXPECTED = {
    "random": "Random",
    "occlusion_8": "Occlusion-8×8",
    "occlusion_14": "Occlusion-14×14",
    "gradient": "Gradient",
    "saliency": "Saliency",
    "integrated_gradients": "Integrated Gradients",
    "smoothgrad": "SmoothGrad",
    "guided_backprop": "Guided Backprop",
    "grad_cam": "Grad-CAM",
    "guided_grad_cam": "Guided Grad-CAM",
    "grad_cam_pp": "Grad-CAM++",
    "score_cam": "Score-CAM",
    "layer_cam": "LayerCAM",
    "eigen_cam": "Eigen-CAM",
    "lrp_alpha1beta0": "LRP α=1, β=0",
    "lrp_epsilon": "LRP ε=0.25",
    "lrp_alpha0beta1eps5": "LRP α=0, β=1, ε=5",
    "pattern_attribution": "PatternAttribution",
    "iba_1": "Per-Sample IBA β=1/k",
    "iba_10": "Per-Sample IBA β=10/k",
    "iba_100": "Per-Sample IBA β=100/k",
    "coiba": "CoIBA β=1/k",
    "readout": "Readout Bottleneck",
}


def test_keys_and_names():
    assert method_keys() == list(EXPECTED) == list(METHODS)
    assert display_names() == EXPECTED


@pytest.mark.parametrize("key", list(EXPECTED))
def test_every_method_follows_the_interface(key):
    method = get_method(key)
    for name in Method.__annotations__:
        assert hasattr(method, name)
    assert callable(method.attribute)
    assert method.key == key
    assert isinstance(method.signed, bool) and isinstance(method.unit, str) and method.description
    assert method.unit == ("bits/pixel" if key.startswith("iba_") or key in ("coiba", "readout") else "")
    assert method.cost in ("fast", "slow") and isinstance(method.needs_stats, bool)
    assert get_method(key) is not method  # fresh instances


def test_settings():
    assert get_method("integrated_gradients", steps=8).settings["steps"] == 8
    assert get_method("smoothgrad", samples=3).settings["samples"] == 3
    assert get_method("iba_10", steps=2).settings == {**get_method("iba_10").settings, "steps": 2}
    with pytest.raises(UserError, match="no setting"):
        get_method("gradient", steps=3)
    # a key is a preset: settings given override it, and the method's key then names them
    assert get_method("occlusion_8", size=14).key == "occlusion_14"
    assert get_method("iba_10", beta_k=3).key == "iba_3" and get_method("iba_10", beta_k=3).settings["beta_k"] == 3
    with pytest.raises(UnknownMethodError, match="choose from"):
        get_method("deeplift")
    with pytest.raises(UserError):
        get_method("lrp_epsilon", rule="gamma")
    from iba_core.methods.occlusion import Occlusion

    with pytest.raises(UserError, match="≥ 1"):
        Occlusion(0)


def test_attributes_pages_read_instead_of_key_prefixes():
    slow = {k for k in method_keys() if get_method(k).cost == "slow"}
    assert slow == {"occlusion_8", "occlusion_14", "integrated_gradients", "smoothgrad", "iba_1", "iba_10", "iba_100",
                    "coiba", "pattern_attribution",  # patterns are estimated on first use
                    "score_cam"}  # one forward pass per channel of the CAM layer
    assert {k for k in method_keys() if get_method(k).needs_stats} == {"iba_1", "iba_10", "iba_100", "coiba"}


def test_methods_say_why_they_cannot_run(offline_model):
    """A derived spec knows no CAM layer or canonizer; a network without a shipped readout has none."""
    from torch import nn

    from iba_core.networks import load_network, network_from_module

    net = network_from_module(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                            nn.Linear(4, 2)), "toy")
    assert "Grad-CAM layer" in get_method("grad_cam").available_for(net)
    assert get_method("grad_cam", layer="1").available_for(net) is None
    assert "canonizers" in get_method("lrp_alpha1beta0").available_for(net)
    assert "canonizers" in get_method("lrp_alpha0beta1eps5").available_for(net)
    assert get_method("pattern_attribution").available_for(net) is None  # an nn.Sequential of plain layers
    assert get_method("saliency").available_for(net) is None
    assert get_method("readout").available_for(offline_model) is None
    resnet = load_network("resnet50", weights="random")
    assert "readout checkpoint" in get_method("readout").available_for(resnet)
    import torch

    with pytest.raises(UserError, match="not available"):
        get_method("lrp_epsilon").attribute(net, torch.zeros(1, 3, 8, 8), 0)


def test_resolve_methods_all_list_and_unknown():
    from iba_core.methods import resolve_methods

    assert [m.key for m in resolve_methods("saliency, grad_cam")] == ["saliency", "grad_cam"]
    assert len(resolve_methods("all")) == len(METHODS)
    with pytest.raises(UnknownMethodError, match="'nope'"):
        resolve_methods(["saliency", "nope"])


def test_methods_fitted_to_the_weights_are_not_sanity_checked():
    """The readout and PatternAttribution would need refitting on every randomised copy (paper §4.4)."""
    assert {k for k in method_keys() if not get_method(k).sanity_checkable} == {"readout", "pattern_attribution"}
