"""PatternAttribution beyond plain networks (beyond the paper): skip connections, BatchNorm, ReLU6, depthwise
and same-padding convolutions against closed forms on tiny hand-built networks; which networks are refused
and why; and the real offline network through the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from method_helpers import TinyConvNet, wrap
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.methods.pattern import estimate_patterns, pattern_graph
from iba_core.methods.pattern.layer_kinds import apply_weight


def _cov_pattern(x: np.ndarray, y: np.ndarray, w: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The paper's a = Cov(x, y) / wᵀCov(x, y) over the samples in `mask`, float64 (0 below two samples)."""
    if mask.sum() < 2:
        return np.zeros_like(w)
    xs, ys = x[mask], y[mask]
    cov = (xs * ys[:, None]).mean(0) - xs.mean(0) * ys.mean()
    return cov / (w @ cov)


def _conv_closed_form(conv: nn.Conv2d, padded: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
                      w_eff: torch.Tensor | None = None) -> np.ndarray:
    """Per output channel: the closed form over all patches of the (already padded) input; groups honoured.

    y and mask are shaped like the layer's output; w_eff (default: the weights) normalises w_effᵀa = 1.
    """
    w_eff = conv.weight if w_eff is None else w_eff
    k = conv.kernel_size
    cols = F.unfold(padded, k, dilation=conv.dilation, stride=conv.stride)  # (N, C·k·k, L)
    per_group_in = conv.in_channels // conv.groups
    per_group_out = conv.out_channels // conv.groups
    span = per_group_in * k[0] * k[1]
    out = []
    for o in range(conv.out_channels):
        g = o // per_group_out
        x_o = cols[:, g * span:(g + 1) * span].permute(0, 2, 1).reshape(-1, span)
        out.append(_cov_pattern(x_o.double().numpy(), y[:, o].reshape(-1).double().numpy(),
                                w_eff[o].reshape(-1).double().numpy(), mask[:, o].reshape(-1).numpy()))
    return np.stack(out).reshape(conv.weight.shape)


# ---- skip connections --------------------------------------------------------------------------


