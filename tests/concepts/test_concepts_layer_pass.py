"""The network at the concept layer (concepts/layer_pass.py): `read` gives the layer's own activations, and
`probabilities_with` gives the same p(target) through the split path (a traced cut) and through the forward hook
(forced), equal to the rest of the network run by hand."""
from __future__ import annotations

import numpy as np
import torch

from concept_fixtures import LAYER
from iba_core.concepts import layer_pass
from iba_core.concepts.layer_pass import LayerPass


def images(n: int, seed: int = 0, size: int = 64) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def both_paths(net, layer: str, monkeypatch) -> tuple[LayerPass, LayerPass]:
    """(the network's own path, the hook path forced by a network that says it cannot be split)."""
    own = LayerPass(net, layer)
    with monkeypatch.context() as m:
        m.setattr(net, "split_path", lambda _layer: "hook")
        hooked = LayerPass(net, layer)
    assert own.path in ("stages", "fx") and own.suffix is not None
    assert hooked.path == "hook" and hooked.suffix is None
    return own, hooked


def test_read_is_the_layers_output(hand_net):
    x = images(3)
    got = LayerPass(hand_net, LAYER).read(x)
    with torch.no_grad():
        expected = hand_net.model.cells(x)
    assert got.extra is None and got.grid.shape == (3, 3, 8, 8)
    torch.testing.assert_close(got.grid, expected, rtol=1e-4, atol=1e-6)


def test_hand_net_split_and_hook_agree_with_the_head_by_hand(hand_net, monkeypatch):
    own, hooked = both_paths(hand_net, LAYER, monkeypatch)
    x = images(5, seed=1)
    grids = torch.rand(5, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 2 - 0.5  # any values, not x's
    targets = torch.tensor([0, 1, 1, 0, 1])
    with torch.no_grad():
        logits = hand_net.model.fc(grids.mean(dim=(2, 3)))
    by_hand = torch.softmax(logits, 1).gather(1, targets[:, None])[:, 0]
    for lp in (own, hooked):
        torch.testing.assert_close(lp.probabilities_with(x, grids, None, targets), by_hand, rtol=1e-4, atol=1e-7)
    # the hook is gone afterwards: the network answers for x again
    with torch.no_grad():
        plain = torch.softmax(hand_net.model(x), 1)
        torch.testing.assert_close(plain, torch.softmax(hand_net.model.fc(hand_net.model.cells(x).mean(dim=(2, 3))),
                                                        1), rtol=1e-4, atol=1e-7)


def test_tiny_cnn_split_and_hook_agree(monkeypatch, tmp_path):
    """A deeper rest (a convolution, ReLU, pooling, the head after the layer): both paths, in passes of 3 rows."""
    from run_fixtures import LAYER as TINY_LAYER
    from run_fixtures import load_card, write_card

    net = load_card(write_card(tmp_path / "card", ["a", "b", "c"]))
    own, hooked = both_paths(net, TINY_LAYER, monkeypatch)
    x = images(7, seed=3)
    read = own.read(x)
    assert read.grid.shape == (7, 16, 16, 16)
    grids = read.grid * torch.rand(7, 16, 1, 1, generator=torch.Generator().manual_seed(4))  # channels damped
    targets = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    with torch.no_grad():
        rest = net.model.features[4:](grids)
        by_hand = torch.softmax(net.model.fc(net.model.pool(rest).flatten(1)), 1).gather(1, targets[:, None])[:, 0]
    monkeypatch.setattr(layer_pass, "PASS_ROWS", 3)
    for lp in (own, hooked):
        torch.testing.assert_close(lp.probabilities_with(x, grids, None, targets), by_hand, rtol=1e-4, atol=1e-7)
    # the unchanged grid gives the network's own p
    with torch.no_grad():
        plain = torch.softmax(net.model(x), 1).gather(1, targets[:, None])[:, 0]
    torch.testing.assert_close(own.probabilities_with(x, read.grid, None, targets), plain, rtol=1e-4, atol=1e-7)
    assert not np.allclose(by_hand.numpy(), plain.numpy(), rtol=1e-3)  # the damped grids change p: a real check


def test_no_rows_give_no_probabilities(hand_net):
    lp = LayerPass(hand_net, LAYER)
    none = lp.probabilities_with(images(0), torch.zeros(0, 3, 8, 8), None, torch.zeros(0, dtype=torch.long))
    assert none.numel() == 0

