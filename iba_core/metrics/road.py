"""ROAD, Remove And Debias (Rong et al., ICML 2022): pixels removed by noisy linear imputation.

Pixels are ranked by the attribution map (ties in a seeded random order). For each percentage P of
pixels removed — the paper's "percentage of pixels removed" (its code's `th_p`) — MoRF removes the P %
most relevant pixels, LeRF the P % least relevant, and p(target) is measured on the imputed image.
A removed pixel is not set to a constant (which leaks the mask's shape to the network, the "class
information leakage" the paper measures) but imputed: each removed pixel is the weighted mean of its
8 neighbours (1/6 direct, 1/12 diagonal), all removed pixels at once as one sparse linear system per
channel, then Gaussian noise of σ = 0.01 is added to the imputed pixels.

Conventions, checked against pytorch-grad-cam 1.5.7 (`pytorch_grad_cam/metrics/road.py`, itself taken
from the authors' code) and the authors' `road_evaluation`:

- Percent removed, for both orders. pytorch-grad-cam's `percentile` is the share *kept*:
  `ROADMostRelevantFirst(percentile=80)` removes the top 20 %, `ROADLeastRelevantFirst(percentile=20)`
  the least relevant 80 %. Over the default 10 … 90 both average over the same removed shares.
- At the border the neighbours outside the image are left out and the remaining weights renormalised
  (as both references do).
- The imputation runs on the network's normalised input and the noise is in its units, as in
  pytorch-grad-cam (it imputes the tensor the model receives). The authors imputed [0, 1] pixels and
  normalised afterwards; the imputation itself is the same either way (it is linear and the
  normalisation is a per-channel affine map), only the noise differs: their σ = 0.01 in pixel units is
  σ = 0.01 / std_c here (≈ 0.044 for ImageNet's std).
- Scores: MoRF and LeRF are the mean p(target) over the percentages (MoRF lower is better, LeRF higher);
  the combined score is pytorch-grad-cam's `ROADCombined`, (LeRF − MoRF) / 2 (higher is better;
  pytorch-grad-cam subtracts p(target) of the original image from both, which cancels in it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from ..heads import probabilities
from ..progress import ProgressFn
from .common import batched_logits, group_records, method_label, pixel_order, resolve_map

ROAD = "road"
METRIC = ROAD
#: Percentage of pixels removed at each point (Rong et al. 2022 evaluate 10 … 90 %; pytorch-grad-cam's default).
ROAD_REMOVED = (10, 20, 30, 40, 50, 60, 70, 80, 90)
#: σ of the Gaussian noise added to the imputed pixels (Rong et al. 2022, §4: "noisy linear imputation").
ROAD_NOISE = 0.01

# (row offset, column offset, weight) of the 8 neighbours (Rong et al. 2022, §4: 1/6 direct, 1/12 diagonal).
_NEIGHBOURS = (
    (-1, 0, 1 / 6), (1, 0, 1 / 6), (0, -1, 1 / 6), (0, 1, 1 / 6),
    (-1, -1, 1 / 12), (-1, 1, 1 / 12), (1, -1, 1 / 12), (1, 1, 1 / 12),
)


def check_removed(removed: Sequence[float]) -> tuple[float, ...]:
    """The percentages as floats, or a UserError: each must lie strictly between 0 and 100."""
    values = tuple(float(p) for p in removed)
    if not values:
        raise UserError("ROAD needs at least one percentage of pixels to remove (between 0 and 100).")
    bad = [p for p in values if not 0 < p < 100]
    if bad:
        raise UserError(f"ROAD removes a percentage of pixels strictly between 0 and 100, not {bad[0]:g}.")
    return values


#: The largest noise σ, in the units of the network's normalised input (an image spans about ±3 there): beyond it
#: the imputed pixels are noise alone, and at σ ≈ 1e308 they overflowed and every score came out empty.
MAX_NOISE = 100.0


def check_noise(noise: float) -> float:
    """The noise σ as a float, or a UserError when it is negative, not finite or above MAX_NOISE."""
    noise = float(noise)
    if not np.isfinite(noise) or noise < 0 or noise > MAX_NOISE:
        raise UserError(f"ROAD's noise σ must be a number from 0 to {MAX_NOISE:g} (in the units of the network's "
                        f"normalised input), not {noise:g}.")
    return noise


def noisy_linear_impute(
    x: torch.Tensor, removed, *, noise: float = ROAD_NOISE, generator: torch.Generator | None = None
) -> torch.Tensor:
    """`x` with its `removed` pixels imputed from their neighbours, plus Gaussian noise on those pixels.

    x: one image, (C, H, W) or (1, C, H, W), on any device; the result has its shape, dtype and device.
    removed: (H, W) booleans (array or tensor), True where a pixel is removed.
    noise: σ of the noise, in the units of `x` (the network's normalised input in the metric).
    generator: a CPU torch.Generator for the noise (reproducible runs); None: torch's global one.
    Every removed pixel equals the weighted mean of its neighbours inside the image (1/6 direct,
    1/12 diagonal, renormalised at the border), known neighbours as they are, removed ones as
    unknowns: one sparse system for all removed pixels, factorised once and solved for every channel
    (on the CPU, in float64).
    """
    batched = x.dim() == 4
    if batched and x.shape[0] != 1:
        raise ValueError(f"noisy_linear_impute takes one image, not a batch of {x.shape[0]}.")
    image = (x[0] if batched else x).detach().to("cpu", torch.float64)
    channels, height, width = image.shape
    flat_mask = _removed_mask(removed, (height, width)).ravel()
    unknown = np.flatnonzero(flat_mask)
    if unknown.size == 0:
        return x.clone()
    if unknown.size == flat_mask.size:
        raise UserError("ROAD cannot impute an image with every pixel removed: keep at least one.")
    matrix, rhs = _imputation_system(image.reshape(channels, -1).numpy(), flat_mask, unknown, height, width)
    filled = torch.from_numpy(_solve_symmetric(matrix, rhs).T.copy())
    if noise > 0:
        filled = filled + noise * torch.randn(filled.shape, generator=generator, dtype=torch.float64)
    out = image.reshape(channels, -1).clone()
    out[:, torch.from_numpy(unknown)] = filled
    out = out.reshape(channels, height, width).to(dtype=x.dtype, device=x.device)
    return out[None] if batched else out


def _removed_mask(removed, shape: tuple[int, int]) -> np.ndarray:
    """`removed` (array or tensor) as (H, W) booleans, checked against the image's `shape`."""
    mask = removed.detach().cpu().numpy() if isinstance(removed, torch.Tensor) else np.asarray(removed)
    mask = mask.astype(bool)
    if mask.shape != shape:
        raise ValueError(f"The removed-pixel mask is shaped {mask.shape}, the image {shape}.")
    return mask


def _imputation_system(pixels: np.ndarray, flat_mask: np.ndarray, unknown: np.ndarray, height: int, width: int):
    """The sparse system (n × n matrix, (n, C) right-hand side) whose solution gives each removed pixel the
    weighted mean of its neighbours (`noisy_linear_impute`); `pixels` is the image as (C, H·W)."""
    from scipy.sparse import coo_matrix

    n, channels = unknown.size, pixels.shape[0]
    variable = np.full(flat_mask.size, -1, dtype=np.int64)  # pixel index → unknown's index
    variable[unknown] = np.arange(n)
    rows, cols = unknown // width, unknown % width
    equation = np.arange(n)
    diagonal = np.zeros(n)  # the sum of the weights of the neighbours inside the image
    rhs = np.zeros((n, channels))  # the weighted known neighbours
    off_rows, off_cols, off_vals = [], [], []
    for dr, dc, weight in _NEIGHBOURS:
        r, c = rows + dr, cols + dc
        inside = (r >= 0) & (r < height) & (c >= 0) & (c < width)
        neighbour = r[inside] * width + c[inside]
        eq = equation[inside]
        diagonal[eq] += weight
        is_unknown = flat_mask[neighbour]
        off_rows.append(eq[is_unknown])
        off_cols.append(variable[neighbour[is_unknown]])
        off_vals.append(np.full(int(is_unknown.sum()), -weight))
        # each equation meets one neighbour per offset, so these indices are unique within the loop step
        rhs[eq[~is_unknown]] += weight * pixels[:, neighbour[~is_unknown]].T
    matrix = coo_matrix(
        (np.concatenate([diagonal, *off_vals]),
         (np.concatenate([equation, *off_rows]), np.concatenate([equation, *off_cols]))),
        shape=(n, n),
    ).tocsc()
    return matrix, rhs


def _solve_symmetric(matrix, rhs: np.ndarray) -> np.ndarray:
    """The imputation system solved for every channel at once (one factorisation), as (n, C)."""
    from scipy.sparse.linalg import splu

    # Each connected group of removed pixels touches a known one (else every pixel would be removed),
    # so the matrix is irreducibly diagonally dominant and the system has one solution.
    # The matrix is symmetric (each neighbour pair shares its weight): an ordering of A + Aᵀ with
    # symmetric pivoting measured 25–35 % faster than the default COLAMD on 224 × 224 maps.
    lu = splu(matrix, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
    return lu.solve(rhs)


def removed_count(percent: float, pixels: int) -> int:
    """How many of `pixels` P % removes: rounded half up, at least one pixel kept."""
    return int(min(np.floor(percent / 100 * pixels + 0.5), pixels - 1))


def check_on_crop(removed: Sequence[float], height: int, width: int) -> None:
    """Refuse a percentage that removes no pixel of a `height` × `width` crop (its MoRF and LeRF points would be the
    image itself, whatever the map), naming it, before any image."""
    pixels = int(height) * int(width)
    for percent in removed:
        if removed_count(float(percent), pixels) < 1:
            least = 50 / pixels  # rounded half up: P / 100 · pixels ≥ ½; said to 3 digits, rounded up
            digits = 2 - int(np.floor(np.log10(least)))
            least = f"{np.ceil(least * 10**digits) / 10**digits:g}"
            raise UserError(f"ROAD's {float(percent):g} % of the network's {height} × {width} crop removes no pixel at "
                            f"all: each percentage must be at least {least} %.",
                            cli_hint=f"Give --removed percentages of {least} or more.",
                            app_hint=f"Choose percentages of {least} % or more.")


@dataclass
class RoadCurves:
    """ROAD's MoRF and LeRF curves of one image for one attribution map."""

    removed: np.ndarray  # percentage of pixels removed at each point
    morf: np.ndarray  # p(target), the most relevant pixels removed first
    lerf: np.ndarray  # p(target), the least relevant pixels removed first
    target: int
    p_original: float = float("nan")  # p(target) on the image itself
    noise: float = ROAD_NOISE

    @property
    def morf_score(self) -> float:
        """Mean p(target) over the MoRF points (lower is better)."""
        return float(np.mean(self.morf))

    @property
    def lerf_score(self) -> float:
        """Mean p(target) over the LeRF points (higher is better)."""
        return float(np.mean(self.lerf))

    @property
    def combined(self) -> float:
        """(LeRF − MoRF) / 2, pytorch-grad-cam's ROADCombined (higher is better)."""
        return (self.lerf_score - self.morf_score) / 2

    def to_record(self) -> dict:
        return {
            "removed": [float(p) for p in self.removed],
            "morf": np.round(self.morf, 7).tolist(),
            "lerf": np.round(self.lerf, 7).tolist(),
            "target": int(self.target),
            "p_original": float(self.p_original),
            "noise": float(self.noise),
            "morf_score": self.morf_score,
            "lerf_score": self.lerf_score,
            "combined": self.combined,
        }

    @classmethod
    def from_record(cls, r: dict) -> "RoadCurves":
        return cls(
            removed=np.asarray(r["removed"], dtype=np.float64),
            morf=np.asarray(r["morf"], dtype=np.float64),
            lerf=np.asarray(r["lerf"], dtype=np.float64),
            target=int(r["target"]),
            p_original=float(r.get("p_original", float("nan"))),
            noise=float(r.get("noise", ROAD_NOISE)),
        )


def road_curves(
    model: nn.Module,
    x: torch.Tensor,
    attribution,
    target: int,
    removed: Sequence[float] = ROAD_REMOVED,
    *,
    head: str = "softmax",
    noise: float = ROAD_NOISE,
    batch_size: int = 64,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> RoadCurves:
    """ROAD's MoRF and LeRF curves of one image.

    model: maps (B, C, H, W) to logits. x: one preprocessed image (1, C, H, W), on the model's device.
    attribution: an (H, W) map, or a function (x, target) → map.
    removed: percentages of pixels removed (0 < P < 100; pytorch-grad-cam's percentile is 100 − P).
    noise: σ of the imputation noise, in the units of x (the network's normalised input).
    seed: the order of equal attributions and the imputation noise.
    progress: called after each imputed image with (done, total, label).
    The imputed images are sent through `model` in batches of `batch_size` (the same numbers for any
    batch size: the noise is drawn image by image in a fixed order).
    """
    if x.dim() == 3:
        x = x[None]
    percents = check_removed(removed)
    noise = check_noise(noise)
    values = resolve_map(attribution, x, target)
    order = pixel_order(values, seed)
    height, width = values.shape
    pixels = order.size
    jobs = []
    for name, most_relevant_first in (("MoRF", True), ("LeRF", False)):
        for p in percents:
            k = removed_count(p, pixels)
            jobs.append((f"{name} {p:g} % removed", order[:k] if most_relevant_first else order[pixels - k:]))
    generator = torch.Generator().manual_seed(int(seed) % (2**63))
    image = x.detach()

    def images() -> Iterator[torch.Tensor]:
        yield image
        for done, (label, indices) in enumerate(jobs, start=1):
            mask = np.zeros(pixels, dtype=bool)
            mask[indices] = True
            yield noisy_linear_impute(image, mask.reshape(height, width), noise=noise, generator=generator)
            if progress is not None:
                progress(done, len(jobs), label)

    logits = batched_logits(model, images(), batch_size)
    p = probabilities(logits.double(), head)[:, target].numpy()
    m = len(percents)
    return RoadCurves(
        removed=np.asarray(percents), morf=p[1:1 + m], lerf=p[1 + m:1 + 2 * m], target=int(target),
        p_original=float(p[0]), noise=noise,
    )


# --------------------------------------------------------------------------------------------
# Records → table.


def setting_label(r: dict) -> str:
    """The protocol of a record in words: network, percentages removed, noise."""
    removed = ", ".join(f"{float(p):g}" for p in r.get("removed", ()))
    return f"{r.get('model', '')} removed {removed} %, σ {float(r.get('noise', ROAD_NOISE)):g}".strip()


def format_table(records: Sequence[dict]) -> str:
    """Per method (and setting): mean MoRF, LeRF and combined score over the images, as markdown."""
    from .results import markdown_table

    records = [r for r in records if r.get("metric", METRIC) == METRIC and not r.get("skipped")]
    settings = list(dict.fromkeys(r["setting"] for r in records))
    labels = {s: setting_label(next(r for r in records if r["setting"] == s)) for s in settings}
    several = len(settings) > 1
    rows = []
    for (method, setting), rs in group_records(records, "method", "setting").items():
        curves = [RoadCurves.from_record(r) for r in rs]
        row = [method_label(records, method)] + ([labels[setting]] if several else [])
        row += [float(np.mean([c.morf_score for c in curves])), float(np.mean([c.lerf_score for c in curves])),
                float(np.mean([c.combined for c in curves])), len(curves)]
        rows.append(row)
    header = ["Method", *(["Setting"] if several else []), "MoRF (lower is better)", "LeRF (higher is better)",
              "combined (higher is better)", "images"]
    note = "" if several or not settings else f"\n\nSetting: {labels[settings[0]]}."
    return (
        "### ROAD: mean p(target) with pixels removed by noisy linear imputation (Rong et al. 2022)\n\n"
        + markdown_table(header, rows)
        + note
        + "\n\nPercentages are of pixels removed (pytorch-grad-cam's percentile is the share kept: its "
        "ROADMostRelevantFirst(percentile=80) removes the top 20 %); combined = (LeRF − MoRF) / 2, as its "
        "ROADCombined.\n"
    )
