"""How long a network this machine has never seen takes to its first Per-Sample step (issue: "the first step
of a new network within a minute on this CPU").

For each network, in a fresh cache (no statistics, no precision memo), times the phases a first run goes
through: load (random weights), feature statistics for the default layer only (`get_stats` with the
default sample count for a network without an image folder), the precision choice ("auto": measured once
per network, layer and machine; reported apart, and skipped with --precision fp32) and the first
optimisation step (to the step callback). Prints the CPU model, torch threads and the load average:
run it alone (2 cores: anything beside it slows it several-fold).

    python benchmarks/bench_new_network.py                      # torchvision:resnet50 and torchvision:vit_b_16
    python benchmarks/bench_new_network.py --models torchvision:resnet18 --precision fp32

Issue #39's case: a ViT-S-sized model a user saved as a folder, statistics from the user's own images (a
folder's default: 1000 images) in under a minute on 2 cores, with progress. --timm NAME saves timm's NAME (random
weights) as a folder the way timm saves for the hub and measures that folder; --photos N writes N JPEG photos
(the offline photos, cropped and scaled to 400-640 px, as a camera folder would hold) to stand for the user's:

    python benchmarks/bench_new_network.py --timm vit_small_patch16_224 --photos 1000 --statistics-only
    python benchmarks/bench_new_network.py --models path/to/model-folder --images path/to/photos
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def first_step(key: str, precision: str, images: str | None = None,
               statistics_only: bool = False) -> dict[str, float | int | str]:
    """Seconds of each phase of a first run on `key` (random weights; a model folder: its own) in the current
    (fresh) cache, the statistics from `images` (a folder) or the offline photos."""
    import torch

    from iba_core.feature_stats import app_samples, get_stats
    from iba_core.images import load_sample
    from iba_core.networks import load_network
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    out: dict[str, float | int | str] = {"model": key}
    t = time.perf_counter()
    network = load_network(key, weights=None if os.path.isdir(key) else "random")
    out["load_s"] = time.perf_counter() - t
    layer = network.spec.default_layer
    out["layer"], out["samples"] = layer, app_samples(network, images)
    progress: list[int] = []
    t = time.perf_counter()
    stats = get_stats(network, layer, images=images, n=int(out["samples"]),
                      progress=lambda done, total, unit: progress.append(done))
    out["stats_s"], out["progress_reports"] = time.perf_counter() - t, len(progress)
    if statistics_only:
        return out
    x = network.preprocess(load_sample("chelsea"))
    iba = PerSampleBottleneck.for_network(network, layer, stats, BottleneckSettings(precision=precision, steps=2))
    t = time.perf_counter()
    out["precision"] = iba.precision_for(x)
    out["precision_s"] = time.perf_counter() - t
    marks: list[float] = []
    t = time.perf_counter()
    with torch.no_grad():
        target = network.top_k(x, 1)[0][0]
    iba.attribute(x, target, callback=lambda info: marks.append(time.perf_counter()))
    out["first_step_s"] = marks[0] - t
    out["total_to_first_step_s"] = out["load_s"] + out["stats_s"] + out["precision_s"] + out["first_step_s"]
    return out


def save_timm(name: str, folder: str) -> str:
    """timm's `name` with random weights (seeded) saved as timm saves for the hub (`save_for_hf`): a model folder."""
    import timm
    import torch
    from timm.models import save_for_hf

    torch.manual_seed(0)
    save_for_hf(timm.create_model(name), folder, safe_serialization=True)
    return folder


def write_photos(n: int, folder: str) -> str:
    """`n` JPEG photos in `folder`: the offline photos, cropped and scaled to a long side of 400-640 px (seeded)."""
    import random

    from iba_core.image_sources import offline_photos

    rng, photos = random.Random(0), list(offline_photos(extended=True).values())
    for i in range(n):
        img = photos[i % len(photos)]
        w, h = img.size
        cw, ch = int(w * rng.uniform(0.6, 1)), int(h * rng.uniform(0.6, 1))
        x, y = rng.randrange(w - cw + 1), rng.randrange(h - ch + 1)
        crop, side = img.crop((x, y, x + cw, y + ch)), rng.randrange(400, 641)
        crop.resize((side, max(1, round(side * ch / cw)))).save(os.path.join(folder, f"photo_{i:05d}.jpg"), quality=90)
    return folder


def report(r: dict) -> str:
    stats = (f"{r['model']} at {r['layer']}: load {r['load_s']:.1f} s · statistics ({r['samples']} images, "
             f"{r['progress_reports']} progress reports) {r['stats_s']:.1f} s")
    if "first_step_s" not in r:
        return stats
    return (f"{stats} · precision {r['precision']} chosen in {r['precision_s']:.1f} s · first step "
            f"{r['first_step_s']:.1f} s → {r['total_to_first_step_s']:.1f} s to the first step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="torchvision:resnet50,torchvision:vit_b_16",
                        help="comma-separated network keys or model folders")
    parser.add_argument("--timm", help="measure timm's NAME (random weights) saved as a model folder instead")
    parser.add_argument("--images", help="statistics from this image folder (default: the offline photos)")
    parser.add_argument("--photos", type=int, help="statistics from N photos written to a temporary folder")
    parser.add_argument("--statistics-only", action="store_true", help="stop after the statistics")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    args = parser.parse_args()
    import torch

    print(f"CPU: {cpu_model()} · torch {torch.__version__} · {torch.get_num_threads()} threads · "
          f"load average {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    with tempfile.TemporaryDirectory() as work:
        models = [save_timm(args.timm, os.path.join(work, args.timm))] if args.timm else args.models.split(",")
        images = args.images
        if args.photos:
            images = write_photos(args.photos, tempfile.mkdtemp(dir=work))
        for key in models:
            with tempfile.TemporaryDirectory() as cache:
                os.environ["IBA_CACHE_DIR"] = cache  # a network and machine seen for the first time
                print(report(first_step(key, args.precision, images, args.statistics_only)), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
