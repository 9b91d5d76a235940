"""Loading random weights leaves the process's global RNG alone (the app's process serves every browser session)
and still gives the same weights every time (seeded in a forked RNG), so cached statistics keep matching."""
from __future__ import annotations

import pytest
import torch
import torchvision

from card_fixtures import CLASSES, write_card
from iba_core.networks import load_network
from iba_core.trust import Trust

BUILDER = "import torch\n\ndef build():\n    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), " \
          "torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 7))\n"


def _load(kind: str, tmp_path):
    if kind == "registered":
        return load_network("efficientnet_lite0", weights="random")
    if kind == "torchvision":
        return load_network("torchvision:resnet18", weights="random")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    if kind == "torchvision card":
        return load_network(write_card(tmp_path, weights=None))
    (tmp_path / "rng_builder.py").write_text(BUILDER)
    return load_network(write_card(tmp_path, name="coded", arch="rng_builder:build", weights=None),
                        trust=Trust.local(code=True))


@pytest.mark.parametrize("kind", ["registered", "torchvision", "torchvision card", "code card"])
def test_loading_random_weights_leaves_the_global_rng_unchanged(kind, tmp_path) -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    first = _load(kind, tmp_path)
    assert torch.equal(torch.get_rng_state(), before)
    again = _load(kind, tmp_path)
    for (name, a), b in zip(first.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), name  # reproducible: the same weights on every load


def test_random_weights_are_those_seeded_with_zero_as_before() -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        expected = torchvision.models.resnet18(weights=None).state_dict()
    loaded = load_network("torchvision:resnet18", weights="random").model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in expected.items())
