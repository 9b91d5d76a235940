"""PatternAttribution on plain networks (as in the paper): the two-component estimator against closed forms,
the attribution by hand, VGG-16, and the pattern cache. Beyond plain networks: test_pattern_graph.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from method_helpers import SMALL, TinyConvNet, fingerprint, wrap
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.methods.pattern import (
    Patterns,
    estimate_patterns,
    get_patterns,
    patterns_cache_path,
    pattern_graph,
    source_key,
)
from reference_impl import hook_count


def _frozen(model: nn.Module) -> nn.Module:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _cov_pattern(x: np.ndarray, y: np.ndarray, w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The paper's a = (E[xy] − E[x]E[y]) / (wᵀE[xy] − wᵀE[x]E[y]) over the samples in `mask`, float64;
    0 for a neuron with fewer than two samples there (the implementation's documented choice)."""
    if mask.sum() < 2:
        return np.zeros_like(w)
    xs, ys = x[mask], y[mask]
    cov = (xs * ys[:, None]).mean(0) - xs.mean(0) * ys.mean()
    return cov / (w @ cov)


# ---- the estimator -----------------------------------------------------------------------------


def test_linear_estimator_recovers_the_signal_direction_not_the_filter():
    """Kindermans et al.'s toy: x = a·s + d·ε with a distractor d. The filter w must cancel d (wᵀd = 0,
    wᵀa = 1), so y = s + b; the pattern of a neuron no ReLU follows is a exactly, while w points elsewhere."""
    g = torch.Generator().manual_seed(0)
    dim, n = 12, 500
    a, d = torch.randn(dim, generator=g, dtype=torch.float64), torch.randn(dim, generator=g, dtype=torch.float64)
    w = a - (a @ d) / (d @ d) * d
    w = w / (w @ a)
    s = torch.randn(n, generator=g, dtype=torch.float64)
    eps = torch.randn(n, generator=g, dtype=torch.float64)
    s, eps = s - s.mean(), eps - eps.mean()
    eps = eps - (eps @ s) / (s @ s) * s  # sample-uncorrelated with the signal
    x = (s[:, None] * a + eps[:, None] * d).float().reshape(n, 3, 2, 2)
    net = _frozen(nn.Sequential(nn.Flatten(), nn.Linear(dim, 1)))
    with torch.no_grad():
        net[1].weight.copy_(w[None].float())
        net[1].bias.fill_(0.7)
    patterns, seen = estimate_patterns(wrap(net), [x[:200], x[200:]])
    assert seen == n and list(patterns) == ["1"]
    got = patterns["1"][0].double()
    torch.testing.assert_close(got, a, rtol=1e-4, atol=1e-4)
    assert float(F.cosine_similarity(w, a, dim=0)) < 0.99  # the filter is not the signal direction


def _two_layer_net() -> nn.Module:
    torch.manual_seed(4)
    return _frozen(nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Dropout(0.5), nn.Linear(5, 3)))


