"""The method registry: keys, display names, settings, the shared interface."""
from __future__ import annotations

import pytest

from iba_core.baselines import METHODS, UnknownMethodError, display_names, get_method, method_keys
from iba_core.baselines.base import AttributionMethod

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
    "lrp_alpha1beta0": "LRP α=1, β=0",
    "lrp_epsilon": "LRP ε=0.25",
    "iba_1": "Per-Sample IBA β=1/k",
    "iba_10": "Per-Sample IBA β=10/k",
    "iba_100": "Per-Sample IBA β=100/k",
}


def test_keys_and_names():
    assert method_keys() == list(EXPECTED) == list(METHODS)
    assert display_names() == EXPECTED


@pytest.mark.parametrize("key", list(EXPECTED))
def test_every_method_follows_the_interface(key):
    method = get_method(key)
    for name in AttributionMethod.__annotations__:
        assert hasattr(method, name)
    assert callable(method.attribute)
    assert method.key == key
    assert isinstance(method.signed, bool) and isinstance(method.unit, str) and method.description
    assert method.unit == ("bits/pixel" if key.startswith("iba_") else "")
    assert get_method(key) is not method  # fresh instances


def test_settings():
    assert get_method("integrated_gradients", steps=8).settings["steps"] == 8
    assert get_method("smoothgrad", samples=3).settings["samples"] == 3
    assert get_method("iba_10", steps=2).settings == {**get_method("iba_10").settings, "steps": 2}
    with pytest.raises(ValueError, match="no setting"):
        get_method("gradient", steps=3)
    with pytest.raises(ValueError):
        get_method("occlusion_8", size=14)  # the key fixes the tile size
    with pytest.raises(UnknownMethodError, match="choose from"):
        get_method("deeplift")
    with pytest.raises(ValueError):
        get_method("lrp_epsilon", rule="gamma")
    from iba_core.baselines.occlusion import Occlusion

    with pytest.raises(ValueError, match="≥ 1"):
        Occlusion(0)
