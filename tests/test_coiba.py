"""CoIBA (`iba_core/coiba.py`): one mask across a range of layers, checked against the Per-Sample Bottleneck, a
hand-written reference of the paper's equations and the closed-form information of a linear-Gaussian chain."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.coiba import (
    CoIBABottleneck,
    CoIBASettings,
    default_range,
    layer_range,
    resize_mask,
)
from iba_core.results import range_label
from iba_core.feature_stats import stats_for_layers
from iba_core.errors import UserError
from iba_core.feature_stats import FeatureStats, estimate_stats
from iba_core.networks import network_from_module
from iba_core.networks.network import Network
from iba_core.networks.spec import NetworkSpec, Preprocess
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from reference_impl import hook_count

pytestmark = pytest.mark.usefixtures("one_thread")

SIZE = 16  # input side of the small CNN: its grids are 16 × 16 (c1, c2) and 8 × 8 (c3)


class SmallCNN(nn.Module):
    """Three stages (the last halves the grid) and a linear head; BatchNorm with running statistics that are
    not the identity, so folding it changes the arithmetic, not the function."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.c3 = nn.Sequential(nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5))
        with torch.no_grad():
            self.c1[1].running_mean.uniform_(-0.5, 0.5)
            self.c1[1].running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.c3(self.c2(self.c1(x))))


def small_cnn(staged: bool = True) -> Network:
    """SmallCNN as a Network: with a stage list (the stages path) or without (fx, else the hook path)."""
    model = SmallCNN().eval()
    stages = (lambda m: [("c1", m.c1), ("c2", m.c2), ("c3", m.c3), (None, m.head)]) if staged else None
    spec = NetworkSpec(key=f"small-cnn-{staged}", title="Small CNN", build=lambda state: model,
                       layers=("c1", "c2", "c3"), default_layer="c1", stages=stages,
                       hook_modules={"c1": "c1", "c2": "c2", "c3": "c3"}, resize=SIZE, crop=SIZE)
    return Network(spec, model, "random", torch.device("cpu"), Preprocess.of(spec), [])


def layer_stats(network, layers, size: int = SIZE) -> dict[str, FeatureStats]:
    """Statistics of each layer on random images of `size` pixels."""
    out = {}
    for layer in layers:
        g = torch.Generator().manual_seed(1)
        batches = [torch.randn(16, 3, size, size, generator=g) for _ in range(2)]
        mean, std, n = estimate_stats(network.prefix(layer), batches)
        out[layer] = FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")
    return out


