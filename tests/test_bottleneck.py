"""The numerical claims of the method on tiny hand-built cases (paper §3.1–3.2, Appendix C)."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

from iba_core.bottleneck import (
    blur,
    information_map_bits,
    inject_noise,
    kl_per_element,
    lambda_from_alpha,
    nats_to_bits,
    resize_preserving_total,
    standardise,
)


@pytest.mark.parametrize("lam, r, mu, sigma", [(0.3, 1.5, 0.2, 0.7), (0.9, -2.0, 1.0, 2.0), (0.05, 0.0, 0.0, 1.0)])
def test_kl_closed_form_matches_monte_carlo(lam, r, mu, sigma):
    """KL(P(Z|R) ‖ N(μ, σ²)) in closed form equals E_z[log p(z|r) − log q(z)] estimated by sampling."""
    g = torch.Generator().manual_seed(0)
    p = Normal(lam * r + (1 - lam) * mu, (1 - lam) * sigma)
    q = Normal(mu, sigma)
    z = p.mean + p.stddev * torch.randn(400_000, generator=g, dtype=torch.float64)
    log_ratio = p.log_prob(z) - q.log_prob(z)
    mc, se = log_ratio.mean().item(), log_ratio.std().item() / math.sqrt(z.numel())
    closed = kl_per_element(
        standardise(torch.tensor(r, dtype=torch.float64), mu, sigma),
        torch.tensor(lam, dtype=torch.float64),
        torch.tensor(1 - lam, dtype=torch.float64),
    ).item()
    assert abs(closed - mc) < 4 * se + 1e-4
    assert closed == pytest.approx(kl_divergence(p, q).item(), rel=1e-6)  # torch.distributions works in float32 here


def test_lambda_one_transmits_r_unchanged():
    r = torch.randn(1, 3, 5, 5)
    ones = torch.ones_like(r)
    z = inject_noise(r, ones, torch.zeros_like(r), torch.zeros_like(r), ones, batch=4)
    assert torch.equal(z, r.expand(4, -1, -1, -1))


def test_lambda_zero_makes_z_independent_of_r_with_zero_information():
    mean, std = torch.full((1, 3, 5, 5), 0.5), torch.full((1, 3, 5, 5), 2.0)
    zeros, ones = torch.zeros_like(mean), torch.ones_like(mean)
    r1, r2 = torch.randn(1, 3, 5, 5), 100 * torch.randn(1, 3, 5, 5)
    z1 = inject_noise(r1, zeros, ones, mean, std, 8, torch.Generator().manual_seed(3))
    z2 = inject_noise(r2, zeros, ones, mean, std, 8, torch.Generator().manual_seed(3))
    assert torch.equal(z1, z2)  # same noise, different R: nothing of R reaches Z
    assert torch.all(kl_per_element(standardise(r2, mean, std), zeros, ones) == 0)


def test_noise_has_the_prior_mean_and_std():
    mean, std = torch.full((1, 1, 1, 1), 3.0), torch.full((1, 1, 1, 1), 0.5)
    z = inject_noise(torch.zeros(1, 1, 1, 1), torch.zeros_like(mean), torch.ones_like(mean), mean, std, 200_000,
                     torch.Generator().manual_seed(0))
    assert z.mean().item() == pytest.approx(3.0, abs=0.01)
    assert z.std().item() == pytest.approx(0.5, abs=0.01)


@pytest.mark.parametrize("channels_last", [False, True])
def test_noise_injection_is_equation_2_in_either_memory_layout(channels_last):
    # Z = λR + (1-λ)(μ + σn) exactly, and gradients reach λ and 1-λ as that formula says; the layout of R
    # decides the layout of Z (channels-last R → channels-last Z, so the suffix needs no copy).
    g = torch.Generator().manual_seed(1)
    shape = (1, 3, 4, 5)
    r, mean = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    std = torch.rand(shape, generator=g) + 0.5
    lam0 = torch.rand(shape, generator=g)
    if channels_last:
        r, mean, std = (t.contiguous(memory_format=torch.channels_last) for t in (r, mean, std))
    lam = lam0.clone().requires_grad_(True)
    one_minus = (1 - lam0).clone().requires_grad_(True)
    z = inject_noise(r, lam, one_minus, mean, std, 6, torch.Generator().manual_seed(7))
    assert z.shape == (6, 3, 4, 5)
    assert z.is_contiguous(memory_format=torch.channels_last) == channels_last
    noise = ((z - lam0 * r - (1 - lam0) * mean) / ((1 - lam0) * std)).detach()  # the n that was drawn
    assert noise.std().item() == pytest.approx(1.0, abs=0.35)
    weights = torch.randn(z.shape, generator=g)
    (z * weights).sum().backward()
    assert torch.allclose(lam.grad, (weights * r).sum(0, keepdim=True), atol=1e-5)
    assert torch.allclose(one_minus.grad, (weights * (mean + std * noise)).sum(0, keepdim=True), atol=1e-4)


def test_noise_injection_accepts_one_mask_per_sample():
    # The Readout Bottleneck passes a batch of R and one λ per sample: copies = samples.
    r = torch.randn(4, 2, 3, 3)
    lam = torch.rand(4, 2, 3, 3)
    z = inject_noise(r, lam, 1 - lam, torch.zeros(1, 2, 3, 3), torch.ones(1, 2, 3, 3), 4,
                     torch.Generator().manual_seed(0))
    assert z.shape == r.shape
    ones = torch.ones_like(r)
    assert torch.equal(inject_noise(r, ones, torch.zeros_like(r), torch.zeros_like(r), ones, 4), r)


def test_nats_to_bits():
    assert nats_to_bits(torch.tensor(math.log(2.0))).item() == pytest.approx(1.0)
    assert nats_to_bits(torch.tensor(math.log(8.0))).item() == pytest.approx(3.0)


def test_information_map_sums_channels_in_bits():
    kl = torch.zeros(1, 2, 3, 3)
    kl[0, 0, 1, 1], kl[0, 1, 1, 1] = math.log(2.0), math.log(2.0)
    m = information_map_bits(kl)
    assert m.shape == (3, 3)
    assert m[1, 1].item() == pytest.approx(2.0) and m.sum().item() == pytest.approx(2.0)


@pytest.mark.parametrize("size", [(224, 224), (60, 90), (7, 7)])
def test_resize_preserves_total_bits(size):
    m = torch.rand(7, 7, generator=torch.Generator().manual_seed(0)) * 5
    out = resize_preserving_total(m, size)
    assert out.shape == size
    assert out.sum().item() == pytest.approx(m.sum().item(), rel=1e-5)
    assert (out >= 0).all()


def test_resize_of_constant_map_is_constant_bits_per_pixel():
    out = resize_preserving_total(torch.full((4, 4), 3.0), (16, 16))
    assert torch.allclose(out, torch.full((16, 16), 3.0 * 16 / 256))


def test_blur_keeps_constants_and_complements():
    s = torch.rand(1, 3, 9, 9, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(blur(torch.full((1, 2, 6, 6), 0.7), 1.0), torch.full((1, 2, 6, 6), 0.7))
    assert torch.allclose(blur(1 - s, 1.0), 1 - blur(s, 1.0), atol=1e-6)
    assert blur(s, 1.0).std() < s.std()  # it smooths
    assert torch.equal(blur(s, 0.0), s)


def test_blur_works_on_tiny_maps():
    assert blur(torch.rand(1, 2, 1, 1), 2.0).shape == (1, 2, 1, 1)


def test_lambda_at_a_border_cell_computed_by_hand():
    """σ_s = 1: the 1-D weights are e^(−x²/2)/Z for x = −2 … 2 (the authors' 5 × 5 kernel,
    Z = 1 + 2e^−½ + 2e^−2).
    sigmoid(α) = 1 at cell (1, 1) and 0 elsewhere: reflection about the edge puts row 1 at offsets −1 and +1 of
    row 0 (…, 2, 1, | 0, 1, 2), and the same for column 1, so λ at the corner (0, 0) is (2e^−½/Z)² = 4e^−1/Z².
    (Replicate padding would count cell (1, 1) once: e^−1/Z².)"""
    alpha = torch.full((1, 1, 5, 5), -100.0)
    alpha[0, 0, 1, 1] = 100.0
    lam, one_minus = lambda_from_alpha(alpha, 1.0)
    z = 1 + 2 * math.exp(-0.5) + 2 * math.exp(-2)
    assert lam[0, 0, 0, 0].item() == pytest.approx(4 * math.exp(-1) / z**2, rel=1e-5)  # 0.23854
    assert one_minus[0, 0, 0, 0].item() == pytest.approx(1 - 4 * math.exp(-1) / z**2, rel=1e-5)
    # the edge cell (0, 1): rows as above (2e^−½/Z); column 1 at offset 0 (1/Z) and, reflected, at −2 (e^−2/Z)
    assert lam[0, 0, 0, 1].item() == pytest.approx(2 * math.exp(-0.5) * (1 + math.exp(-2)) / z**2, rel=1e-5)
    # three cells away from (1, 1), outside the 5 × 5 kernel: nothing arrives
    assert lam[0, 0, 4, 4].item() < 1e-30


def _authors_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """The authors' smoothing re-derived from its description (IBA/pytorch.py, SpatialGaussianKernel): a 2-D
    Gaussian of size 2·round(2σ)+1, normalised to sum 1, after reflection padding."""
    size = int(round(2 * sigma)) * 2 + 1
    g = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    k2 = torch.exp(-(g[:, None] ** 2 + g[None, :] ** 2) / (2 * sigma**2))
    k2 = (k2 / k2.sum()).to(x.dtype)
    c, r = x.shape[1], size // 2
    return F.conv2d(F.pad(x, (r, r, r, r), mode="reflect"), k2.expand(c, 1, size, size), groups=c)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.25, 2.0])
def test_blur_equals_the_authors_2d_kernel_with_reflection(sigma):
    """Two 1-D passes give the authors' 2-D convolution (a Gaussian kernel is separable), same padding."""
    x = torch.rand(2, 3, 9, 11, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(blur(x, sigma), _authors_blur(x, sigma), atol=1e-6)


def test_blur_reflects_again_when_the_kernel_is_wider_than_the_map():
    """A pad wider than the map (σ_s = 2: radius 4 on 3 cells) reflects back and forth, as numpy's 'reflect'."""
    x = torch.rand(1, 1, 3, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    k = np.exp(-0.5 * (np.arange(-4, 5) / 2.0) ** 2)
    k /= k.sum()
    padded = np.pad(x[0, 0].numpy(), 4, mode="reflect")
    rows = np.stack([np.convolve(padded[:, j], k, mode="valid") for j in range(padded.shape[1])], axis=1)
    expected = np.stack([np.convolve(rows[i], k, mode="valid") for i in range(rows.shape[0])])
    assert np.allclose(blur(x, 2.0)[0, 0].numpy(), expected, atol=1e-12)


def test_lambda_and_complement_sum_to_one():
    alpha = torch.linspace(-20, 20, 50).view(1, 1, 5, 10)
    lam, one_minus = lambda_from_alpha(alpha, 1.0)
    assert torch.allclose(lam + one_minus, torch.ones_like(lam), atol=1e-6)
    lam0, _ = lambda_from_alpha(torch.full((1, 1, 3, 3), 5.0), 1.0)
    assert torch.allclose(lam0, torch.full_like(lam0, 0.99331), atol=1e-5)  # paper: α = 5 → λ ≈ 0.993


@pytest.mark.parametrize("a", [-1e4, -50.0, 0.0, 50.0, 200.0, 1e4])
def test_kl_is_finite_with_finite_gradients_for_extreme_alpha(a):
    alpha = torch.full((1, 2, 4, 4), a, requires_grad=True)
    lam, one_minus = lambda_from_alpha(alpha, 1.0)
    kl = kl_per_element(torch.randn(1, 2, 4, 4) * 10, lam, one_minus)
    kl.sum().backward()
    assert torch.isfinite(kl).all() and (kl >= -1e-6).all()
    assert torch.isfinite(alpha.grad).all()


def test_kl_is_nonnegative_and_grows_with_lambda():
    r = torch.tensor(1.3)
    values = [kl_per_element(r, torch.tensor(l), torch.tensor(1 - l)).item() for l in np.linspace(0, 0.999, 20)]
    assert all(v >= 0 for v in values)
    assert all(b > a for a, b in zip(values, values[1:]))
