"""Which source a refused state dict fits (`state_match`), and what `fit_state_dict` says when only the output layer
differs."""
from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from iba_core.networks import REGISTRY, WeightsMismatchError
from iba_core.networks.state_files import compare_state, fit_state_dict, output_layer
from iba_core.networks.state_match import PROBE_CLASSES, SourceFit, fitting_sources, source_hint


def sorted_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with its keys sorted, as a safetensors file gives them back (module order is lost)."""
    return dict(sorted(model.state_dict().items()))


def test_a_torchvision_state_is_named_with_its_head_size_whatever_the_key_order() -> None:
    import torchvision

    state = sorted_state(torchvision.models.resnet18(num_classes=7))
    found = fitting_sources(state, budget_s=60)  # (a loaded machine must not make it miss)
    assert found[0] == SourceFit("torchvision", "resnet18", 7) and found[0].card_arch == "torchvision:resnet18"
    assert all(fit.classes == 7 for fit in found)
    clause, cli, app = source_hint(state)
    assert clause == "; these weights look like torchvision's resnet18 with a 7-class head"
    assert 'arch = "torchvision:resnet18"' in cli and "7 names" in app


def test_a_builtin_backbone_is_named_before_torchvision() -> None:
    state = sorted_state(REGISTRY["efficientnet_lite0"].with_classes(5))
    assert fitting_sources(state, first_only=True) == [SourceFit("builtin", "efficientnet_lite0", 5)]
    assert SourceFit("builtin", "efficientnet_lite0", 5).describe() == (
        "the built-in EfficientNet-Lite0 backbone with a 5-class head")


def test_no_match_and_the_time_budget() -> None:
    import torchvision

    assert fitting_sources({"a.weight": torch.zeros(3, 4)}) == []
    assert fitting_sources({}) == [] and source_hint({"x": torch.zeros(2)}) is None
    # One tensor of another shape: not a match (the head's size may differ, nothing else).
    state = sorted_state(torchvision.models.resnet18(num_classes=7))
    state["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
    assert fitting_sources(state) == []
    # A budget of 0 s: only the three built-ins are compared, torchvision is not searched.
    with torch.device("meta"):  # shapes are all that is compared
        state = sorted_state(torchvision.models.vgg11(num_classes=PROBE_CLASSES - 1))
    start = time.perf_counter()
    assert fitting_sources(state, budget_s=0) == []
    assert time.perf_counter() - start < 1.0
    assert fitting_sources(state, budget_s=60) == [SourceFit("torchvision", "vgg11", PROBE_CLASSES - 1)]


def test_only_the_output_layer_differs() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4, 10))
    state = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4, 3)).state_dict()
    assert output_layer(model.state_dict()) == "2.weight"
    mismatch = compare_state(model.state_dict(), state)
    assert not mismatch.missing and [k for k, _, _ in mismatch.shapes] == ["2.weight", "2.bias"]
    with pytest.raises(WeightsMismatchError) as err:
        fit_state_dict(model, state, "tiny")
    assert str(err.value).startswith("The weights' output layer has 3 outputs but the network has 10, so they do not "
                                     "fit tiny: 2 mismatch(es)")
    assert "3 names" in err.value.app_hint and "3 names" in err.value.cli_hint
    with pytest.raises(WeightsMismatchError, match="The class list has 10 names but the weights' output layer has 3"):
        fit_state_dict(model, state, "tiny", classes=10)
    assert not compare_state(model.state_dict(), model.state_dict())