class TwoBranches(nn.Module):
    """conv0 → ReLU → (conv_a ‖ conv_b) → + → ReLU → average pool → linear: a residual-style junction."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.conv0 = nn.Conv2d(3, 4, 3, padding=1)
        self.relu0 = nn.ReLU()
        self.conv_a = nn.Conv2d(4, 4, 3, padding=1)
        self.conv_b = nn.Conv2d(4, 4, 1)
        self.relu1 = nn.ReLU(inplace=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.relu0(self.conv0(x))
        s = self.conv_a(h)
        s += self.conv_b(h)  # in place, as torchvision's ResNet does
        return self.fc(torch.flatten(self.pool(self.relu1(s)), 1))


def test_skip_connection_patterns_and_attribution_by_hand():
    """Both branches: their own output y, over the samples where the ReLU after the sum passes; the sum's
    backward hands the signal to both, where the branches meet it sums (as the gradient does)."""
    net = TwoBranches().eval()
    network = wrap(net)
    graph = pattern_graph(network)
    assert list(graph.layers) == ["conv0", "conv_a", "conv_b", "fc"]
    assert [graph.layers[n].regime for n in graph.layers] == ["relu", "relu", "relu", "linear"]
    assert graph.layers["conv_a"].mask_node == graph.layers["conv_b"].mask_node != graph.layers["conv_a"].y_node

    data = torch.randn(5, 3, 9, 9, generator=torch.Generator().manual_seed(12)) + 0.2
    patterns, _ = estimate_patterns(network, data.split(3))
    with torch.no_grad():
        u0 = net.conv0(data)
        h = F.relu(u0)
        ya, yb = net.conv_a(h), net.conv_b(h)
        s = ya + yb
        pooled = F.relu(s).mean((2, 3))
    a0 = _conv_closed_form(net.conv0, F.pad(data, (1, 1, 1, 1)), u0, u0 > 0)
    aa = _conv_closed_form(net.conv_a, F.pad(h, (1, 1, 1, 1)), ya, s > 0)
    ab = _conv_closed_form(net.conv_b, h, yb, s > 0)
    W, y = net.fc.weight.detach(), pooled @ net.fc.weight.detach().T + net.fc.bias.detach()
    afc = np.stack([_cov_pattern(pooled.double().numpy(), y[:, k].double().numpy(), W[k].double().numpy(),
                                 np.ones(len(data), bool)) for k in range(3)])
    for name, expected in (("conv0", a0), ("conv_a", aa), ("conv_b", ab), ("fc", afc)):
        np.testing.assert_allclose(patterns[name].numpy(), expected, rtol=2e-3, atol=1e-4, err_msg=name)
        assert np.abs(expected).sum() > 0
    for name in ("conv_a", "conv_b"):  # wᵀa₊ = 1 for every channel the sum's ReLU ever passes
        live = (s > 0).sum((0, 2, 3)) >= 2
        assert live.sum() >= 2
        wa = (getattr(net, name).weight * patterns[name]).flatten(1).sum(1)
        np.testing.assert_allclose(wa[live], 1.0, rtol=1e-3)
        assert torch.equal(patterns[name][~live], torch.zeros_like(patterns[name][~live]))

    # the map by hand: transposed convolutions with w ⊙ a, gated by the forward pass's ReLUs
    x = torch.randn(1, 3, 9, 9, generator=torch.Generator().manual_seed(13))
    given = {"conv0": a0, "conv_a": aa, "conv_b": ab, "fc": afc}
    target = 1
    amap = get_method("pattern_attribution", patterns=given).attribute(network, x, target)
    t = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in given.items()}
    with torch.no_grad():
        u0 = net.conv0(x)
        s = net.conv_a(F.relu(u0)) + net.conv_b(F.relu(u0))
        g = ((net.fc.weight * t["fc"])[target] / 81).view(1, 4, 1, 1).expand(1, 4, 9, 9) * (s > 0)
        g_h = (F.conv_transpose2d(g, net.conv_a.weight * t["conv_a"], padding=1)
               + F.conv_transpose2d(g, net.conv_b.weight * t["conv_b"]))
        g_x = F.conv_transpose2d(g_h * (u0 > 0), net.conv0.weight * t["conv0"], padding=1)
    np.testing.assert_allclose(amap.values, g_x[0].sum(0).numpy(), rtol=1e-4, atol=1e-6)


# ---- BatchNorm ---------------------------------------------------------------------------------


def _bn_net(bn: nn.Module | None, conv: nn.Conv2d, fc: nn.Linear) -> nn.Module:
    layers = [conv] + ([bn] if bn is not None else []) + [nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), fc]
    return nn.Sequential(*layers)


def test_batchnorm_gives_the_folded_layers_patterns_and_map():
    """conv → BN → ReLU estimates against the BN's output and propagates (s·w) ⊙ a': the same patterns and
    the same map as the folded convolution (weights s·w, bias s·(b − μ) + β) — also for a negative γ."""
    torch.manual_seed(21)
    conv, fc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4, 2)
    bn = nn.BatchNorm2d(4)
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.3, -0.2, 0.1, 0.0]))
        bn.running_var.copy_(torch.tensor([0.5, 2.0, 1.5, 0.8]))
        bn.weight.copy_(torch.tensor([1.5, -0.7, 0.4, 2.0]))
        bn.bias.copy_(torch.tensor([0.1, 0.3, -0.2, 0.05]))
    with_bn = _bn_net(bn, conv, fc).eval()
    s = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach()
    folded_conv = nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        folded_conv.weight.copy_(conv.weight * s.view(-1, 1, 1, 1))
        folded_conv.bias.copy_(s * (conv.bias - bn.running_mean) + bn.bias)
    folded = _bn_net(None, folded_conv, fc).eval()

    data = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(22))
    layer = pattern_graph(wrap(with_bn)).layers["0"]
    assert layer.regime == "relu" and layer.y_node != layer.node and len(layer.batchnorms) == 1
    got, _ = estimate_patterns(wrap(with_bn), data.split(4))
    ref, _ = estimate_patterns(wrap(folded), data.split(4))
    with torch.no_grad():
        y = folded_conv(data)
    expected = _conv_closed_form(folded_conv, F.pad(data, (1, 1, 1, 1)), y, y > 0)
    np.testing.assert_allclose(ref["0"].numpy(), expected, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(got["0"].numpy(), expected, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(got["5"].numpy(), ref["4"].numpy(), rtol=1e-4, atol=1e-6)  # the classifier

    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(23))
    a = get_method("pattern_attribution", patterns=got).attribute(wrap(with_bn), x, 1).values
    b = get_method("pattern_attribution", patterns=ref).attribute(wrap(folded), x, 1).values
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(b).max())
    assert np.abs(a).max() > 0


# ---- ReLU6 -------------------------------------------------------------------------------------


def test_relu6_regime_is_between_zero_and_six():
    """The regime where ReLU6 passes its input linearly: 0 < y < 6; the map is gated there too."""
    torch.manual_seed(31)
    net = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU6(), nn.Linear(5, 3)).eval()
    with torch.no_grad():
        net[1].weight.mul_(10.0)  # samples above 6 and many between 0 and 6
        net[1].bias.fill_(3.0)
    data = torch.randn(400, 3, 2, 2, generator=torch.Generator().manual_seed(32)) + 0.5
    patterns, _ = estimate_patterns(wrap(net), data.split(128))
    assert [layer.regime for layer in pattern_graph(wrap(net)).layers.values()] == ["relu6", "linear"]

    X = data.reshape(400, -1).double().numpy()
    W1, b1 = net[1].weight.double().numpy(), net[1].bias.double().numpy()
    W2, b2 = net[3].weight.double().numpy(), net[3].bias.double().numpy()
    H = X @ W1.T + b1
    assert (H > 6).sum(0).min() >= 10 and ((H > 0) & (H < 6)).sum(0).min() >= 50
    A = np.clip(H, 0, 6)
    Y = A @ W2.T + b2
    a1 = np.stack([_cov_pattern(X, H[:, j], W1[j], (H[:, j] > 0) & (H[:, j] < 6)) for j in range(5)])
    positive = np.stack([_cov_pattern(X, H[:, j], W1[j], H[:, j] > 0) for j in range(5)])
    a2 = np.stack([_cov_pattern(A, Y[:, k], W2[k], np.ones(400, bool)) for k in range(3)])
    np.testing.assert_allclose(patterns["1"].numpy(), a1, rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose(patterns["3"].numpy(), a2, rtol=2e-3, atol=1e-4)
    assert np.abs(a1 - positive).max() > 1e-2  # the upper bound matters

    x = torch.randn(1, 3, 2, 2, generator=torch.Generator().manual_seed(33)) + 0.5
    amap = get_method("pattern_attribution", patterns={"1": a1, "3": a2}).attribute(wrap(net), x, 0)
    h0 = W1 @ x.reshape(-1).double().numpy() + b1
    expected = ((W2[0] * a2[0]) * ((h0 > 0) & (h0 < 6))) @ (W1 * a1)
    np.testing.assert_allclose(amap.values, expected.reshape(3, 2, 2).sum(0), rtol=1e-4, atol=1e-6)


# ---- depthwise and same-padding convolutions ---------------------------------------------------


def _same_padding_convs():
    from efficientnet_lite_pytorch.utils import Conv2dDynamicSamePadding, Conv2dStaticSamePadding

    torch.manual_seed(41)
    return {
        "static": Conv2dStaticSamePadding(4, 4, 3, stride=2, groups=4, bias=False, image_size=8),
        "dynamic": Conv2dDynamicSamePadding(4, 4, 3, stride=2, groups=4, bias=True),
        "reflect": nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, padding_mode="reflect"),
        "torch_same": nn.Conv2d(4, 4, 3, padding="same", groups=4),
    }


def _padded(kind: str, conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The input as the layer pads it (written out here, independently of the implementation)."""
    if kind == "static":
        return conv.static_padding(x)
    if kind == "dynamic":  # 8 px, kernel 3, stride 2 → output 4, total padding 1: (0, 1), as TensorFlow's "SAME"
        return F.pad(x, (0, 1, 0, 1))
    if kind == "reflect":
        return F.pad(x, (1, 1, 1, 1), mode="reflect")
    return F.pad(x, (1, 1, 1, 1))