def images(n: int, size: int = SIZE, seed: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def tiny_vit():
    """The tiny ViT of tests/networks (a class token that mixes every patch)."""
    spec = importlib.util.spec_from_file_location(
        "tiny_transformer", Path(__file__).parent / "networks" / "tiny_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return network_from_module(module.TinyViT(True), "tiny-vit-coiba")


FAST = dict(steps=3, batch=3, precision="fp32")
#: The Per-Sample Bottleneck's β·k and read point (CoIBA's preset has the authors' β·k 1 and last forward pass)
AS_IBA = dict(beta_k=10.0, read_point="final")


# ---- (a) a one-layer range with one λ per unit is the Per-Sample Bottleneck ------------------------------------


@pytest.mark.parametrize("staged", [True, False])
def test_one_layer_element_mask_is_the_per_sample_bottleneck(staged):
    net = small_cnn(staged)
    stats = layer_stats(net, ["c2"])
    x = images(1)
    coiba = CoIBABottleneck.for_network(net, ["c2"], stats, CoIBASettings(sigma=1.0, mask="element", **AS_IBA, **FAST))
    iba = PerSampleBottleneck.for_network(net, "c2", stats["c2"], BottleneckSettings(sigma=1.0, **FAST))
    got, want = coiba.attribute(x, 2), iba.attribute(x, 2)
    assert got.path == want.path
    np.testing.assert_allclose(got.heatmap, want.heatmap, rtol=1e-4, atol=1e-6 * want.heatmap.max())
    assert got.total_bits == pytest.approx(want.total_bits, rel=1e-4)
    assert got.p_with == pytest.approx(want.p_with, rel=1e-4)


def test_one_layer_element_mask_is_the_per_sample_bottleneck_on_a_vit():
    net = tiny_vit()
    layer = net.spec.default_layer
    stats = layer_stats(net, [layer], size=32)
    x = images(1, 32)
    coiba = CoIBABottleneck.for_network(net, [layer], stats, CoIBASettings(sigma=1.0, mask="element", **AS_IBA, **FAST))
    want = PerSampleBottleneck.for_network(net, layer, stats[layer], BottleneckSettings(sigma=1.0, **FAST)).attribute(x, 1)
    got = coiba.attribute(x, 1)
    np.testing.assert_allclose(got.heatmap, want.heatmap, rtol=1e-4, atol=1e-6 * want.heatmap.max())
    assert got.total_bits == pytest.approx(want.total_bits, rel=1e-4)
    assert got.unlocated_bits == pytest.approx(want.unlocated_bits, rel=1e-4) and got.unlocated_bits > 0


# ---- (i) the method on the offline network -------------------------------------------------------------------


def test_the_method_on_the_offline_network(offline_model, chelsea_x):
    from iba_core.methods import get_method

    method = get_method("coiba", steps=2, batch=2)
    assert method.key == "coiba" and method.name == "CoIBA β=1/k" and method.needs_stats and method.batched
    amap = method.attribute(offline_model, chelsea_x, 285)
    assert amap.values.shape == (224, 224) and np.isfinite(amap.values).all() and amap.values.min() >= 0
    extra = amap.extra
    assert extra["layers"][0] == "block3_2" and extra["layers"][-1] == "block7_1" and len(extra["layers"]) == 12
    assert extra["total_bits"] > 0 and 0 <= extra["p_with"] <= 1 and extra["path"] == "stages"
    assert float(amap.values.sum()) == pytest.approx(extra["total_bits"], rel=1e-3)
    assert method.settings_identity(offline_model)["layers"] == extra["layers"]
    assert hook_count(offline_model.model) == 0


# ---- (b) one λ per location, by hand from the paper's equations ---------------------------------------------


@pytest.mark.parametrize("read_point", ["final", "last_step"])
def test_location_mask_equals_a_hand_written_reference(read_point):
    """One layer, mask="location": α (1, 1, h, w), λ = sigmoid(α) shared by the channels, Z = λR + (1 − λ)(μ + σn),
    KL per element −log(1 − λ) + ((1 − λ)² − 1)/2 + λ²((R − μ)/σ)²/2 summed (eq. 5), loss = CE + β·KL with
    β = β·k / k, Adam with lr 1; the heatmap the KL summed over channels, in bits, of the final λ or (the preset,
    the authors' read point) of the last forward pass's λ, before the last update."""
    net = small_cnn(True)
    stats = layer_stats(net, ["c2"])
    x, target, s = images(1), 3, CoIBASettings(read_point=read_point, **FAST)
    assert CoIBASettings().read_point == "last_step" and CoIBASettings().beta_k == 1.0
    result = CoIBABottleneck.for_network(net, ["c2"], stats, s).attribute(x, target)

    model = net.model
    with torch.no_grad():
        r = model.c2(model.c1(x))
    mu, sigma = stats["c2"].mean[None], stats["c2"].std.clamp_min(s.min_std)[None]
    r_std = (r - mu) / sigma
    k, (c, h, w) = r.numel(), r.shape[1:]
    alpha = torch.full((1, 1, h, w), s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=s.lr)
    g = torch.Generator().manual_seed(s.seed)

    def kl(lam):
        return -torch.log(1 - lam) + ((1 - lam) ** 2 - 1) / 2 + (lam * r_std) ** 2 / 2

    for _ in range(s.steps):
        adam.zero_grad()
        lam = torch.sigmoid(alpha)
        # the noise is drawn in R's channels-last memory order (the suffix's layout), (copies, h, w, C)
        n = torch.randn(s.batch, h, w, c, generator=g).permute(0, 3, 1, 2)
        z = lam * r + (1 - lam) * (mu + sigma * n)
        logits = model.head(model.c3(z))
        loss = nn.functional.cross_entropy(logits, torch.full((s.batch,), target)) + s.beta_k / k * kl(lam).sum()
        loss.backward()
        last_forward = lam.detach()
        adam.step()
    with torch.no_grad():
        lam = torch.sigmoid(alpha) if read_point == "final" else last_forward
        bits = kl(lam).sum(dim=1)[0] / math.log(2)
    np.testing.assert_allclose(result.lambda_mean, lam[0, 0].numpy(), rtol=1e-4)
    np.testing.assert_allclose(result.feature_bits, bits.numpy(), rtol=1e-4, atol=1e-6 * float(bits.max()))
    assert result.total_bits == pytest.approx(float(bits.sum()), rel=1e-4)
    assert len({round(float(v), 6) for v in result.lambda_mean.ravel()}) > 1  # λ moved, and per location


# ---- (c) the upper bound: the first layer's information bounds every later layer's -----------------------


class LinearChain(nn.Module):
    """1×1 convolutions without activations: every pixel is its own linear-Gaussian chain."""

    def __init__(self, c: int = 3):
        super().__init__()
        torch.manual_seed(4)
        self.l1, self.l2, self.l3 = (nn.Conv2d(3 if i == 0 else c, c, 1) for i in range(3))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 4))

    def forward(self, x):
        return self.head(self.l3(self.l2(self.l1(x))))


