"""The shared mathematics of the information bottleneck (paper §3.1–3.2).

Everything here is a pure function of tensors so that the Per-Sample and the Readout Bottleneck
use exactly the same λ, noise injection and information measure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .errors import UserError, check_range
from .precision import PRECISIONS

#: Paper §3.2 "Initialization": α = 5 gives λ ≈ 0.993, so the bottleneck starts (almost) transparent.
INIT_ALPHA = 5.0
#: Paper code: a floor on the estimated std keeps dead channels (std 0) from dividing by zero.
MIN_STD = 0.01
NATS_TO_BITS = 1.0 / math.log(2.0)
#: Paper §4.1: β = 10/k (k = h·w·c of the layer) unless said otherwise, for both bottlenecks.
DEFAULT_BETA_K = 10.0

#: β·k that makes sense (β = β·k / k). The paper's search space is 0.001…300 (Appendix, hyperparameters), and
#: β ≥ 1000/k already discards all information (§4.1). float32 breaks far beyond: on the tests' TinyNet
#: (k = 256), β·k ≥ 3e23 leaves λ at its initial value (Adam's squared gradient overflows to inf, so α never
#: moves) and β·k ≥ 1e38 makes the loss inf and λ NaN. The bounds keep well inside both.
BETA_K_RANGE = (1e-6, 1e6)
#: σ_s of the mask smoothing, in feature-map cells (paper: 1; searched 0.5…2); 0 is no smoothing. A blur wider
#: than the feature map is meaningless, so σ_s is also at most the map's longer side (`check_sigma`); the fixed
#: top keeps the kernel (radius round(2σ_s), `kernel_radius`) small before the map is known.
SIGMA_RANGE = (0.0, 100.0)


def check_beta_k(beta_k: object) -> float:
    """β·k as a float, or a UserError naming its range (`BETA_K_RANGE`)."""
    return check_range("β·k", beta_k, *BETA_K_RANGE)


def check_sigma(sigma: object, map_size: tuple[int, int] | None = None) -> float:
    """σ_s as a float, or a UserError naming its range: `SIGMA_RANGE`, and with the feature map's (h, w) at
    most its longer side."""
    sigma = check_range("σ_s (the mask smoothing)", sigma, *SIGMA_RANGE, unit="cells")
    if map_size is not None and sigma > max(map_size):
        h, w = map_size
        raise UserError(f"σ_s (the mask smoothing) must be at most {max(map_size)} cells here, the size of the "
                        f"layer's {h} × {w} feature map (you gave {sigma:g}).")
    return sigma


def kernel_radius(sigma: float) -> int:
    """Radius of the mask smoothing's kernel: round(2σ_s) cells, the authors' rule (IBA/pytorch.py,
    `kernel_size = int(round(2 * sigma)) * 2 + 1`, "cover 2.5 stds"): 5 × 5 at σ_s = 1. Python's round, as
    theirs, so σ_s = 1.25 gives radius 2, and σ_s ≤ 0.25 gives radius 0 (no smoothing)."""
    return int(round(2.0 * sigma))


def gaussian_kernel_1d(sigma: float, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Normalised 1-D Gaussian of radius `kernel_radius(σ)`; it sums to 1 so a constant mask stays constant.

    Its outer product with itself is the authors' normalised 2-D kernel exactly (a Gaussian is separable), so
    two 1-D passes give their 2-D convolution in 2·(2r+1) instead of (2r+1)² multiplications per cell.
    """
    radius = kernel_radius(sigma)
    x = torch.arange(-radius, radius + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    return (k / k.sum()).to(dtype=dtype, device=device)


def reflect_indices(n: int, radius: int, device=None) -> torch.Tensor:
    """Indices 0…n-1 of the cells −radius … n-1+radius under reflection about the edge cells (torch's
    ReflectionPad2d: …, 2, 1, | 0, 1, 2, …), repeated as often as needed, so a pad wider than the map (which
    ReflectionPad2d refuses) still works; a map of one cell reflects onto itself."""
    i = torch.arange(-radius, n + radius, device=device)
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = i.remainder(period)
    return torch.where(i >= n, period - i, i)


def blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur over the spatial axes of an (N, C, H, W) tensor (paper §3.2, σ_s), as the authors' code
    does it: kernel radius round(2σ_s) (5 × 5 at σ_s = 1) and reflection padding (`SpatialGaussianKernel`),
    computed as two 1-D passes (the same numbers up to rounding).

    Reflection (like any padding that copies cells, unlike zeros) keeps blur(1 - s) == 1 - blur(s), so 1-λ can
    be blurred directly, which is what makes log(1-λ) stable when λ is close to 1.
    """
    if sigma <= 0:
        return x
    k = gaussian_kernel_1d(sigma, x.dtype, x.device)
    r = k.numel() // 2
    if r == 0:
        return x
    c = x.shape[1]
    kh = k.view(1, 1, -1, 1).expand(c, 1, -1, 1)
    kw = k.view(1, 1, 1, -1).expand(c, 1, 1, -1)
    y = F.conv2d(x.index_select(2, reflect_indices(x.shape[2], r, x.device)), kh, groups=c)
    return F.conv2d(y.index_select(3, reflect_indices(x.shape[3], r, x.device)), kw, groups=c)


def lambda_from_alpha(alpha: torch.Tensor, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """λ = blur(σ_s, sigmoid(α)) and 1-λ = blur(σ_s, sigmoid(-α)).

    1-λ is computed on its own rather than as 1 - λ: for α ≫ 0 the subtraction would round to 0
    and log(1-λ) would be -inf.
    """
    return blur(torch.sigmoid(alpha), sigma), blur(torch.sigmoid(-alpha), sigma)


def inject_noise(
    r: torch.Tensor,
    lam: torch.Tensor,
    one_minus_lam: torch.Tensor,
    mean: torch.Tensor,
    std: torch.Tensor,
    batch: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Z = λR + (1-λ)ε with ε ~ N(μ_R, σ_R²), drawn independently for each of `batch` copies (eq. 2).

    Computed as Z = [λR + (1-λ)μ] + [(1-λ)σ]·n with n ~ N(0, 1), on (copies, elements) views in R's memory
    order. Why: the backward pass then sums the copies' gradients over a 2-D view, which is ~30× faster on
    CPU than summing a 4-D (channels-last or not) tensor over its batch axis, and a channels-last R gets
    channels-last noise and Z, so the suffix needs no layout copy.
    """
    channels_last = is_channels_last(r)
    shape = tuple(r.shape[1:])

    def rows(t: torch.Tensor) -> torch.Tensor:
        t = t.expand(t.shape[0] if t.dim() == r.dim() else 1, *shape)
        if channels_last:
            t = t.permute(0, 2, 3, 1)
        return t.reshape(t.shape[0], -1)

    if channels_last:
        noise = torch.randn((batch,) + shape[1:] + shape[:1], generator=generator, device=r.device, dtype=r.dtype)
    else:
        noise = torch.randn((batch,) + shape, generator=generator, device=r.device, dtype=r.dtype)
    signal = rows(lam) * rows(r) + rows(one_minus_lam) * rows(mean)
    z = torch.addcmul(signal, rows(one_minus_lam) * rows(std), noise.reshape(batch, -1))
    if channels_last:
        return z.view(z.shape[0], *shape[1:], shape[0]).permute(0, 3, 1, 2)
    return z.view(z.shape[0], *shape)


def is_channels_last(t: torch.Tensor) -> bool:
    """True for a 4-D tensor stored channels-last (and not also plainly contiguous, e.g. with C = 1)."""
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def standardise(r: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(R - μ_R) / σ_R, the only way R enters the information loss."""
    return (r - mean) / std


def kl_per_element(r_std: torch.Tensor, lam: torch.Tensor, one_minus_lam: torch.Tensor) -> torch.Tensor:
    """KL(P(Z|R) ‖ N(μ_R, σ_R²)) in nats for each element, in closed form (eq. 5, Appendix C).

    P(Z|R) = N(λR + (1-λ)μ, (1-λ)²σ²), so with r = (R-μ)/σ:
        KL = -log(1-λ) + ((1-λ)² - 1)/2 + λ² r² / 2.
    λ = 0 gives exactly 0; λ → 1 grows like -log(1-λ) without overflowing.
    """
    tiny = torch.finfo(one_minus_lam.dtype).tiny
    log_one_minus = torch.log(one_minus_lam.clamp_min(tiny))
    return -log_one_minus + 0.5 * (one_minus_lam**2 - 1.0) + 0.5 * (lam * r_std) ** 2


def nats_to_bits(x: torch.Tensor) -> torch.Tensor:
    """Convert an information quantity from nats to bits."""
    return x * NATS_TO_BITS


def information_map_bits(kl: torch.Tensor) -> torch.Tensor:
    """Heatmap m[h, w] = Σ_c KL[c, h, w] in bits (paper §3.2 "Measure of information").

    Accepts (1, C, h, w) or (C, h, w) and returns (h, w).
    """
    if kl.dim() == 4:
        kl = kl[0]
    return nats_to_bits(kl.sum(dim=0))


def resize_preserving_total(m: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinearly resize an (h, w) map of bits — or a stack (n, h, w) of them — to `size` so that each
    map's sum is unchanged.

    After resizing, each value is bits per pixel of the new grid. Bilinear interpolation alone does
    not preserve the sum exactly (edge pixels), so we rescale by the exact ratio.
    """
    stacked = m.dim() == 3
    maps = m if stacked else m[None]
    total = maps.sum(dim=(1, 2))
    out = F.interpolate(maps[:, None].to(torch.float32), size=size, mode="bilinear", align_corners=False)[:, 0]
    out_total = out.sum(dim=(1, 2))
    # torch.where, not `if`: no GPU→CPU synchronisation per map (maps are made every step)
    ratio = torch.where(out_total.abs() > 0, total.to(out.dtype) / out_total, torch.ones_like(out_total))
    out = out * ratio[:, None, None]
    return out if stacked else out[0]


# ---- the Per-Sample Bottleneck's settings (here, low, so results and reports can name them) ----------------

#: Ranges of the settings besides β·k and σ_s (bottleneck.BETA_K_RANGE, SIGMA_RANGE). The paper's search spaces
#: (Appendix, Per-Sample Bottleneck table) are T 1…100, B 1…30, η 0.03…10; the ranges are wider, up to where a
#: run stops making sense or fitting in memory.
STEPS_RANGE = (0, 10_000)  # 0: λ stays at its initial value (the readout explains with steps=0)
BATCH_RANGE = (1, 1024)  # noisy copies per image and step: each one is a pass through the suffix
LR_RANGE = (1e-6, 100.0)  # Adam moves α by about η per step; one step of 100 throws α far past where λ saturates
#: α = ±10 gives λ = sigmoid(α) within 4.5e-5 of 0 or 1 (the readout's ALPHA_MAX); float32's sigmoid is 1 from
#: α ≈ 17, where α would start on a flat plateau.
INIT_ALPHA_RANGE = (-10.0, 10.0)
MIN_STD_RANGE = (1e-6, 1.0)  # the floor on σ_R (paper code: 0.01); features are divided by it
SEED_RANGE = (0, 2**63 - 1)  # what torch.Generator.manual_seed takes
INACTIVE_THRESHOLD_RANGE = (0.0, 0.999)  # a fraction of the statistics samples (authors: 0.01)


@dataclass
class BottleneckSettings:
    """Hyperparameters; defaults are the paper's (Appendix, Per-Sample Bottleneck table)."""

    beta_k: float = DEFAULT_BETA_K  # β·k with k = h·w·c; paper β = 10/k
    steps: int = 10  # T = 10 Adam iterations
    batch: int = 10  # B = 10 noisy copies of the sample
    lr: float = 1.0  # η = 1
    sigma: float = 1.0  # σ_s = 1, Gaussian smoothing of the mask
    init_alpha: float = INIT_ALPHA  # α = 5 → λ ≈ 0.993
    min_std: float = MIN_STD
    seed: int | None = 0
    #: Which λ the heatmap reads: "final" (after the last Adam update; this project's default) or
    #: "last_step" (the KL of the last step's forward pass, before that update: the authors' code).
    read_point: str = "final"
    #: Mask units that were non-zero in at most this fraction of the statistics samples (in Z and in
    #: the KL), as the authors' code does with 0.01; None (default): no masking. Needs statistics that
    #: record activity (FeatureStats.active).
    inactive_threshold: float | None = None
    #: Precision of the network passes: "auto" (measured once per network, layer and machine: a lower
    #: precision only where the hardware has it and it is faster), "fp32", "bf16" or "fp16"; see
    #: iba_core.precision. λ, the KL, Adam and the heatmap are always fp32.
    precision: str = "auto"
    #: The noise and the KL's reference: "estimated" (ε ~ N(μ_R, σ_R²) from the layer's feature statistics, the
    #: paper's §3.1) or "standard_normal" (ε ~ N(0, 1) on the raw features, KL against N(0, 1): M2IB's,
    #: `feature_stats.standard_normal_stats`; no statistics are estimated).
    prior: str = "estimated"

    READ_POINTS = ("final", "last_step")
    PRIORS = ("estimated", "standard_normal")

    def __post_init__(self) -> None:
        self.validate()  # at construction: every front end hears about a bad value before any computation

    def validate(self) -> "BottleneckSettings":
        """Raise a UserError naming the range for a setting that cannot work (also after a field was changed)."""
        check_beta_k(self.beta_k)
        check_range("The number of steps", self.steps, *STEPS_RANGE, integer=True)
        check_range("The batch of noisy copies", self.batch, *BATCH_RANGE, integer=True)
        check_range("The learning rate", self.lr, *LR_RANGE)
        check_sigma(self.sigma)
        check_range("The initial α", self.init_alpha, *INIT_ALPHA_RANGE)
        check_range("The floor on σ_R", self.min_std, *MIN_STD_RANGE)
        if self.seed is not None:
            check_range("The seed", self.seed, *SEED_RANGE, integer=True)
        if self.read_point not in self.READ_POINTS:
            raise UserError(f"Unknown read point {str(self.read_point)[:40]!r}; choose one of: "
                            f"{', '.join(self.READ_POINTS)}.")
        if self.prior not in self.PRIORS:
            raise UserError(f"Unknown prior {str(self.prior)[:40]!r}; choose one of: {', '.join(self.PRIORS)}.")
        if self.precision not in PRECISIONS:
            raise UserError(f"Unknown precision {str(self.precision)[:40]!r}; choose one of: {', '.join(PRECISIONS)}.")
        if self.inactive_threshold is not None:
            check_range("The inactive-unit threshold", self.inactive_threshold, *INACTIVE_THRESHOLD_RANGE)
            if self.prior == "standard_normal":
                raise UserError("Inactive units are found in estimated feature statistics; the standard-normal "
                                "prior (M2IB's) estimates none, so leave out the inactive-unit threshold.")
        return self