def test_two_component_patterns_and_attribution_by_hand():
    """Hidden neurons (ReLU follows): a₊ over the samples with y > 0; logits: a over all samples. The map is
    the backward pass with w ⊙ a, gated by the forward ReLU, summed over colour channels."""
    net = _two_layer_net()
    g = torch.Generator().manual_seed(1)
    data = torch.randn(300, 3, 2, 2, generator=g) + 0.3
    patterns, _ = estimate_patterns(wrap(net), data.split(64))
    assert [layer.regime for layer in pattern_graph(wrap(net)).layers.values()] == ["relu", "linear"]

    X = data.reshape(300, -1).double().numpy()
    W1, b1 = net[1].weight.double().numpy(), net[1].bias.double().numpy()
    W2, b2 = net[4].weight.double().numpy(), net[4].bias.double().numpy()
    H = X @ W1.T + b1
    A = np.maximum(H, 0)
    Y = A @ W2.T + b2
    a1 = np.stack([_cov_pattern(X, H[:, j], W1[j], H[:, j] > 0) for j in range(5)])
    a2 = np.stack([_cov_pattern(A, Y[:, k], W2[k], np.ones(300, bool)) for k in range(3)])
    np.testing.assert_allclose(patterns["1"].numpy(), a1, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(patterns["4"].numpy(), a2, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose((W1 * patterns["1"].double().numpy()).sum(1), 1.0, rtol=1e-3)  # wᵀa₊ = 1

    x = torch.randn(1, 3, 2, 2, generator=g)
    target = 2
    amap = get_method("pattern_attribution", patterns={"1": a1, "4": a2}).attribute(wrap(net), x, target)
    h0 = W1 @ x.reshape(-1).double().numpy() + b1
    r_hidden = (W2[target] * a2[target]) * (h0 > 0)
    r_input = r_hidden @ (W1 * a1)
    np.testing.assert_allclose(amap.values, r_input.reshape(3, 2, 2).sum(0), rtol=1e-4, atol=1e-6)
    assert amap.signed and amap.extra == {"patterns": "given by the caller"}


def test_conv_patterns_equal_the_unfolded_closed_form():
    """A convolution is a linear layer on each (zero-padded) patch: its pattern is the closed form over all
    patches of all images — here with stride, padding and groups."""
    torch.manual_seed(2)
    conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    conv2 = nn.Conv2d(4, 4, 3, padding=1, groups=2)
    net = _frozen(nn.Sequential(conv1, nn.ReLU(), nn.MaxPool2d(2), conv2, nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                nn.Flatten(), nn.Linear(4, 2)))
    data = torch.randn(6, 3, 12, 12, generator=torch.Generator().manual_seed(3))
    patterns, _ = estimate_patterns(wrap(net), data.split(4))

    def closed_form(conv, inputs, group_in):
        cols = F.unfold(inputs, 3, padding=1, stride=conv.stride)  # (N, C·9, L), zeros at the border
        with torch.no_grad():
            y = conv(inputs).flatten(2)  # (N, O, L)
        out = []
        per_group = conv.out_channels // conv.groups
        for o in range(conv.out_channels):
            grp = o // per_group
            x_o = cols[:, grp * group_in * 9:(grp + 1) * group_in * 9].permute(0, 2, 1).reshape(-1, group_in * 9)
            y_o = y[:, o].reshape(-1)
            w_o = conv.weight[o].reshape(-1)
            out.append(_cov_pattern(x_o.double().numpy(), y_o.double().numpy(), w_o.double().numpy(),
                                    y_o.numpy() > 0))
        return np.stack(out).reshape(conv.weight.shape)

    expected = closed_form(conv1, data, 3)
    np.testing.assert_allclose(patterns["0"].numpy(), expected, rtol=2e-3, atol=1e-4)
    with torch.no_grad():
        mid = F.max_pool2d(F.relu(conv1(data)), 2)
    expected2 = closed_form(conv2, mid, 2)
    np.testing.assert_allclose(patterns["3"].numpy(), expected2, rtol=2e-3, atol=1e-4)
    assert (np.abs(expected).reshape(4, -1).sum(1) > 0).all()
    assert (np.abs(expected2).reshape(4, -1).sum(1) > 0).sum() >= 2


def test_dead_neurons_get_zero_patterns():
    net = _two_layer_net()
    with torch.no_grad():
        net[1].bias[0] = -1e4  # never active
    patterns, _ = estimate_patterns(wrap(net), [torch.randn(50, 3, 2, 2)])
    assert torch.equal(patterns["1"][0], torch.zeros(12))
    assert torch.isfinite(patterns["1"]).all() and patterns["1"][1:].abs().sum() > 0


# ---- on the real networks ----------------------------------------------------------------------


def test_with_patterns_one_it_is_the_gradient(vgg_random, small_x):
    """w ⊙ 1 = w: the modified backward pass is then the plain gradient of the real VGG-16, which also checks
    that the layer sequence read from the spec's stages computes the network."""
    chain = pattern_graph(vgg_random)
    ones = {name: torch.ones_like(w) for name, w in chain.weights().items()}
    got = get_method("pattern_attribution", patterns=ones).attribute(vgg_random, small_x, 7).values
    expected = get_method("gradient").attribute(vgg_random, small_x, 7).values
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


def test_vgg16_random_gives_a_finite_map_and_leaves_the_model_untouched(vgg_random, vgg_patterns, small_x):
    before = fingerprint(vgg_random.model)
    x = small_x.clone()
    amap = get_method("pattern_attribution", patterns=vgg_patterns).attribute(vgg_random, x, 7)
    assert amap.values.shape == (SMALL, SMALL) and np.isfinite(amap.values).all() and np.abs(amap.values).max() > 0
    assert fingerprint(vgg_random.model) == before and hook_count(vgg_random.model) == 0
    assert torch.equal(x, small_x) and not x.requires_grad
    assert amap.extra["patterns_rough"] and amap.extra["pattern_images"] == 2
    layers = pattern_graph(vgg_random).layers
    assert len(layers) == 16  # 13 convolutions, 3 linear layers
    assert [layer.regime for layer in layers.values()] == ["relu"] * 15 + ["linear"]  # the logits: linear estimator
    assert all(not layer.batchnorms and layer.mask_node == layer.y_node == layer.node for layer in layers.values()
               if layer.rectified)  # y > 0 on the layer's own output, as in the paper
    with pytest.raises(UserError, match="out of range"):
        get_method("pattern_attribution", patterns=vgg_patterns).attribute(vgg_random, small_x, 1000)


def test_custom_forward_functions_are_read_from_their_traced_graph():
    """Not only stage lists and nn.Sequential: a custom forward is traced (torch.fx) into its layer graph.
    Networks beyond the paper (BatchNorm, ReLU6, skip connections) and refusals: test_pattern_graph.py."""
    from iba_core.networks import network_from_module

    method = get_method("pattern_attribution")
    custom = network_from_module(TinyConvNet(), "tiny")  # a derived spec of a custom forward
    assert method.available_for(custom) is None and method.available_for(wrap(TinyConvNet())) is None
    layers = pattern_graph(custom).layers
    assert {name: layer.regime for name, layer in layers.items()} == {"conv1": "relu", "conv2": "relu", "fc": "linear"}
    with_bn = wrap(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2)))
    assert method.available_for(with_bn) is None
    with_gelu = wrap(nn.Sequential(nn.Conv2d(3, 4, 3), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                   nn.Linear(4, 2)))
    assert "GELU" in method.available_for(with_gelu)
    with pytest.raises(UserError, match="not available"):
        method.attribute(with_gelu, torch.zeros(1, 3, 8, 8), 0)