def test_the_first_layer_bounds_the_information_of_every_later_layer():
    """Gaussian data x ~ N(0, I) through linear layers: R_1 = W_1x + b_1 ~ N(b_1, W_1W_1ᵀ) exactly, and every Z_l is
    Gaussian, so I(R_1; Z_l) has a closed form. For the fitted λ (one per pixel), at every pixel:
    I(R_1; Z_3) ≤ I(R_1; Z_2) ≤ I(R_1; Z_1) ≤ E_R[KL(P(Z_1|R_1) ‖ N(μ_1, σ_1²))], the term CoIBA minimises
    (data processing inequality; KL to any Q bounds the information)."""
    torch.set_default_dtype(torch.float64)
    try:
        model = LinearChain().eval()
    finally:
        torch.set_default_dtype(torch.float32)
    model = model.float()
    net = network_from_module(model, "linear-chain")
    layers = layer_range(net, "l1", "l3")
    assert layers == ["l1", "l2", "l3"]
    W = [m.weight.detach().double()[:, :, 0, 0] for m in (model.l1, model.l2, model.l3)]
    b = [m.bias.detach().double() for m in (model.l1, model.l2, model.l3)]
    # exact statistics of the clean layers (x ~ N(0, I)): mean and covariance, per pixel the same
    means, covs = [b[0]], [W[0] @ W[0].T]
    for l in (1, 2):
        means.append(W[l] @ means[-1] + b[l])
        covs.append(W[l] @ covs[-1] @ W[l].T)
    size = 4
    stats = {layer: FeatureStats(m.float()[:, None, None].expand(-1, size, size).clone(),
                                 cov.diagonal().sqrt().float()[:, None, None].expand(-1, size, size).clone(), 10**6)
             for layer, m, cov in zip(layers, means, covs)}
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    settings = CoIBASettings(steps=5, batch=4, precision="fp32", beta_k=3.0, min_std=1e-6)
    result = CoIBABottleneck.for_network(net, layers, stats, settings).attribute(x, 1)
    assert result.path == "fx"  # the later layers are modules of the fx cut's suffix: hooks there
    lam = torch.as_tensor(result.lambda_mean, dtype=torch.float64)
    assert 0.05 < float(lam.min()) and float(lam.max()) < 0.999 and float(lam.std()) > 0  # fitted, not saturated

    def logdet(m):
        return float(torch.logdet(m))

    c = W[0].shape[0]
    eye = torch.eye(c, dtype=torch.float64)
    checked = 0
    for lam_p in lam.flatten().tolist():
        L, M = lam_p * eye, (1 - lam_p) * eye
        sd = [cov.diagonal().sqrt() for cov in covs]
        # Z_1 = L R_1 + M(μ_1 + σ_1 n_1): gain A on R_1 and noise covariance N
        A, N = L, M @ torch.diag(sd[0] ** 2) @ M
        info = [0.5 * (logdet(A @ covs[0] @ A.T + N) - logdet(N))]
        for l in (1, 2):
            G = L @ W[l]
            A, N = G @ A, G @ N @ G.T + M @ torch.diag(sd[l] ** 2) @ M
            info.append(0.5 * (logdet(A @ covs[0] @ A.T + N) - logdet(N)))
        # E_R[KL] with E[((R − μ)/σ)²] = 1 per channel
        bound = c * (-math.log(1 - lam_p) + ((1 - lam_p) ** 2 - 1) / 2 + lam_p ** 2 / 2)
        assert info[2] <= info[1] + 1e-9 <= info[0] + 2e-9 <= bound + 3e-9, (lam_p, info, bound)
        assert info[2] > 0 and info[0] < bound  # not trivially: information passes, the bound is strict
        checked += 1
    assert checked == size * size