@pytest.mark.parametrize("kind", ["static", "dynamic", "reflect", "torch_same"])
def test_depthwise_pattern_equals_the_per_channel_closed_form(kind):
    """A depthwise convolution (groups = channels) is one linear neuron per channel on that channel's
    patches, padded as the layer's own forward pads (EfficientNet's same-padding convolutions included)."""
    depthwise = _same_padding_convs()[kind]
    torch.manual_seed(42)
    net = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), depthwise, nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(4, 2)).eval()
    data = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(43))
    with torch.no_grad():
        h = F.relu(net[0](data))
        y = depthwise(h)
        np.testing.assert_allclose(apply_weight(depthwise, h, depthwise.weight)
                                   + (0 if depthwise.bias is None else depthwise.bias.view(1, -1, 1, 1)),
                                   y, rtol=1e-5, atol=1e-6)  # the layer's own forward, padding included
    patterns, _ = estimate_patterns(wrap(net), data.split(4))
    assert patterns["2"].shape == (4, 1, 3, 3)
    expected = _conv_closed_form(depthwise, _padded(kind, depthwise, h), y, (y > 0) & (y < 6))
    assert (np.abs(expected).reshape(4, -1).sum(1) > 0).all()
    np.testing.assert_allclose(patterns["2"].numpy(), expected, rtol=2e-3, atol=1e-4)

    # the map: gradient-like, with w ⊙ a at the depthwise layer (patterns 1 elsewhere: the plain weights)
    ones = {name: torch.ones_like(p) for name, p in patterns.items()}
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(44))
    plain = get_method("pattern_attribution", patterns=ones).attribute(wrap(net), x, 1).values
    gradient = get_method("gradient").attribute(wrap(net), x, 1).values
    np.testing.assert_allclose(plain, gradient, rtol=1e-4, atol=1e-7)


