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


def first_step(key: str, precision: str) -> dict[str, float | int | str]:
    """Seconds of each phase of a first run on `key` (random weights) in the current (fresh) cache."""
    import torch

    from iba_core.feature_stats import app_samples, get_stats
    from iba_core.images import load_sample
    from iba_core.networks import load_network
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    out: dict[str, float | int | str] = {"model": key}
    t = time.perf_counter()
    network = load_network(key, weights="random")
    out["load_s"] = time.perf_counter() - t
    layer = network.spec.default_layer
    out["layer"], out["samples"] = layer, app_samples(network)
    t = time.perf_counter()
    stats = get_stats(network, layer, n=int(out["samples"]))
    out["stats_s"] = time.perf_counter() - t
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="torchvision:resnet50,torchvision:vit_b_16")
    parser.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    args = parser.parse_args()
    import torch

    print(f"CPU: {cpu_model()} · torch {torch.__version__} · {torch.get_num_threads()} threads · "
          f"load average {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    for key in args.models.split(","):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["IBA_CACHE_DIR"] = cache  # a network and machine seen for the first time
            r = first_step(key, args.precision)
        print(f"{r['model']} at {r['layer']}: load {r['load_s']:.1f} s · statistics ({r['samples']} crops) "
              f"{r['stats_s']:.1f} s · precision {r['precision']} chosen in {r['precision_s']:.1f} s · first step "
              f"{r['first_step_s']:.1f} s → {r['total_to_first_step_s']:.1f} s to the first step", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