# ---- (d) a two-layer range on a ViT (class token) and on a CNN whose next stage has a smaller grid -----------


def test_two_blocks_of_a_vit_share_the_mask_and_the_class_token_has_its_own_lambda():
    net = tiny_vit()
    first, last = default_range(net)
    assert (first, last) == ("blocks.1", "blocks.3")  # the default layer to the last block
    # the network lists every module: a block's own sub-modules are left out of a range of blocks
    assert "blocks.2.mix" in net.spec.layers and layer_range(net, "blocks.1", "blocks.3") == [f"blocks.{i}" for i in (1, 2, 3)]
    layers = layer_range(net, "blocks.1", "blocks.2")
    assert layers == ["blocks.1", "blocks.2"]
    stats = layer_stats(net, layers, size=32)
    x = images(1, 32)
    coiba = CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(**FAST))
    result = coiba.attribute(x, 1)
    assert result.heatmap.shape == (32, 32) and result.feature_bits.shape == (4, 4)
    assert result.lambda_mean.shape == (4, 4) and result.feature_shape == (8, 4, 4)
    assert result.unlocated_bits > 0
    assert result.heatmap.sum() == pytest.approx(result.total_bits - result.unlocated_bits, rel=1e-4)
    # The class token's bits come from ONE λ shared by its 8 channels: KL = Σ_c [−log(1−λ) + ((1−λ)² − 1)/2
    # + λ²r_c²/2] is then a quadratic in λ's terms with the class token's own r_c, solved here for λ ∈ (0, 1).
    with torch.no_grad():
        r = net.prefix("blocks.1")(x)[0, 0]
    r_std = (r - stats["blocks.1"].mean[0]) / stats["blocks.1"].std[0].clamp_min(0.01)

    def cls_bits(lam):
        return float((-math.log(1 - lam) + ((1 - lam) ** 2 - 1) / 2 + lam ** 2 * r_std ** 2 / 2).sum()) / math.log(2)

    lo, hi = 1e-6, 1 - 1e-6
    for _ in range(100):  # bisection: the bits grow with λ
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cls_bits(mid) < result.unlocated_bits else (lo, mid)
    assert cls_bits(lo) == pytest.approx(result.unlocated_bits, rel=1e-4) and 0 < lo < 1


def test_a_cnn_range_over_a_smaller_grid_resizes_lambda():
    net = small_cnn(True)
    layers = layer_range(net, "c1", "c3")
    stats = layer_stats(net, layers)
    assert stats["c3"].mean.shape == (6, 8, 8) and stats["c1"].mean.shape == (4, 16, 16)
    result = CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(**FAST)).attribute(images(1), 2)
    assert result.lambda_mean.shape == (16, 16) and result.heatmap.shape == (SIZE, SIZE)
    assert np.isfinite(result.heatmap).all() and result.total_bits > 0
    # one λ per unit cannot be shared with a layer of another shape
    with pytest.raises(UserError, match="c3 differ"):
        CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(mask="element", **FAST))


def test_resize_mask_averages_when_shrinking_and_keeps_lambda_plus_one_minus_lambda_at_one():
    lam = torch.rand(2, 1, 8, 6, generator=torch.Generator().manual_seed(0))
    small = resize_mask(lam, (4, 3))
    assert torch.allclose(small, lam.view(2, 1, 4, 2, 3, 2).mean(dim=(3, 5)))  # 2 × 2 cells averaged
    for size in ((4, 3), (16, 12), (8, 6), (5, 7)):
        assert torch.allclose(resize_mask(lam, size) + resize_mask(1 - lam, size), torch.ones(2, 1, *size))
    assert resize_mask(lam, (8, 6)) is lam


# ---- (e) the noise really is injected at the later layers, with their own statistics ---------------------------


