"""The numerical claims of the method on tiny hand-built cases (paper §3.1–3.2, Appendix C)."""
import math

import numpy as np
import pytest
import torch
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
