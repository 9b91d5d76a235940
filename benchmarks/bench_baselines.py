"""Seconds per attribution method on one 224 px image: the offline model and a random ResNet-50.

Every method runs with its default (paper) settings: Occlusion 8×8 = 784 forward passes, Integrated
Gradients 50 steps, SmoothGrad 50 samples, Per-Sample IBA 10 steps × batch 10. One warm-up pass per
network first; each method then runs `--repeats` times and the median is printed, one line per method.
IBA statistics are estimated beforehand from `--stats-samples` images (not timed; the bottleneck's
cost does not depend on how many images the statistics came from).

    python benchmarks/bench_baselines.py                                  # both networks, all methods
    python benchmarks/bench_baselines.py --models resnet50 --methods gradient,grad_cam --repeats 3
    python benchmarks/bench_baselines.py --threads 1                     # on a shared, busy CPU
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


from iba_core.methods import get_method, method_keys  # noqa: E402
from iba_core.images import load_sample  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.image_sources import sample_photo_batches  # noqa: E402
from iba_core.feature_stats import FeatureStats, estimate_stats  # noqa: E402

MODELS = ("efficientnet_lite0", "resnet50")


def _stats(network, n: int) -> FeatureStats:
    layer = network.spec.default_layer
    batches = sample_photo_batches(network.preprocess, n, batch_size=16)
    mean, std, count = estimate_stats(network.prefix(layer), batches, device=network.device)
    return FeatureStats(mean, std, count, network.key, network.weights_id, layer, "sample photos")


def bench_model(key: str, methods: list[str], repeats: int, device: torch.device, stats_samples: int) -> None:
    network = load_network(key, weights="pretrained" if key == "efficientnet_lite0" else "random", device=device)
    x = network.preprocess(load_sample("chelsea")).to(device)
    target = network.top_k(x, 1)[0][0]
    stats = _stats(network, stats_samples) if any(get_method(m).needs_stats for m in methods) else None
    warm = x.clone().requires_grad_(True)
    network.model(warm)[0, target].backward()  # warm-up: allocator, kernel selection
    for method_key in methods:
        settings = {"stats": stats} if get_method(method_key).needs_stats else {}
        times = []
        for _ in range(repeats):
            method = get_method(method_key, **settings)
            amap = method.attribute(network, x, target)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(amap.seconds)
        print(f"{key:<20}{method_key:<22}{amap.name:<26}{statistics.median(times):>9.2f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ",".join(MODELS))
    parser.add_argument("--methods", default="all", help="'all' or comma-separated method keys")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--stats-samples", type=int, default=64, help="images for the IBA statistics")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    methods = method_keys() if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        get_method(m)  # unknown keys fail before any slow work
    device = torch.device(args.device)
    start = time.perf_counter()
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, 224 px chelsea crop, "
          f"top-1 class, default settings, median of {args.repeats}")
    print(f"{'model':<20}{'key':<22}{'method':<26}{'seconds':>11}")
    for key in args.models.split(","):
        bench_model(key.strip(), methods, args.repeats, device, args.stats_samples)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
