"""Measure the effect of each deviation from the paper's code that this project makes (README, "Fidelity").

    python scripts/fidelity_effects.py                # all measurements, offline network, ~10 minutes on 2 cores

Prints one line per measurement. Everything runs in fp32 on the offline EfficientNet-Lite0 with the shipped
statistics (1000 crops of the 13 offline photos); the photos are scikit-image's / matplotlib's.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

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


def read_point(net, x) -> None:
    layer = net.spec.default_layer
    stats = get_stats(net, layer)
    bits = {p: [] for p in ("final", "last_step")}
    for seed in range(4):
        for point in bits:
            s = BottleneckSettings(seed=seed, read_point=point, precision="fp32")
            bits[point].append(PerSampleBottleneck.for_network(net, layer, stats, s).attribute(x, 285).total_bits)
    f, a = np.mean(bits["final"]), np.mean(bits["last_step"])
    print(f"read point (chelsea, {layer}, seeds 0-3): final λ {f:.0f} bits, last step's forward pass {a:.0f} bits "
          f"({100 * (f / a - 1):+.1f} % with the final λ)")


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
    parser.add_argument("--only", nargs="*", default=None, help="read_point inactive smoothgrad occlusion")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"machine: {machine_id('cpu')}")
    net = load_network("efficientnet_lite0")
    x = net.preprocess(load_sample("chelsea"))
    want = set(args.only or ("read_point", "inactive", "smoothgrad", "occlusion"))
    start = time.perf_counter()
    if "read_point" in want:
        read_point(net, x)
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
