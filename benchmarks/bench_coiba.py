"""Time per image and peak memory of CoIBA (the default range) against the single-layer Per-Sample Bottleneck.

Both at the paper's settings (10 steps, 10 noisy copies; CoIBA's σ_s 0, the Per-Sample Bottleneck's 1), on the
offline network (efficientnet_lite0) and the chelsea photo, in fp32 unless --precision says otherwise, with the
shipped statistics (the default range's 12 layers). Runs alternate in one process so both see the same machine
state; medians are printed, and the ratios CoIBA / Per-Sample from the same run. Memory: the peak resident set
above the level before the run (sampled every 2 ms, `bench_per_sample.PeakRSS`), or CUDA's peak allocation.

    python benchmarks/bench_coiba.py                        # 1 and 4 images per run, 3 repeats
    python benchmarks/bench_coiba.py --device cuda --repeats 5
    python benchmarks/bench_coiba.py --effects              # the docs' measured effects (bits, p(target))

--effects: on the four yardstick photos (target: the top-1 class), total bits, p(target) without and with the
bottleneck and whether it discarded the class, for the presets `iba` and `coiba` and CoIBA as this project ran it
before (output placement, β·k 10, final λ); --yardsticks adds insertion and deletion AUCs (CoIBA's protocol).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_live_view import cpu_model  # noqa: E402  (one copy of the CPU's name)
from bench_per_sample import PeakRSS  # noqa: E402  (one copy of the memory sampler)

from iba_core.coiba import CoIBABottleneck, CoIBASettings, default_range, layer_range  # noqa: E402
from iba_core.results import range_label  # noqa: E402
from iba_core.feature_stats import stats_for_layers  # noqa: E402
from iba_core.images import load_sample  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck  # noqa: E402
from iba_core.precision import machine_id  # noqa: E402


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def measure(bottleneck, x: torch.Tensor, targets: list[int], device: torch.device) -> tuple[float, float, float]:
    """(seconds per image, peak MiB above the start, total bits of the first image) of one run."""
    with PeakRSS(device) as mem:
        start = time.perf_counter()
        results = bottleneck.attribute_batch(x, targets)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    return seconds / x.shape[0], mem.mb, results[0].total_bits


#: --effects: (label, method key, settings) — every one through the method registry (`get_method`), as every front
#: end gets its bottleneck.
EFFECT_CASES = (
    ("iba (the paper's Per-Sample)", "iba", {}),
    ("coiba (the authors' preset)", "coiba", {}),
    ("coiba, output, β·k 10, final λ (before)", "coiba", {"placement": "output", "beta_k": 10.0,
                                                          "read_point": "final"}),
)
PHOTOS = ("chelsea", "coffee", "motorcycle", "rocket")  # scripts/make_yardstick_table.py's, with a box


def effects(precision: str, yardsticks: bool) -> None:
    """One line per (photo, case): bits, p(target) without → with, lost class, seconds, and the yardsticks
    (insertion and deletion AUC under CoIBA's protocol) with --yardsticks; then the means per case."""
    from iba_core.methods import get_method
    from iba_core.metrics.insertion_deletion import PROTOCOLS
    from iba_core.metrics.yardsticks import YardstickOptions, yardstick_columns

    network = load_network("efficientnet_lite0")
    options = YardstickOptions(protocol=PROTOCOLS["coiba"])
    rows: dict[str, list] = {label: [] for label, _, _ in EFFECT_CASES}
    for photo in PHOTOS:
        x = network.preprocess(load_sample(photo))
        target = int(network.probabilities(x).argmax())
        for label, key, settings in EFFECT_CASES:
            method = get_method(key, precision=precision, **settings)
            start = time.perf_counter()
            amap = method.attribute(network, x, target)
            seconds = time.perf_counter() - start
            e = amap.extra
            cols = (yardstick_columns(network.model, x, amap.values, target, ("insertion", "deletion"),
                                      options=options) if yardsticks else {})
            lost = e["p_with"] < 0.01 or e["p_with"] < 0.1 * e["p_without"]
            rows[label].append((e["total_bits"], e["p_without"], e["p_with"], lost, cols))
            ins = f"   insertion {cols['insertion_auc']:.3f} deletion {cols['deletion_auc']:.3f}" if cols else ""
            print(f"{photo:<11} {label:<42} {e['total_bits']:9,.0f} bits   p {e['p_without']:.3f} → "
                  f"{e['p_with']:.4f}{'   class discarded' if lost else ''}{ins}   {seconds:5.1f} s", flush=True)
    print("\nmeans over the photos: bits, p(target) with / without, photos that kept the class (p with ≥ ½ p "
          "without), insertion, deletion")
    for label, values in rows.items():
        bits = statistics.mean(v[0] for v in values)
        ratio = statistics.mean(v[2] / v[1] for v in values)
        kept = sum(v[2] >= 0.5 * v[1] for v in values)
        ys = ""
        if yardsticks:
            ys = (f"   insertion {statistics.mean(v[4]['insertion_auc'] for v in values):.3f}"
                  f"   deletion {statistics.mean(v[4]['deletion_auc'] for v in values):.3f}")
        print(f"{label:<42} {bits:9,.0f} bits   p with/without {ratio:.3f}   kept {kept} of {len(values)}{ys}")


def placement_vit(precision: str) -> None:
    """CoIBA's two placements on a RANDOM-weight timm ViT-S/16 (no pretrained ViT offline): for each photo, p(target)
    without → with and the total bits, at the authors' branch inputs and at the block outputs, β·k 1 and 10 (the
    target: the network's top-1). Random weights: what each placement does to such a network, not which explains a
    trained ViT better."""
    import tempfile

    import timm
    from timm.models import save_for_hf

    from iba_core.methods import get_method

    folder = Path(tempfile.mkdtemp()) / "vit_small"
    torch.manual_seed(0)
    save_for_hf(timm.create_model("vit_small_patch16_224", num_classes=1000), folder, safe_serialization=True)
    network = load_network(str(folder))
    for photo in PHOTOS:
        x = network.preprocess(load_sample(photo))
        target = int(network.probabilities(x).argmax())
        for placement in ("branch", "output"):
            for beta_k in (1.0, 10.0):
                method = get_method("coiba", placement=placement, beta_k=beta_k, precision=precision,
                                    stats_samples=100)
                e = method.attribute(network, x, target).extra
                print(f"{photo:<11} ViT-S/16 random, {placement:<6} β·k {beta_k:<4g} {e['layers'][0]} … "
                      f"{e['layers'][-1]}  {e['total_bits']:9,.0f} bits   p {e['p_without']:.5f} → {e['p_with']:.5f}",
                      flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--images", default="1,4", help="images per run, comma-separated (default: %(default)s)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", help="fp32 (default), auto, bf16 or fp16")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--effects", action="store_true", help="print the measured effects of docs/science/coiba.md instead")
    parser.add_argument("--yardsticks", action="store_true", help="with --effects: insertion and deletion AUCs too")
    parser.add_argument("--placement-vit", action="store_true",
                        help="CoIBA's branch and output placements on a random-weight timm ViT-S/16")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.placement_vit:
        print(f"CPU: {cpu_model()}; before: {uptime()}", flush=True)
        placement_vit(args.precision)
        print(f"after: {uptime()}")
        return
    if args.effects:
        print(f"CPU: {cpu_model()}; before: {uptime()}", flush=True)
        effects(args.precision, args.yardsticks)
        print(f"after: {uptime()}")
        return
    device = torch.device(args.device)
    print(f"CPU: {cpu_model()}; {machine_id(device.type)}; torch threads {torch.get_num_threads()}")
    if device.type == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(device)}")
    print(f"before: {uptime()}", flush=True)

    network = load_network("efficientnet_lite0", device=device)
    layers = layer_range(network, *default_range(network))
    stats = {k: v.to(device) for k, v in stats_for_layers(network, layers).items()}
    first = layers[0]
    photo = network.preprocess(load_sample("chelsea")).to(device)
    coiba = CoIBABottleneck.for_network(network, layers, stats, CoIBASettings(precision=args.precision))
    iba = PerSampleBottleneck.for_network(network, first, stats[first], BottleneckSettings(precision=args.precision))
    print(f"CoIBA: {range_label(layers[0], layers[-1])} ({len(layers)} layers, path {coiba.path}); "
          f"Per-Sample: {first} (path {iba.path}); statistics of {stats[first].n} samples; "
          f"precision {args.precision}", flush=True)

    for n in (int(v) for v in args.images.split(",")):
        x = photo.expand(n, -1, -1, -1).contiguous()
        targets = [285] * n
        for b in (coiba, iba):  # warm-up: kernels chosen, splits built, "auto" precision measured
            measure(b, x, targets, device)
        runs: dict[str, list[tuple[float, float, float]]] = {"CoIBA": [], "Per-Sample": []}
        for _ in range(args.repeats):
            runs["CoIBA"].append(measure(coiba, x, targets, device))
            runs["Per-Sample"].append(measure(iba, x, targets, device))
        med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v), v[-1][2])
               for k, v in runs.items()}
        print(f"\n{n} image(s) per run, median of {args.repeats}:")
        for k, (sec, mb, bits) in med.items():
            print(f"  {k:<11} {sec:7.3f} s per image   peak +{mb:7.1f} MiB   total bits {bits:,.0f}")
        c, p = med["CoIBA"], med["Per-Sample"]
        print(f"  ratio CoIBA / Per-Sample: time {c[0] / p[0]:.2f}×, peak memory "
              f"{c[1] / p[1] if p[1] > 0 else float('nan'):.2f}×", flush=True)
    print(f"\nafter: {uptime()}")


if __name__ == "__main__":
    main()
