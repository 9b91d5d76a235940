"""Measure the effect of each deviation from the paper's code that this project makes (docs/science/fidelity.md).

    python scripts/fidelity_effects.py                # all measurements, offline network
    python scripts/fidelity_effects.py --only smoothing seeds read_point

About 70 Per-Sample fits of ~2 s each on 2 idle cores, plus the SmoothGrad and Occlusion parts (~10 minutes);
on a shared machine far longer (`--only seeds read_point`, 45 fits: 26 minutes at load average 8).

Prints one line per measurement (docs/science/fidelity.md, and Home's note on what bits compare).
Everything runs in fp32 on the offline EfficientNet-Lite0 at its default layer and β with the shipped statistics
(1000 crops of the 13 offline photos); the photos are scikit-image's / matplotlib's; the target is the network's
top-1 class of each photo (chelsea: 285, Egyptian cat).
"""
from __future__ import annotations

import argparse
import math
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import torch
import torch.nn.functional as F

import iba_core.bottleneck as bottleneck
import iba_core.per_sample as per_sample

from iba_core.images import load_sample
from iba_core.methods import get_method
from iba_core.image_folders import list_items
from iba_core.metrics.degradation import degradation_curves
from iba_core.metrics.sensitivity_n import correlations, logit_drops
from iba_core.networks import load_network
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.precision import machine_id
from iba_core.image_sources import offline_photos
from iba_core.feature_stats import get_stats


#: The photos of the read-point measurement: the app's sample photos that are ordinary scenes (scikit-image's).
READ_POINT_PHOTOS = ("chelsea", "coffee", "astronaut", "rocket", "motorcycle")