@pytest.mark.parametrize("staged", [True, False])
def test_noise_at_the_last_layer_uses_its_own_statistics(staged):
    """λ ≈ 0 (α = −10, no steps) replaces the last layer's output by its statistics' mean (σ tiny): p(target) is
    then the head's on that mean, whatever the image; λ ≈ 1 (α = 10) leaves the network as it is."""
    net = small_cnn(staged)
    layers = ["c1", "c2", "c3"]
    stats = layer_stats(net, layers)
    mu = torch.linspace(-2.0, 3.0, 6)[:, None, None].expand(6, 8, 8).contiguous()
    stats["c3"] = FeatureStats(mu, torch.full((6, 8, 8), 1e-7), 100)
    x, target = images(1), 4
    closed = CoIBASettings(steps=0, batch=2, init_alpha=-10.0, min_std=1e-6, precision="fp32")
    got = CoIBABottleneck.for_network(net, layers, stats, closed).attribute(x, target)
    with torch.no_grad():
        want = torch.softmax(net.model.head(mu[None]), dim=1)[0, target]
    assert got.p_with == pytest.approx(float(want), rel=1e-3)
    assert abs(got.p_without - float(want)) > 0.01  # the image's own p(target) is another
    opened = CoIBASettings(steps=0, batch=2, init_alpha=10.0, min_std=1e-6, precision="fp32")
    got = CoIBABottleneck.for_network(net, layers, stats, opened).attribute(x, target)
    assert got.p_with == pytest.approx(got.p_without, rel=1e-3)


# ---- (f) ranges and settings in the user's words ------------------------------------------------------------


def test_layer_range_errors_name_the_layers():
    net = small_cnn(True)
    assert layer_range(net, "c1", "c3") == ["c1", "c2", "c3"] and layer_range(net, "c2", "c2") == ["c2"]
    with pytest.raises(UserError, match="runs backwards: c3 comes after c1.*c1 … c3"):
        layer_range(net, "c3", "c1")
    with pytest.raises(UserError, match="no layer 'c9'"):
        layer_range(net, "c1", "c9")
    vit = tiny_vit()
    with pytest.raises(UserError, match="blocks.0 cannot share embed's mask: it has 1 token"):
        layer_range(vit, "embed", "blocks.0")
    with pytest.raises(UserError, match="Unknown CoIBA mask 'pixel'"):
        CoIBASettings(mask="pixel")
    with pytest.raises(UserError, match="No feature statistics for c2"):
        CoIBABottleneck.for_network(net, ["c1", "c2"], layer_stats(net, ["c1"]))
    with pytest.raises(UserError, match="distinct and in the network's order"):
        CoIBABottleneck.for_network(net, ["c2", "c1"], layer_stats(net, ["c1", "c2"]))
    assert range_label("block3_2", "block7_1") == "block3_2 … block7_1" and range_label("c1", "c1") == "c1"


# ---- (g) a batch gives each image its own result; the paths agree ---------------------------------------------


@pytest.mark.parametrize("network", ["stages", "hook", "vit"])
def test_a_batch_equals_the_images_one_by_one(network):
    if network == "vit":
        net, size = tiny_vit(), 32
        layers = layer_range(net, "blocks.1", "blocks.3")
    else:
        net, size = small_cnn(network == "stages"), SIZE
        layers = ["c1", "c2", "c3"]
    stats = layer_stats(net, layers, size)
    coiba = CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(**FAST))
    # the ViT's fx cut traces through its blocks (no hook there would fire): the whole network on the hook path
    assert coiba.path == ("hook" if network == "vit" else network)
    assert net.split_path(layers[0]) == {"stages": "stages", "hook": "fx", "vit": "fx"}[network]
    x, targets = images(3, size), [1, 2, 0]
    batch = coiba.attribute_batch(x, targets)
    for i, t in enumerate(targets):
        alone = coiba.attribute(x[i:i + 1], t)
        np.testing.assert_allclose(batch[i].heatmap, alone.heatmap, rtol=1e-4, atol=1e-6 * alone.heatmap.max())
        assert batch[i].total_bits == pytest.approx(alone.total_bits, rel=1e-4)
        assert batch[i].p_with == pytest.approx(alone.p_with, rel=1e-4, abs=1e-6)


def test_the_stages_and_the_hook_path_give_the_same_result():
    """Segments with Z_l between them (stages, BatchNorm folded) and forward hooks on the whole network."""
    results = []
    for staged in (True, False):
        net = small_cnn(staged)
        stats = layer_stats(small_cnn(True), ["c1", "c2", "c3"])
        results.append(CoIBABottleneck.for_network(net, ["c1", "c2", "c3"], stats, CoIBASettings(**FAST))
                       .attribute(images(1), 2))
    assert [r.path for r in results] == ["stages", "hook"]
    np.testing.assert_allclose(results[0].heatmap, results[1].heatmap, rtol=1e-4,
                               atol=1e-6 * results[1].heatmap.max())
    assert results[0].p_with == pytest.approx(results[1].p_with, rel=1e-4)


# ---- (h) hooks are removed, also after an error -------------------------------------------------------------


