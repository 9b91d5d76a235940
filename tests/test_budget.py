"""iba_core.budget: a request's cost in network passes before it runs, and the budget a served app holds it to."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from iba_core import settings
from iba_core.budget import SAY_ABOVE, Cost, RequestTooLarge, check_budget, cost_note, methods_cost
from iba_core.errors import UserError, user_message
from iba_core.methods import get_method


def test_costs_add_by_part_and_say_their_parts() -> None:
    cost = Cost.part("maps", 201) + Cost.part("insertion", 450) + Cost.part("maps", 2)
    assert cost.passes == 653 and cost.parts == (("maps", 203), ("insertion", 450))
    assert cost.describe() == "about 653 network passes (maps 203; insertion 450)"
    assert Cost.part("maps", 1).describe() == "about 1 network pass"
    assert cost.times(3).passes == 3 * 653
    assert Cost.part("maps", -5).passes == 0  # nothing costs less than nothing


def test_the_budget_refuses_only_what_exceeds_it_in_one_sentence() -> None:
    cost = Cost.part("maps", 1000) + Cost.part("ROAD", 1)
    check_budget(cost, None, "These yardsticks")  # no limit
    check_budget(cost, 1001, "These yardsticks")  # exactly at the budget
    with pytest.raises(RequestTooLarge) as refused:
        check_budget(cost, 1000, "These yardsticks")
    assert isinstance(refused.value, UserError)
    text = user_message(refused.value, "app")
    assert text.startswith("These yardsticks would cost about 1,001 network passes (maps 1,000; ROAD 1), above this "
                           "shared app's limit of 1,000 passes a request, so it did not start: choose fewer methods")
    assert "did not start" in text and settings.MAX_REQUEST_PASSES_ENV in text


def test_a_long_request_is_said_before_it_starts() -> None:
    assert cost_note(Cost.part("maps", SAY_ABOVE)) is None
    assert cost_note(Cost.part("maps", SAY_ABOVE + 1)) == (f"This request costs about {SAY_ABOVE + 1:,} network "
                                                           "passes: a long run on a CPU.")


def test_the_budget_applies_to_a_served_app_unless_its_owner_says_otherwise(monkeypatch) -> None:
    monkeypatch.delenv(settings.MAX_REQUEST_PASSES_ENV, raising=False)
    assert settings.max_request_passes(localhost=False) == settings.DEFAULT_MAX_REQUEST_PASSES == 10_000
    assert settings.max_request_passes(localhost=True) is None  # its one visitor is its owner
    monkeypatch.setenv(settings.MAX_REQUEST_PASSES_ENV, "500")
    assert settings.max_request_passes(localhost=False) == settings.max_request_passes(localhost=True) == 500
    for bad in ("", "lots", "-1", "0", "2.5"):
        monkeypatch.setenv(settings.MAX_REQUEST_PASSES_ENV, bad)
        assert settings.max_request_passes(localhost=False) == 10_000


class _Convs(nn.Module):
    """Two convolutions (8 then 24 channels), a pooling and a linear head: a CAM layer whose input has 24 channels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 24, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.conv2(self.conv1(x))).flatten(1))


def _convs_network(cam_layer: tuple[str, bool]) -> SimpleNamespace:
    """What the methods read of a network (`methods.base`: a model, a spec naming the CAM layer)."""
    return SimpleNamespace(model=_Convs().eval(), spec=SimpleNamespace(title="convs", cam_layer=cam_layer))


@pytest.mark.parametrize("cam_layer", [("pool", True), ("conv2", False), ("pool", False)])
def test_each_method_counts_its_own_passes(cam_layer) -> None:
    network = _convs_network(cam_layer)
    # the bottleneck: a forward and a backward pass per noisy copy and step, and the clean image
    assert get_method("iba_10", steps=3, batch=2).forward_passes(network, 16, 16) == 2 * 3 * 2 + 1
    assert get_method("coiba", steps=4, batch=5).forward_passes(network, 16, 16) == 2 * 4 * 5 + 1
    assert get_method("occlusion_8").forward_passes(network, 20, 16) == 3 * 2 + 1  # tiles cut at the border
    assert get_method("integrated_gradients", steps=7).forward_passes(network, 16, 16) == 14
    assert get_method("smoothgrad", samples=9).forward_passes(network, 16, 16) == 18
    assert get_method("saliency").forward_passes(network, 16, 16) == 2
    assert get_method("eigen_cam").forward_passes(network, 16, 16) == 1
    assert get_method("random").forward_passes(network, 16, 16) == 0
    # Score-CAM: one pass per channel of its layer (conv2's 24; a pooling, which has no size, passes on the channels
    # before it, as VGG's last max-pooling does), or of the top k
    assert get_method("score_cam").forward_passes(network, 16, 16) == 24 + 1
    assert get_method("score_cam", channels=5).forward_passes(network, 16, 16) == 6


def test_methods_cost_sums_the_maps_and_skips_an_unknown_key() -> None:
    network = _convs_network(("pool", True))
    cost = methods_cost(["saliency", "iba_10", "no_such_method"], network, 16, 16,
                        settings={"iba_10": {"steps": 1, "batch": 1}}, repeat=2)
    assert cost.passes == 2 * (2 + 3)


def test_the_issues_one_pixel_step_is_refused_by_the_default_budget() -> None:
    """The Evaluate page accepted 1 pixel per step: 2 × 50,177 forward passes per method on a 224 crop."""
    from iba_core.app.evaluation import yardsticks_cost
    from iba_core.metrics.insertion_deletion import protocol_from

    cost = yardsticks_cost(1, 224 * 224, protocol_from("rise", step=1))
    assert dict(cost.parts)["Insertion"] == dict(cost.parts)["Deletion"] == 224 * 224 + 1
    with pytest.raises(RequestTooLarge, match="limit of 10,000 passes a request"):
        check_budget(cost, settings.DEFAULT_MAX_REQUEST_PASSES, "These yardsticks")
    default = yardsticks_cost(18, 224 * 224, protocol_from("rise"))  # the protocol's step: 18 methods fit
    check_budget(default, settings.DEFAULT_MAX_REQUEST_PASSES, "These yardsticks")


def test_the_command_lines_road_options_count_the_papers_points() -> None:
    """`evaluate --metric road` without --removed leaves the points unset (None): its cost counts the paper's nine
    (it raised a TypeError, shown as an internal error, before the evaluation started)."""
    from iba_core.metrics import registry
    from iba_core.metrics.runner import EvalOptions
    from iba_core.metrics.road import ROAD_REMOVED

    assert registry.get("road").forward_passes(224 * 224, EvalOptions()) == 2 * len(ROAD_REMOVED) + 1