def fit(net, name: str, **settings) -> per_sample.AttributionResult:
    """One Per-Sample run in fp32 on the photo `name`, at the default layer with the shipped statistics, for the
    network's top-1 class."""
    layer = net.spec.default_layer
    x = net.preprocess(load_sample(name))
    target = net.top_k(x, 1)[0][0]
    s = BottleneckSettings(precision="fp32", **settings)
    return PerSampleBottleneck.for_network(net, layer, get_stats(net, layer), s).attribute(x, target)


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def previous_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """The mask smoothing before this release, kept here only to measure the change: a separable Gaussian of
    radius ceil(3σ) (7 taps at σ = 1) with replicate padding."""
    if sigma <= 0:
        return x
    radius = max(1, math.ceil(3 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    k = (k / k.sum()).to(x.dtype)
    c = x.shape[1]
    kh, kw = k.view(1, 1, -1, 1).expand(c, 1, -1, 1), k.view(1, 1, 1, -1).expand(c, 1, 1, -1)
    y = F.conv2d(F.pad(x, (0, 0, radius, radius), mode="replicate"), kh, groups=c)
    return F.conv2d(F.pad(y, (radius, radius, 0, 0), mode="replicate"), kw, groups=c)


@contextmanager
def smoothing(which: str):
    """Run the bottleneck with the current smoothing ("authors") or the previous one ("previous")."""
    if which == "authors":
        yield
        return
    with mock.patch.object(bottleneck, "blur", previous_blur):
        yield


def fitted_alpha(net, name: str, seed: int) -> torch.Tensor:
    """The α a run ends with (1, C, h, w): the last one λ was made from."""
    seen: list[torch.Tensor] = []
    original = per_sample.lambda_from_alpha

    def keep(alpha, sigma):
        if sigma > 0:
            seen.append(alpha.detach().clone())
        return original(alpha, sigma)

    with mock.patch.object(per_sample, "lambda_from_alpha", keep):
        fit(net, name, seed=seed)
    return seen[-1]


def lambda_difference(alpha: torch.Tensor, sigma: float = 1.0, ring: int = 3) -> tuple[float, float]:
    """max |λ_authors − λ_previous| on the same α over the border cells (within `ring` cells of an edge, where
    the paddings act) and over the other cells."""
    diff = (bottleneck.blur(torch.sigmoid(alpha), sigma) - previous_blur(torch.sigmoid(alpha), sigma)).abs()
    border = torch.ones(diff.shape[-2:], dtype=torch.bool)
    border[ring:-ring, ring:-ring] = False
    return float(diff[..., border].max()), float(diff[..., ~border].max())


def smoothing_effect(net) -> None:
    """Bits and maps with the authors' smoothing (5 × 5, reflect) vs the previous one (7 taps, replicate)."""
    for name in ("chelsea", "coffee"):
        runs = {}
        for which in ("previous", "authors"):
            with smoothing(which):
                runs[which] = [fit(net, name, seed=seed) for seed in range(4)]
        bits = {k: np.array([r.total_bits for r in v]) for k, v in runs.items()}
        same_seed = [pearson(a.heatmap, b.heatmap) for a, b in zip(runs["previous"], runs["authors"])]
        floor = [pearson(a.heatmap, b.heatmap) for a, b in zip(runs["authors"], runs["authors"][1:])]
        change = 100 * (bits["authors"].mean() / bits["previous"].mean() - 1)
        print(f"smoothing ({name}, seeds 0-3): total bits {bits['authors'].mean():.0f} (5×5 reflect) vs "
              f"{bits['previous'].mean():.0f} (7-tap replicate), {change:+.1f} %; "
              f"heatmap Pearson at the same seed {np.mean(same_seed):.3f} (min {np.min(same_seed):.3f}), "
              f"seed to seed {np.mean(floor):.3f}")
    fitted = [lambda_difference(fitted_alpha(net, "chelsea", seed)) for seed in range(4)]
    rough = lambda_difference(torch.randn((1, 40, 28, 28), generator=torch.Generator().manual_seed(0)) * 5)
    print(f"smoothing, λ on the same α: fitted α (chelsea, seeds 0-3) max |Δλ| {max(b for b, _ in fitted):.3f} at "
          f"border cells (≤ 3 from an edge), {max(i for _, i in fitted):.3f} elsewhere; rough α ~ N(0, 5²): "
          f"{rough[0]:.3f} at border cells, {rough[1]:.3f} elsewhere")


def seed_spread(net, seeds: int = 5) -> None:
    bits = np.array([fit(net, "chelsea", seed=seed).total_bits for seed in range(seeds)])
    print(f"seed spread (chelsea, seeds 0-{seeds - 1}): total bits {bits.mean():.0f} ± {bits.std(ddof=1):.0f} "
          f"(sd {100 * bits.std(ddof=1) / bits.mean():.1f} % of the mean; range {bits.min():.0f}-{bits.max():.0f})")


def read_point(net) -> None:
    effects = []
    for name in READ_POINT_PHOTOS:
        bits = {p: np.mean([fit(net, name, seed=seed, read_point=p).total_bits for seed in range(4)])
                for p in ("final", "last_step")}
        effects.append(100 * (bits["final"] / bits["last_step"] - 1))
        print(f"read point ({name}, seeds 0-3): final λ {bits['final']:.0f} bits, last step's forward pass "
              f"{bits['last_step']:.0f} bits ({effects[-1]:+.1f} % with the final λ)")
    print(f"read point over {len(effects)} photos: {min(effects):+.1f} to {max(effects):+.1f} % "
          f"(median {np.median(effects):+.1f} %)")


def inactive_units(net, x) -> None:
    for layer in ("stem", net.spec.default_layer):
        stats = get_stats(net, layer)
        inactive = float((stats.active <= 0.01).float().mean())
        res = {}
        for thr in (None, 0.01):
            s = BottleneckSettings(seed=0, inactive_threshold=thr, precision="fp32")
            res[thr] = PerSampleBottleneck.for_network(net, layer, stats, s).attribute(x, 285)
        print(f"inactive units at {layer}: {100 * inactive:.2f} % of elements non-zero in ≤ 1 % of samples; "
              f"total bits {res[None].total_bits:.0f} unmasked vs {res[0.01].total_bits:.0f} masked; heatmap "
              f"Pearson {np.corrcoef(res[None].heatmap.ravel(), res[0.01].heatmap.ravel())[0, 1]:.3f}")


def smoothgrad_reduction(net, folder: Path) -> None:
    from iba_core.metrics.common import scoring_model

    scoring = scoring_model(net, "fp32")
    variants = {"max |·| over channels (ours)": get_method("smoothgrad"),
                "signed channel mean (paper's code)": get_method("smoothgrad", reduce="mean")}
    curves = {k: [] for k in variants}
    for item in list_items(folder):
        from iba_core.images import load_image

        x = net.preprocess(load_image(item.path))
        target = net.top_k(x, 1)[0][0]
        for name, method in variants.items():
            values = method.attribute(net, x, target).values
            curves[name].append(degradation_curves(scoring, x, values, target, 14, points=17))
    t1 = np.mean([c.morf[0] for c in curves[next(iter(curves))]])
    b = np.mean([c.p_full for cs in curves.values() for c in cs])
    for name, cs in curves.items():
        area = np.mean([c.area(t1, b) for c in cs])
        print(f"SmoothGrad {name}: degradation area (14×14 tiles, 17 points, {len(cs)} photos) {area:.3f}")


def occlusion_in_sensitivity_n(net, x) -> None:
    drops = logit_drops(net.model, x, 285, 8, ns=[1, 4, 16], sets=100, seed=0)
    for occluder in ("mean", "zero"):
        values = get_method("occlusion_8", occluder=occluder).attribute(net, x, 285).values
        corr = correlations(drops, values)
        print(f"Occlusion-8×8 in sensitivity-n (chelsea, 8×8 tiles, 100 sets): {occluder} occluder → "
              + ", ".join(f"n={n}: {c:.3f}" for n, c in zip(drops.ns, corr)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", default=None,
                        help="smoothing seeds read_point inactive smoothgrad occlusion")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"machine: {machine_id('cpu')}")
    net = load_network("efficientnet_lite0")
    x = net.preprocess(load_sample("chelsea"))
    want = set(args.only or ("smoothing", "seeds", "read_point", "inactive", "smoothgrad", "occlusion"))
    start = time.perf_counter()
    if "smoothing" in want:
        smoothing_effect(net)
    if "seeds" in want:
        seed_spread(net)
    if "read_point" in want:
        read_point(net)
    if "inactive" in want:
        inactive_units(net, x)
    if "occlusion" in want:
        occlusion_in_sensitivity_n(net, x)
    if "smoothgrad" in want:
        with tempfile.TemporaryDirectory() as tmp:
            for name, image in list(offline_photos(extended=False).items()):
                image.convert("RGB").save(Path(tmp) / f"{name}.jpg", quality=95)
            smoothgrad_reduction(net, Path(tmp))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