# ---- on the real networks ----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["resnet", "offline"])
def test_with_patterns_one_it_is_the_gradient_of_the_real_networks(which, resnet_random, offline_model, small_x):
    """w ⊙ 1 = w: then the method is the gradient, which checks that the traced graph (skip connections,
    BatchNorm, ReLU6, same padding) computes the network."""
    network = resnet_random if which == "resnet" else offline_model
    graph = pattern_graph(network)
    ones = {name: torch.ones_like(w) for name, w in graph.weights().items()}
    got = get_method("pattern_attribution", patterns=ones).attribute(network, small_x, 7).values
    expected = get_method("gradient").attribute(network, small_x, 7).values
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_regimes_of_resnet50_and_efficientnet_lite0(resnet_random, offline_model):
    resnet = pattern_graph(resnet_random).layers
    assert len(resnet) == 54  # 53 convolutions and the classifier
    assert all(layer.regime == "relu" and len(layer.batchnorms) == 1 for name, layer in resnet.items() if name != "fc")
    conv3, shortcut = resnet["layer1.0.conv3"], resnet["layer1.0.downsample.0"]
    assert conv3.mask_node == shortcut.mask_node and conv3.mask_node.startswith("add")  # the ReLU after the sum
    assert resnet["layer1.0.conv1"].mask_node == resnet["layer1.0.conv1"].y_node  # the ReLU after its BN
    assert resnet["fc"].regime == "linear"

    lite = pattern_graph(offline_model).layers
    assert len(lite) == 50  # stem, 16 blocks (expand, depthwise, project), head, classifier
    projections = {name for name in lite if name.endswith("_project_conv")}
    assert len(projections) == 16
    assert all(lite[name].regime == "linear" for name in projections | {"_fc"})  # → BN → add / next block
    assert all(layer.regime == "relu6" for name, layer in lite.items() if name not in projections | {"_fc"})
    assert lite["_blocks.1._depthwise_conv"].module.groups == 96


