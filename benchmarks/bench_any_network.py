"""Speed for any network: a model card's ResNet-50 at `layer2`, timm's ResNet-50 at its second stage and a Hugging
Face ViT-B/16 at its middle block, against the built-in ResNet-50 at `conv3_4`.

Both are the same function (torchvision's ResNet-50 cut after its second stage, 512×28×28 at 224 px). The
built-in is cut from its registered stage list; the card's network has no stage list and is cut with
`torch.fx` (`iba_core/networks/fx_split.py`): the prefix runs once, only the suffix per step. The goal
(issue 12, point 5): the card within 1.2× the built-in. "hook" shows what the card's network costs
without the cut (the whole network forward and backward every step).

timm's ResNet-50 (`timm:resnet50`, random weights; its `layer2` is the same 512×28×28 map) and a Hugging Face
ViT-B/16 (transformers' ViTForImageClassification with its default configuration, random weights, saved with
`save_pretrained` to a temporary folder and loaded as a model folder; the bottleneck at `vit.layers.5`,
the middle of 12 blocks) show what the ecosystem sources cost (issue 21, point 7: the timm CNN within 1.2× the
built-in). The ViT is a different function; its figure is for orientation.

Both networks get random weights (the card's from a state-dict file written here), the paper's settings
(T = 10 steps, B = 10 copies) and the same precision (fp32 unless --precision). Runs alternate in one
process so all see the same machine state; medians are printed with the processor.

    python benchmarks/bench_any_network.py               # 5 alternating repeats
    python benchmarks/bench_any_network.py --repeats 9 --precision auto --no-hook
    python benchmarks/bench_any_network.py --device cuda --repeats 15
    python benchmarks/bench_any_network.py --no-ecosystem     # without the timm and Hugging Face cases
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torchvision

from iba_core.networks import load_network
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.precision import machine_id
from iba_core.feature_stats import FeatureStats, estimate_stats


def write_card(folder: Path) -> Path:
    """A model card for a random torchvision ResNet-50: state dict, 1000 class names, layer2 as its layer."""
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), folder / "resnet50.pth")
    (folder / "classes.txt").write_text("\n".join(f"class {i}" for i in range(1000)) + "\n")
    card = folder / "resnet50.toml"
    card.write_text('arch = "torchvision:resnet50"\nweights = "resnet50.pth"\nclasses = "classes.txt"\n'
                    'layer = "layer2"\n')
    return card


def write_hf_vit(folder: Path) -> Path:
    """A random-weight ViT-B/16 classifier (transformers' default ViTConfig: 224 px, 12 blocks, 768 channels)
    saved as a transformers model folder."""
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(num_labels=1000, id2label={i: f"class {i}" for i in range(1000)},
                       label2id={f"class {i}": i for i in range(1000)})
    target = folder / "vit-b16"
    ViTForImageClassification(config).save_pretrained(target)
    return target


def noise_stats(network, layer: str, size: int) -> FeatureStats:
    g = torch.Generator().manual_seed(1)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(8, 3, size, size, generator=g)],
                                  device=network.device)
    return FeatureStats(mean, std, n).to(network.device)


def timed(iba: PerSampleBottleneck, x: torch.Tensor):
    """(seconds, result) of one attribution; waits for the GPU so its time counts."""
    sync = torch.cuda.synchronize if x.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    result = iba.attribute(x, 3)
    sync()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "auto", "bf16", "fp16"])
    parser.add_argument("--no-hook", action="store_true", help="leave out the card's hook path (the slow one)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-ecosystem", action="store_true", help="leave out timm's ResNet-50 and the HF ViT")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"machine: {machine_id(device)}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

    with tempfile.TemporaryDirectory() as tmp:
        card = write_card(Path(tmp))
        builtin = load_network("resnet50", weights="random", device=device)
        start = time.perf_counter()
        carded = load_network(card, device=device)
        print(f"card loaded with its layers found in {time.perf_counter() - start:.2f} s")
        extra = {}
        if not args.no_ecosystem:
            start = time.perf_counter()
            extra["timm resnet50 @ layer2"] = (load_network("timm:resnet50", weights="random", device=device), "layer2")
            extra["HF ViT-B/16 @ vit.layers.5"] = (load_network(write_hf_vit(Path(tmp)), weights="random",
                                                                       device=device), "vit.layers.5")
            print(f"timm and Hugging Face networks loaded in {time.perf_counter() - start:.2f} s")
    size = builtin.spec.crop
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(2)).to(device)
    settings = BottleneckSettings(precision=args.precision)

    start = time.perf_counter()
    path = carded.split_path("layer2")
    print(f"card's layer2: path {path!r}, cut by torch.fx and checked in {time.perf_counter() - start:.2f} s "
          "(once per network and layer)")
    cases = {
        "built-in resnet50 @ conv3_4 (stages)": PerSampleBottleneck.for_network(
            builtin, "conv3_4", noise_stats(builtin, "conv3_4", size), settings),
        f"card resnet50 @ layer2 ({path})": PerSampleBottleneck.for_network(
            carded, "layer2", noise_stats(carded, "layer2", size), settings),
    }
    for name, (network, layer) in extra.items():
        network.spec.check_layer(layer)
        cases[f"{name} ({network.split_path(layer)})"] = PerSampleBottleneck.for_network(
            network, layer, noise_stats(network, layer, network.spec.crop), settings)
    if not args.no_hook:
        cases["card resnet50 @ layer2 (hook)"] = PerSampleBottleneck(
            carded.model, carded.hook_module("layer2"), cases[f"card resnet50 @ layer2 ({path})"].stats, settings)

    times: dict[str, list[float]] = {name: [] for name in cases}
    for name, iba in cases.items():  # warm-up: precision choice, oneDNN / cuDNN kernels, allocator
        iba.attribute(x, 3)
    for _ in range(args.repeats):
        for name, iba in cases.items():  # alternating: every case sees the same machine state
            seconds, result = timed(iba, x)
            times[name].append(seconds)
    print(f"T = {settings.steps} steps, B = {settings.batch} copies, precision {result.precision}, "
          f"{args.repeats} alternating repeats, medians:")
    base = statistics.median(times[next(iter(cases))])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<42} {median:7.3f} s   {median / base:5.2f}× the built-in   "
              f"(min {min(values):.3f}, max {max(values):.3f})")


if __name__ == "__main__":
    main()