def test_no_hooks_remain_after_a_run_or_an_error():
    net = small_cnn(False)
    layers = ["c1", "c2", "c3"]
    stats = layer_stats(net, layers)
    CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(**FAST)).attribute(images(1), 1)
    assert hook_count(net.model) == 0
    wrong = dict(stats, c3=layer_stats(net, ["c2"])["c2"])  # statistics of another shape for the last layer
    with pytest.raises(UserError, match="Statistics for c3 are for a layer shaped"):
        CoIBABottleneck.for_network(net, layers, wrong, CoIBASettings(**FAST)).attribute(images(1), 1)
    assert hook_count(net.model) == 0

    class Boom(RuntimeError):
        pass

    def boom(*_):
        raise Boom

    handle = net.model.head.register_forward_hook(boom)
    try:
        with pytest.raises(Boom):
            CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(**FAST)).attribute(images(1), 1)
        assert hook_count(net.model) == 1
    finally:
        handle.remove()
    assert hook_count(net.model) == 0


# ---- statistics for a range: cached first, the missing ones in one pass ------------------------------------------


def test_statistics_for_a_range_estimate_the_missing_layers_in_one_pass(monkeypatch):
    from iba_core import feature_stats

    net = small_cnn(True)
    cached = feature_stats.get_stats(net, "c2", n=4)
    calls = []
    real = feature_stats.compute_all_stats

    def spy(network, layers=None, **kwargs):
        calls.append(list(layers))
        return real(network, layers, **kwargs)

    monkeypatch.setattr(feature_stats, "compute_all_stats", spy)  # one function for a layer or a range
    stats = stats_for_layers(net, ["c1", "c2", "c3"], n=4)
    assert calls == [["c1", "c3"]]  # one pass for the two layers not cached
    assert list(stats) == ["c1", "c2", "c3"] and torch.equal(stats["c2"].mean, cached.mean)
    assert [stats[layer].mean.shape for layer in stats] == [(4, 16, 16), (4, 16, 16), (6, 8, 8)]
    again = stats_for_layers(net, ["c1", "c2", "c3"], n=4)
    assert calls == [["c1", "c3"]] and all(torch.equal(again[k].mean, stats[k].mean) for k in stats)
    with pytest.raises(UserError, match="Image folder not found"):
        stats_for_layers(net, ["c1"], images="/no/such/folder", n=4)


# ---- the method's settings ---------------------------------------------------------------------------------


def test_the_method_names_its_range_and_checks_its_settings(offline_model):
    from iba_core.methods import get_method

    method = get_method("coiba", layers="block4_1:block6_4", beta_k=1)
    assert method.key == "coiba_1__block4_1-block6_4" and method.name == "CoIBA β=1/k, block4_1 … block6_4"
    assert get_method("coiba", layers=("block4_1", "block6_4"), beta_k=10).key == "coiba_10__block4_1-block6_4"
    # today's output placement at the paper's β·k, as this project ran CoIBA before the authors' code was read
    assert get_method("coiba", beta_k=10, placement="output").key == "coiba_10_output"
    assert get_method("coiba", steps=3).key == "coiba"
    layers = method.layer_range(offline_model)
    assert layers[0] == "block4_1" and layers[-1] == "block6_4" and len(layers) == 10
    identity = method.settings_identity(offline_model)
    assert identity["layers"] == layers and identity["beta_k"] == 1
    assert get_method("coiba").settings_identity(offline_model)["layers"] == layer_range(offline_model,
                                                                                          *default_range(offline_model))
    assert default_range(offline_model) == ("block3_2", "block7_1")
    # `layer` (the front ends' layer setting) starts the default range there
    from_layer = get_method("coiba", layer="block5_1")
    assert from_layer.key == "coiba_1__block5_1"
    assert from_layer.layer_range(offline_model) == layer_range(offline_model, "block5_1", "block7_1")
    assert from_layer.settings_identity(offline_model)["layer"] == "block5_1"
    with pytest.raises(UserError, match="no layer 'block9_9'"):
        get_method("coiba", layer="block9_9").layer_range(offline_model)
    with pytest.raises(UserError, match="FIRST:LAST"):
        get_method("coiba", layers="a:b:c")
    with pytest.raises(UserError, match="runs backwards"):
        get_method("coiba", layers="block6_4:block4_1").layer_range(offline_model)
    with pytest.raises(UserError, match="β·k"):
        get_method("coiba", beta_k=-1)
    with pytest.raises(UserError, match="mask"):
        get_method("coiba", mask="pixel")
