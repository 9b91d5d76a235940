"""Text prompts as targets (M2IB) on CLIP models: seconds per prompt map, and the effect of this project's two
deviations from M2IB (issue 30, point 2).

Networks, both with RANDOM weights (no CLIP checkpoint can be downloaded here): the tests' tiny CLIP (4 vision
blocks of 32 channels, 32 px in 8-px patches, `tests/clip_fixtures.py`) and a CLIP with ViT-B/32's sizes
(transformers' default CLIPConfig: 12 vision blocks of 768 channels, 224 px in 32-px patches, a 12-block text
tower; its vocabulary is the tiny tokenizer's). The bottleneck sits at the default layer (M2IB's: block 9 of 12;
block 2 of 4), T = 10 steps, B = 10 copies, fp32, β·k 0.1 (M2IB's β = 0.1 on the mean KL).

Speed: one prompt map at a time (`attribute`), three prompts fitted together (`attribute_batch`, per map), and the
same without the stage list (the whole vision tower every step, as a hook): medians of alternating repeats.

Deviations (`--deviations`): on the sample photos × prompts, this project's maps (estimated feature statistics,
σ_s = 1) against M2IB's choices one at a time: the prior N(0, 1) (statistics μ = 0, σ = 1, M2IB's fixed
variance-1 prior) and σ_s = 0 (no smoothing of the mask). Printed: mean total bits, and the mean Pearson
correlation of each map with this project's map for the same photo and prompt. Random weights: the figures say
what the settings do to the maps of such a network, not how well either explains a trained CLIP.

    python benchmarks/bench_clip.py                      # speed, 5 repeats, both networks
    python benchmarks/bench_clip.py --tiny-only --repeats 3
    python benchmarks/bench_clip.py --deviations --tiny-only
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from clip_fixtures import save_tiny_clip, tiny_tokenizer  # noqa: E402  (the tests' tiny tokenizer and model)

from iba_core.feature_stats import FeatureStats, estimate_stats  # noqa: E402
from iba_core.images import load_sample  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.networks.network import Network  # noqa: E402
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck  # noqa: E402
from iba_core.precision import machine_id  # noqa: E402

PROMPTS = ("a photo of a cat", "a cup of coffee", "a rocket")
PHOTOS = ("chelsea", "coffee", "rocket", "astronaut")


def write_b32(folder: Path) -> Path:
    """config.json (ViT-B/32's sizes), the tiny tokenizer and CLIP's processor for 224 px; no weights file (the
    network is loaded with random weights)."""
    from transformers import CLIPConfig, CLIPImageProcessor

    tokenizer = tiny_tokenizer()
    config = CLIPConfig(text_config={"vocab_size": len(tokenizer), "bos_token_id": 0, "eos_token_id": 1,
                                     "pad_token_id": 1})
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    CLIPImageProcessor().save_pretrained(folder)
    return folder


def noise_stats(network, layer: str) -> FeatureStats:
    size = network.spec.crop
    batch = torch.randn(8, 3, size, size, generator=torch.Generator().manual_seed(1))
    mean, std, n = estimate_stats(network.prefix(layer), [batch], device=network.device)
    return FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")


def without_stages(network) -> Network:
    """The same network without its stage list: the bottleneck then hooks the whole model every step."""
    clone = Network(replace(network.spec, stages=None), network.model, network.weights_id, network.device,
                    network.preprocess, network.categories)
    return clone


def speed(name: str, network, repeats: int) -> None:
    layer = network.spec.default_layer
    network.set_prompts(list(PROMPTS))
    stats = noise_stats(network, layer)
    settings = BottleneckSettings(beta_k=0.1, precision="fp32")
    x = torch.randn(1, 3, network.spec.crop, network.spec.crop, generator=torch.Generator().manual_seed(2))
    stages = PerSampleBottleneck.for_network(network, layer, stats, settings)
    hooked = PerSampleBottleneck.for_network(without_stages(network), layer, stats, settings)
    times: dict[str, list[float]] = {"one prompt (stages)": [], "3 prompts together, per map": [],
                                     "one prompt (hook: whole tower per step)": []}
    stages.attribute(x, 0)  # warm-up
    for _ in range(repeats):
        start = time.perf_counter()
        stages.attribute(x, 0)
        times["one prompt (stages)"].append(time.perf_counter() - start)
        start = time.perf_counter()
        stages.attribute_batch(x.expand(3, -1, -1, -1), [0, 1, 2])
        times["3 prompts together, per map"].append((time.perf_counter() - start) / 3)
        start = time.perf_counter()
        hooked.attribute(x, 0)
        times["one prompt (hook: whole tower per step)"].append(time.perf_counter() - start)
    params = sum(p.numel() for p in network.model.parameters()) / 1e6
    print(f"{name} ({params:.1f} M parameters, random weights) @ {layer}:")
    for case, values in times.items():
        print(f"  {case:42s} {statistics.median(values):8.3f} s per map (median of {repeats})")


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel() - a.mean(), b.ravel() - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def deviations(name: str, network) -> None:
    from iba_core.feature_stats import stats_for_run

    layer = network.spec.default_layer
    network.set_prompts(list(PROMPTS))
    estimated = stats_for_run(network, layer)  # the one policy: the offline photos
    shape = tuple(estimated.mean.shape)
    prior = FeatureStats(torch.zeros(shape), torch.ones(shape), 1, network.key, network.weights_id, layer, "N(0,1)")
    base = BottleneckSettings(beta_k=0.1, precision="fp32")
    cases = {"this project (estimated statistics, σ_s 1)": (estimated, base),
             "M2IB's prior N(0, 1), σ_s 1": (prior, base),
             "estimated statistics, σ_s 0 (M2IB's)": (estimated, replace(base, sigma=0.0)),
             "M2IB (N(0, 1), σ_s 0)": (prior, replace(base, sigma=0.0))}
    images = torch.cat([network.preprocess(load_sample(photo)) for photo in PHOTOS])
    n = len(PHOTOS) * len(PROMPTS)
    xs = images.repeat_interleave(len(PROMPTS), dim=0)
    targets = [i % len(PROMPTS) for i in range(n)]
    maps: dict[str, list] = {}
    for case, (stats, settings) in cases.items():
        maps[case] = PerSampleBottleneck.for_network(network, layer, stats, settings).attribute_batch(xs, targets)
    ref = maps[next(iter(cases))]
    print(f"{name} @ {layer}, {len(PHOTOS)} photos × {len(PROMPTS)} prompts ({estimated.n} samples behind the "
          "estimated statistics):")
    print(f"  {'case':46s} {'mean total bits':>16s} {'map r vs this project':>22s}")
    for case, results in maps.items():
        bits = statistics.mean(r.total_bits for r in results)
        r = statistics.mean(pearson(a.heatmap, b.heatmap) for a, b in zip(results, ref))
        print(f"  {case:46s} {bits:16.1f} {r:22.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny-only", action="store_true", help="leave out the ViT-B/32-sized CLIP")
    parser.add_argument("--deviations", action="store_true", help="measure the deviations from M2IB instead")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine_id(torch.device('cpu'))}; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        networks = {"tiny CLIP": load_network(save_tiny_clip(Path(tmp) / "tiny-clip"))}
        if not args.tiny_only:
            networks["CLIP ViT-B/32 sizes"] = load_network(write_b32(Path(tmp) / "clip-b32"), weights="random")
        for name, network in networks.items():
            if args.deviations:
                deviations(name, network)
            else:
                speed(name, network, args.repeats)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
