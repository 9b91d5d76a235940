"""The bottleneck family's presets (`iba`, `coiba`, `m2ib`) as their authors run them, checked on tiny hand-built
networks: CoIBA's branch placement (the input of each block's attention branch, the residual stream clean), M2IB's
standard-normal prior (its KL by hand), the old keys; and the default precision on the hook path (a bf16 CPU's
"auto"), whose p(target) without the bottleneck is the unmodified network's."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.coiba import BRANCH_FIRST_DEPTH, CoIBABottleneck, CoIBASettings, branch_range, placement_of
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.networks import network_from_module
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from test_coiba import images, layer_stats, small_cnn

pytestmark = pytest.mark.usefixtures("one_thread")

FAST = dict(steps=3, batch=3, precision="fp32")


class PreNormBlock(nn.Module):
    """A pre-norm transformer block as timm writes it: t + mix(norm1(t)), then t + mlp(norm2(t)); the token mixing
    (a mean over tokens) stands in for attention."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Linear(dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        a = self.norm1(t)
        t = t + torch.tanh(self.attn(a + a.mean(dim=1, keepdim=True)))
        return t + torch.tanh(self.mlp(self.norm2(t)))


class PreNormViT(nn.Module):
    """Patch embedding, a class token, six pre-norm blocks, a head on the class token."""

    def __init__(self, dim: int = 8, classes: int = 3, depth: int = 6):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Conv2d(3, dim, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.blocks = nn.Sequential(*(PreNormBlock(dim) for _ in range(depth)))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.head(self.blocks(t)[:, 0])


@pytest.fixture(scope="module")
def vit():
    return network_from_module(PreNormViT().eval(), "prenorm-vit")


def kl_by_hand(lam: torch.Tensor, r: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(λR + (1 − λ)μ, (1 − λ)²σ²) ‖ N(μ, σ²)) per element, written out (paper eq. 5, Appendix C)."""
    r_std = (r - mu) / sigma
    return -torch.log(1 - lam) + ((1 - lam) ** 2 - 1) / 2 + (lam * r_std) ** 2 / 2


# ---- CoIBA: the authors' placement ---------------------------------------------------------------------------


def test_the_coiba_preset_is_the_authors_setting():
    s = CoIBASettings()
    assert (s.beta_k, s.sigma, s.read_point, s.mask, s.steps, s.batch, s.lr, s.init_alpha) == (
        1.0, 0.0, "last_step", "location", 10, 10, 1.0, 5.0)
    assert s.placement == "auto" and BRANCH_FIRST_DEPTH == 4 / 12  # blocks.4 … blocks.11 of ViT-B's 12


def test_branch_placement_sits_at_each_blocks_norm1_from_a_third_of_the_depth(vit):
    method = get_method("coiba")
    assert method.placement(vit) == ("branch", "")  # a transformer with a class token: the authors' placement
    view, layers = method.resolve(vit)
    assert layers == [f"blocks.{i}.norm1" for i in range(2, 6)]  # round(6 / 3) = 2 … the last block
    assert all(layer in view.spec.layers for layer in layers)
    assert branch_range(vit, "blocks.1", "blocks.3")[1] == ["blocks.1.norm1", "blocks.2.norm1", "blocks.3.norm1"]
    with pytest.raises(UserError, match="not a transformer block"):
        branch_range(vit, "embed", "blocks.3")
    with pytest.raises(UserError, match="runs backwards"):
        branch_range(vit, "blocks.3", "blocks.1")


def test_branch_placement_keeps_the_residual_stream_clean(vit):
    """λ ≈ 0 everywhere (α = −10, no step): at the block outputs the image is gone (two images give the same
    p(target)); at the attention branches the clean residual stream still carries each image to the head."""
    x = images(2, 32)
    p_with = {}
    for placement in ("output", "branch"):
        method = get_method("coiba", placement=placement, steps=0, batch=4, precision="fp32")
        view, layers = method.resolve(vit)
        stats = layer_stats(view, layers, size=32)
        bottleneck = CoIBABottleneck.for_network(view, layers, stats, method.coiba_settings().__class__(
            **{**method.coiba_settings().__dict__, "init_alpha": -10.0}))
        p_with[placement] = [r.p_with for r in bottleneck.attribute_batch(x, [1, 1])]
    assert p_with["output"][0] == pytest.approx(p_with["output"][1], rel=1e-3)
    assert abs(p_with["branch"][0] - p_with["branch"][1]) > 1e-3


def test_branch_placement_is_refused_on_a_cnn_and_auto_falls_back_to_outputs():
    net = small_cnn(False)
    with pytest.raises(UserError, match="no transformer blocks"):
        placement_of(net, "branch")
    placement, note = placement_of(net, "auto")
    assert placement == "output" and "extension" in note
    assert get_method("coiba").layer_range(net) == ["c1", "c2", "c3"]  # the default range on the outputs


def test_a_one_layer_branch_range_with_the_iba_settings_is_the_per_sample_bottleneck(vit):
    view, layers = branch_range(vit, "blocks.3", "blocks.3")
    stats = layer_stats(view, layers, size=32)
    x = images(1, 32)
    as_iba = dict(beta_k=10.0, read_point="final", sigma=1.0, **FAST)
    got = CoIBABottleneck.for_network(view, layers, stats, CoIBASettings(mask="element", **as_iba)).attribute(x, 2)
    want = PerSampleBottleneck.for_network(view, layers[0], stats[layers[0]],
                                           BottleneckSettings(**as_iba)).attribute(x, 2)
    np.testing.assert_allclose(got.heatmap, want.heatmap, rtol=1e-4, atol=1e-6 * want.heatmap.max())
    assert got.total_bits == pytest.approx(want.total_bits, rel=1e-4)


# ---- M2IB: the standard-normal prior, by hand --------------------------------------------------------------


def test_m2ib_preset_and_its_depth(vit):
    method = get_method("m2ib")
    assert method.key == "m2ib" and not method.needs_stats
    s = method.bottleneck_settings()
    assert (s.beta_k, s.sigma, s.read_point, s.prior, s.steps, s.batch, s.lr) == (
        0.1, 0.0, "last_step", "standard_normal", 10, 10, 1.0)
    assert method.layer(vit) == "blocks.4"  # ViT-B/32's block 9 of 12: round(0.75 · 6) = 4
    assert method.layer(small_cnn(False)) == "c1"  # no blocks: the network's default layer
    assert get_method("m2ib", beta_k=1).key == "m2ib_1"


def test_m2ib_kl_is_the_standard_normal_formula_by_hand():
    """ε ~ N(0, 1) on the raw features, KL = −½(1 + log((1 − λ)²) − (λR)² − (1 − λ)²) (M2IB's scripts/iba.py), one
    λ per unit, no smoothing, loss = CE + β·ΣKL (β = β·k / k), the map read at the last forward pass."""
    net = small_cnn(True)
    x, target = images(1), 2
    s = get_method("m2ib", layer="c2", steps=3, batch=3, precision="fp32").bottleneck_settings()
    result = PerSampleBottleneck.for_network(net, "c2", None, s).attribute(x, target)

    model = net.model
    with torch.no_grad():
        r = model.c2(model.c1(x))
    k, (c, h, w) = r.numel(), r.shape[1:]
    alpha = torch.full_like(r, s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=s.lr)
    g = torch.Generator().manual_seed(s.seed)

    def kl(lam):
        return -0.5 * (1 + torch.log((1 - lam) ** 2) - (lam * r) ** 2 - (1 - lam) ** 2)

    ces = []
    for _ in range(s.steps):
        adam.zero_grad()
        lam = torch.sigmoid(alpha)
        n = torch.randn(s.batch, h, w, c, generator=g).permute(0, 3, 1, 2)  # R's channels-last order
        logits = model.head(model.c3(lam * r + (1 - lam) * n))
        ce = nn.functional.cross_entropy(logits, torch.full((s.batch,), target))
        ces.append(float(ce.detach()))
        loss = ce + s.beta_k / k * kl(lam).sum()
        loss.backward()
        last_forward = lam.detach()
        adam.step()
    assert [step.ce for step in result.history] == pytest.approx(ces, rel=1e-4)  # the N(0, 1) noise itself
    bits = (kl(last_forward).sum(dim=1)[0] / math.log(2)).detach()
    np.testing.assert_allclose(result.feature_bits, bits.numpy(), rtol=1e-4, atol=1e-6 * float(bits.max()))
    assert result.total_bits == pytest.approx(float(bits.sum()), rel=1e-4)


# ---- old keys ------------------------------------------------------------------------------------------------


def test_the_inactive_unit_threshold_reaches_coiba_and_is_refused_with_m2ibs_prior():
    assert get_method("coiba", inactive_threshold=0.01).coiba_settings().inactive_threshold == 0.01
    with pytest.raises(UserError, match="standard-normal prior"):
        get_method("m2ib", inactive_threshold=0.01)


def test_old_keys_still_work():
    assert get_method("iba").key == "iba_10" and get_method("iba_10").key == "iba_10"
    assert get_method("iba_0_1").key == "iba_0_1" and get_method("iba_0_1").settings["prior"] == "estimated"
    assert get_method("coiba").key == "coiba"
    from iba_core.methods import resolve_methods

    assert [m.key for m in resolve_methods("iba,m2ib")] == ["iba_10", "m2ib"]


# ---- the default precision on the hook path ------------------------------------------------------------------


@pytest.fixture
def bf16_cpu(monkeypatch, tmp_path):
    """A CPU with bf16 matrix instructions (faked), and a fresh precision memo: "auto" measures."""
    from iba_core import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    monkeypatch.setattr(precision, "cuda_bf16", lambda: False)
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("precision", ["auto", "bf16"])
def test_coiba_on_the_hook_path_with_a_lower_precision(bf16_cpu, precision):
    """A range through forward hooks (no stage list, no cut): "auto" measured without the image it replays crashed
    with AttributeError; p(target) without the bottleneck is the fp32 network's, whatever the steps' precision."""
    net = small_cnn(False)
    layers = ["c1", "c2", "c3"]
    stats = layer_stats(net, layers)
    x = images(1)
    result = CoIBABottleneck.for_network(net, layers, stats, CoIBASettings(steps=2, batch=2, precision=precision)
                                         ).attribute(x, 1)
    assert result.path == "hook" and result.precision in ("fp32", "bf16")
    with torch.no_grad():
        want = float(torch.softmax(net.model(x), dim=1)[0, 1])
    assert result.p_without == pytest.approx(want, rel=1e-5)


def test_branch_placement_by_hand_on_a_vit(vit):
    """The `coiba` preset at two blocks' attention-branch inputs of a ViT with a class token, written out: one α per
    token (the class token's own), λ = sigmoid(α) unsmoothed and shared by both layers, Z_l = λR_l + (1 − λ)(μ_l +
    σ_l·n) at each norm1 output (the residual stream untouched), KL at the first only, loss = CE + β·ΣKL with β·k 1,
    Adam lr 1; the map the last forward pass's KL summed over channels (the class token's in unlocated_bits)."""
    method = get_method("coiba", layers="blocks.1:blocks.2", steps=3, batch=3, precision="fp32")
    view, layers = method.resolve(vit)
    assert layers == ["blocks.1.norm1", "blocks.2.norm1"]
    stats = layer_stats(view, layers, size=32)
    x, target, s = images(1, 32), 2, method.coiba_settings()
    result = method.with_settings(stats=stats).run(vit, x, target)

    model = vit.model
    norms = [model.blocks[1].norm1, model.blocks[2].norm1]
    with torch.no_grad():
        captured = []
        handles = [m.register_forward_hook(lambda _m, _i, out: captured.append(out.clone())) for m in norms]
        model(x)
        for h in handles:
            h.remove()
    r1 = captured[0]  # (1, 1 + 16, C)
    c, hw = r1.shape[-1], r1.shape[1] - 1
    mus = [stats[l].mean[None] for l in layers]
    sigmas = [stats[l].std.clamp_min(s.min_std)[None] for l in layers]
    alpha_grid = torch.full((1, 1, 4, 4), s.init_alpha, requires_grad=True)
    alpha_cls = torch.full((1, 1, 1, 1), s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha_grid, alpha_cls], lr=s.lr)
    g = torch.Generator().manual_seed(s.seed)

    def token_lambda():
        lam_grid, lam_cls = torch.sigmoid(alpha_grid), torch.sigmoid(alpha_cls)
        return torch.cat([lam_cls.reshape(1, 1, 1), lam_grid.reshape(1, hw, 1)], dim=1)  # (1, 1 + hw, 1)

    def draws(first: bool):
        """The grid's noise, then the class token's (C): the first layer's grid in R's channels-last memory order
        (h, w, C), a later layer's in the order of its output's grid view (C, h, w), as `bottleneck.inject_noise`
        draws them."""
        if first:
            grid = torch.randn(s.batch, 4, 4, c, generator=g).reshape(s.batch, hw, c)
        else:
            grid = torch.randn(s.batch, c, 4, 4, generator=g).permute(0, 2, 3, 1).reshape(s.batch, hw, c)
        cls = torch.randn(s.batch, c, 1, 1, generator=g).reshape(s.batch, 1, c)
        return torch.cat([cls, grid], dim=1)

    def kl(lam):
        return kl_by_hand(lam, r1, mus[0], sigmas[0])

    k, ces = r1.numel(), []
    for _ in range(s.steps):
        adam.zero_grad()
        lam = token_lambda()

        def swap(i):
            def hook(_m, _i, out):
                return lam * out + (1 - lam) * (mus[i] + sigmas[i] * draws(i == 0))
            return hook

        handles = [m.register_forward_hook(swap(i)) for i, m in enumerate(norms)]
        logits = model(x.expand(s.batch, -1, -1, -1))
        for h in handles:
            h.remove()
        ce = nn.functional.cross_entropy(logits, torch.full((s.batch,), target))
        ces.append(float(ce.detach()))
        loss = ce + s.beta_k / k * kl(lam).sum()
        loss.backward()
        last = kl(lam.detach())
        adam.step()
    # each step's L_CE depends on every noise draw at both layers (Adam's first steps move α by ±lr whatever the
    # noise, so the bits alone would not notice a wrong draw)
    assert [h.ce for h in result.history] == pytest.approx(ces, rel=1e-4)
    bits = last[0].sum(dim=-1) / math.log(2)  # per token
    np.testing.assert_allclose(result.feature_bits.ravel(), bits[1:].detach().numpy(), rtol=1e-4,
                               atol=1e-6 * float(bits.max()))
    assert result.unlocated_bits == pytest.approx(float(bits[0]), rel=1e-4)
    assert result.total_bits == pytest.approx(float(bits.sum()), rel=1e-4)


class ResidualBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class ResidualCNN(nn.Module):
    """A stem and two residual blocks (skip paths around every block), average pooling, a linear head."""

    def __init__(self, c: int = 4, classes: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.block1, self.block2 = ResidualBlock(c), ResidualBlock(c)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.block1(torch.relu(self.stem(x)))))


def test_the_coiba_preset_by_hand_on_a_residual_cnn():
    """On a CNN the preset places its bottlenecks on the block outputs (no attention branch): one λ per location
    shared by both blocks, Z_l = λR_l + (1 − λ)(μ_l + σ_l·n), KL at the first, β·k 1, the last forward pass's map."""
    net = network_from_module(ResidualCNN().eval(), "residual-cnn")
    method = get_method("coiba", layers="block1:block2", steps=3, batch=3, precision="fp32")
    assert method.placement(net)[0] == "output"
    view, layers = method.resolve(net)
    assert layers == ["block1", "block2"]
    stats = layer_stats(view, layers)
    x, target, s = images(1), 1, method.coiba_settings()
    result = method.with_settings(stats=stats).run(net, x, target)

    model = net.model
    with torch.no_grad():
        r1 = model.block1(torch.relu(model.stem(x)))
    c, h, w = r1.shape[1:]
    mus = [stats[l].mean[None] for l in layers]
    sigmas = [stats[l].std.clamp_min(s.min_std)[None] for l in layers]
    alpha = torch.full((1, 1, h, w), s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=s.lr)
    g = torch.Generator().manual_seed(s.seed)

    def kl(lam):
        return kl_by_hand(lam, r1, mus[0], sigmas[0])

    k, ces = r1.numel(), []
    for _ in range(s.steps):
        adam.zero_grad()
        lam = torch.sigmoid(alpha)

        def noisy(out, i):  # the noise in the channels-last memory order the suffix runs in: (h, w, C)
            n = torch.randn(s.batch, h, w, c, generator=g).permute(0, 3, 1, 2)
            return lam * out + (1 - lam) * (mus[i] + sigmas[i] * n)

        z1 = noisy(r1.expand(s.batch, -1, -1, -1), 0)
        logits = model.head(noisy(model.block2(z1), 1))
        ce = nn.functional.cross_entropy(logits, torch.full((s.batch,), target))
        ces.append(float(ce.detach()))
        (ce + s.beta_k / k * kl(lam).sum()).backward()
        last = kl(lam.detach())
        adam.step()
    assert [step.ce for step in result.history] == pytest.approx(ces, rel=1e-4)
    bits = last[0].sum(dim=0) / math.log(2)
    np.testing.assert_allclose(result.feature_bits, bits.numpy(), rtol=1e-4, atol=1e-6 * float(bits.max()))
    assert result.total_bits == pytest.approx(float(bits.sum()), rel=1e-4)


def test_the_iba_preset_by_hand_on_a_residual_cnn():
    """The paper's Per-Sample Bottleneck (§3.2) at a residual block's output: one α per unit, λ = the authors' 5 × 5
    Gaussian (σ_s = 1, reflection padding) of sigmoid(α), Z = λR + (1 − λ)(μ + σ·n), loss = CE + β·ΣKL with β·k 10,
    the map read at the final λ (after the last update)."""
    net = network_from_module(ResidualCNN().eval(), "residual-cnn-iba")
    method = get_method("iba", layer="block1", steps=3, batch=3, precision="fp32")
    stats = layer_stats(net, ["block1"])
    x, target, s = images(1), 2, method.bottleneck_settings()
    assert (s.beta_k, s.sigma, s.read_point) == (10.0, 1.0, "final")
    result = method.with_settings(stats=stats["block1"]).run(net, x, target)

    model = net.model
    with torch.no_grad():
        r = model.block1(torch.relu(model.stem(x)))
    c, h, w = r.shape[1:]
    mu, sigma = stats["block1"].mean[None], stats["block1"].std.clamp_min(s.min_std)[None]
    offsets = torch.arange(-2, 3, dtype=torch.float64)
    kernel_1d = torch.exp(-0.5 * offsets**2)
    kernel = (kernel_1d[:, None] * kernel_1d[None, :]).float()
    kernel = (kernel / kernel.sum()).expand(c, 1, 5, 5)

    def smooth(t):
        return nn.functional.conv2d(nn.functional.pad(t, (2, 2, 2, 2), mode="reflect"), kernel, groups=c)

    alpha = torch.full_like(r, s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=s.lr)
    g = torch.Generator().manual_seed(s.seed)

    def kl(lam, one_minus):
        return -torch.log(one_minus) + (one_minus**2 - 1) / 2 + (lam * (r - mu) / sigma) ** 2 / 2

    k, ces = r.numel(), []
    for _ in range(s.steps):
        adam.zero_grad()
        lam, one_minus = smooth(torch.sigmoid(alpha)), smooth(torch.sigmoid(-alpha))
        n = torch.randn(s.batch, h, w, c, generator=g).permute(0, 3, 1, 2)
        logits = model.head(model.block2(lam * r + one_minus * (mu + sigma * n)))
        ce = nn.functional.cross_entropy(logits, torch.full((s.batch,), target))
        ces.append(float(ce.detach()))
        (ce + s.beta_k / k * kl(lam, one_minus).sum()).backward()
        adam.step()
    assert [step.ce for step in result.history] == pytest.approx(ces, rel=1e-4)
    with torch.no_grad():
        bits = kl(smooth(torch.sigmoid(alpha)), smooth(torch.sigmoid(-alpha)))[0].sum(dim=0) / math.log(2)
    np.testing.assert_allclose(result.feature_bits, bits.numpy(), rtol=1e-4, atol=1e-6 * float(bits.max()))