def test_patterns_of_another_network_are_refused():
    net = _two_layer_net()
    x = torch.zeros(1, 3, 2, 2)
    with pytest.raises(UserError, match="another network"):  # a layer missing
        get_method("pattern_attribution", patterns={"1": torch.ones(5, 12)}).attribute(wrap(net), x, 0)
    with pytest.raises(UserError, match="another network"):  # a shape that does not fit
        get_method("pattern_attribution", patterns={"1": torch.ones(5, 11), "4": torch.ones(3, 5)}).attribute(
            wrap(net), x, 0)


def test_user_flags_and_input_are_restored():
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.Dropout(0.9),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))
    network = wrap(net)
    net.train()
    net[0].weight.requires_grad_(True)
    stale = torch.ones_like(net[5].bias)
    net[5].bias.grad = stale
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    x0 = x.clone()
    patterns = {"0": torch.rand(4, 3, 3, 3), "5": torch.rand(2, 4)}
    a = get_method("pattern_attribution", patterns=patterns).attribute(network, x, 1).values
    b = get_method("pattern_attribution", patterns=patterns).attribute(network, x, 1).values
    np.testing.assert_array_equal(a, b)  # dropout off (eval) while it runs
    assert net.training and net[0].weight.requires_grad and net[0].weight.grad is None
    assert net[5].bias.grad is stale and hook_count(net) == 0 and torch.equal(x, x0)


# ---- estimation from images and the cache ------------------------------------------------------


def _toy_network(key: str = "toy_plain"):
    from iba_core.networks import network_from_module

    torch.manual_seed(6)
    model = nn.Sequential(nn.Conv2d(3, 4, 5, stride=4), nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(2),
                          nn.Flatten(), nn.Linear(16, 3))
    return network_from_module(model, key, categories=["a", "b", "c"], weights_id="w1")


def test_patterns_from_the_offline_photos_are_rough_and_cached(monkeypatch):
    from iba_core.methods.pattern import estimation

    net = _toy_network()
    first = get_patterns(net, n=3)
    assert first.n == 3 and first.is_rough and "offline sample photos" in first.source and "rough" in first.describe()
    path = patterns_cache_path("toy_plain", "w1", source_key(None, 3))
    assert path.is_file()
    assert get_patterns(net, n=3) is first  # the network's memo

    def no_estimation(*args, **kwargs):
        raise AssertionError("estimated again")

    monkeypatch.setattr(estimation, "compute_patterns", no_estimation)
    again = get_patterns(_toy_network(), n=3)  # a new network object: from disk
    assert again.n == 3 and set(again.tensors) == set(first.tensors)
    for name in first.tensors:
        torch.testing.assert_close(again.tensors[name], first.tensors[name])
    amap = get_method("pattern_attribution", samples=3).attribute(_toy_network(), torch.randn(1, 3, 40, 40), 1)
    assert amap.extra["patterns_rough"] and amap.extra["pattern_images"] == 3 and np.isfinite(amap.values).all()
    monkeypatch.undo()

    path.write_bytes(b"not an npz")  # a corrupt cache file is re-estimated
    with pytest.warns(UserWarning, match="unusable"):
        fresh = get_patterns(_toy_network(), n=3)
    assert fresh.n == 3 and Patterns.load(path).n == 3


def test_patterns_from_a_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(tmp_path / f"img{i}.png")
    (tmp_path / "broken.jpg").write_bytes(b"no image")
    patterns = get_patterns(_toy_network("toy_folder"), images=tmp_path, n=10)
    assert patterns.n == 3 and patterns.skipped == 1 and patterns.source.startswith("folder")
    assert patterns.is_rough  # fewer than RECOMMENDED_SAMPLES images
    assert patterns_cache_path("toy_folder", "w1", source_key(tmp_path, 10)).is_file()
    with pytest.raises(FileNotFoundError):
        get_patterns(_toy_network("toy_folder"), images=tmp_path / "empty_missing", n=10)


def test_settings_and_names():
    method = get_method("pattern_attribution")
    assert method.name == "PatternAttribution" and method.signed and method.cost == "slow"
    assert method.settings == {"images": None, "samples": 256, "patterns": None}
    with pytest.raises(UserError, match="no setting"):
        get_method("pattern_attribution", steps=3)