def test_offline_network_cli_compare(monkeypatch, tmp_path):
    """The issue's done-when: `compare IMG --methods pattern_attribution,lrp_alpha0beta1eps5` on the default
    (offline) network exits 0 with finite, non-constant maps for both (patterns from 4 photos here)."""
    from iba_core.cli import main
    from iba_core.images import load_sample
    from iba_core.methods.pattern import method as method_module

    monkeypatch.setattr(method_module, "DEFAULT_SAMPLES", 4)  # first-use estimation in seconds, not minutes
    image = tmp_path / "chelsea.jpg"
    load_sample("chelsea").save(image, quality=95)
    out = tmp_path / "out"
    code = main(["compare", str(image), "--methods", "pattern_attribution,lrp_alpha0beta1eps5", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == "efficientnet_lite0" and summary["failed"] == {}
    assert [m["key"] for m in summary["methods"]] == ["pattern_attribution", "lrp_alpha0beta1eps5"]
    assert summary["methods"][0]["extra"]["pattern_images"] == 4 and summary["methods"][0]["extra"]["patterns_rough"]
    for key in ("pattern_attribution", "lrp_alpha0beta1eps5"):
        values = np.load(out / f"{key}.npy")
        assert values.shape == (224, 224) and np.isfinite(values).all() and values.std() > 0, key


# ---- which networks are refused ----------------------------------------------------------------


class Gated(nn.Module):
    """A squeeze-and-excitation-like gate written functionally: x · sigmoid(x)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        h = self.conv(x)
        h = h * torch.sigmoid(h)
        return self.fc(h.mean((2, 3)))


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 2)

    def forward(self, x):
        if x.sum() > 0:  # torch.fx cannot trace this
            x = -x
        return self.fc(x.flatten(1))


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(self.conv(F.relu(self.conv(x))).mean((2, 3)))


def _head(*layers):
    return wrap(nn.Sequential(nn.Conv2d(3, 4, 3), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)))


def test_unsupported_networks_say_why_in_one_sentence():
    method = get_method("pattern_attribution")
    cases = [
        (_head(nn.GELU()), ["GELU"]),
        (_head(nn.BatchNorm2d(4), nn.SiLU()), ["SiLU"]),
        (_head(nn.GroupNorm(2, 4), nn.ReLU(), nn.Sigmoid()), ["GroupNorm", "Sigmoid"]),
        (_head(nn.LeakyReLU()), ["LeakyReLU"]),
        (_head(nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU()), ["BatchNorm2d without running statistics"]),
        (_head(nn.Upsample(scale_factor=2)), ["Upsample"]),  # a module type it does not know: refused
        (wrap(Gated()), ["sigmoid", "mul of two activations"]),
        (wrap(DataDependent()), ["torch.fx", "cannot trace"]),
        (wrap(Twice()), ["more than once"]),
    ]
    for network, words in cases:
        reason = method.available_for(network)
        assert reason, words
        assert all(w in reason for w in words), reason
        assert reason.count(". ") == 0 and reason.endswith("."), reason  # one sentence
    with pytest.raises(UserError, match="not available.*GELU"):
        method.attribute(cases[0][0], torch.zeros(1, 3, 8, 8), 0)


def test_supported_networks(resnet_random, offline_model, vgg_random):
    from iba_core.networks import network_from_module

    method = get_method("pattern_attribution")
    for network in (resnet_random, offline_model, vgg_random, wrap(TinyConvNet()), wrap(TwoBranches()),
                   network_from_module(TinyConvNet(), "tiny")):
        assert method.available_for(network) is None


def test_a_failure_midway_leaves_the_network_as_it_was():
    """Estimation and the map run the user's modules: flags, requires_grad and hooks are restored on errors."""
    from types import SimpleNamespace

    from reference_impl import hook_count

    class Boom(RuntimeError):
        pass

    def boom(module, inputs, output):
        raise Boom("forward")

    net = TwoBranches().train()  # parameters require gradients, as after construction
    network = SimpleNamespace(model=net, device=torch.device("cpu"))
    handle = net.conv_b.register_forward_hook(boom)
    try:
        with pytest.raises(Boom):
            estimate_patterns(network, [torch.randn(2, 3, 8, 8)])
        given = {name: torch.ones_like(w) for name, w in pattern_graph(network).weights().items()}
        with pytest.raises(Boom):
            get_method("pattern_attribution", patterns=given).attribute(network, torch.randn(1, 3, 8, 8), 0)
    finally:
        handle.remove()
    assert all(m.training for m in net.modules()) and hook_count(net) == 0
    assert all(p.requires_grad and p.grad is None for p in net.parameters())
