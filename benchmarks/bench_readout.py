"""Cost of a Readout Bottleneck heatmap relative to one forward pass of the analysed network.

A trained readout gives a heatmap from one pass: the network's first pass collecting the read-out
layers, the readout network (three 1×1 convolutions), the blur, the KL and the total-preserving resize.
Target: ≤ 2.5× one forward pass. Two references are timed:
  - forward: `network.model(x)`, the network as torchvision / the EfficientNet package define it;
  - folded forward: the same network with BatchNorms folded into convolutions (what the readout's
    first pass uses), so the ratio against it shows the readout's own overhead.
Runs alternate in one process so all three see the same machine state; medians are printed.

    python benchmarks/bench_readout.py                         # efficientnet_lite0, shipped checkpoint
    python benchmarks/bench_readout.py --models efficientnet_lite0,resnet50,vgg16 --repeats 9
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn


from iba_core.fast import fold_batchnorms  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.readout import ReadoutBottleneck, default_checkpoint, load_readout  # noqa: E402


def _readout(network) -> tuple[ReadoutBottleneck, str]:
    path = default_checkpoint(network.key)
    if path is not None and network.weights_id != "random":
        return load_readout(path, network), f"checkpoint {path.name}"
    rb = ReadoutBottleneck.create(network).eval()  # untrained: same cost as a trained one
    return rb, "untrained readout (same cost)"


def bench(key: str, repeats: int, device: torch.device, batch: int) -> dict:
    network = load_network(key, weights="pretrained" if key == "efficientnet_lite0" else "random", device=device)
    rb, source = _readout(network)
    folded = fold_batchnorms(nn.Sequential(*(m for _, m in network.stages())))
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(0)).to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def forward():
        with torch.inference_mode():
            network.model(x)

    def forward_folded():
        with torch.inference_mode():
            folded(x)

    def heatmap():
        rb.heatmaps(x)

    runs = {"forward": forward, "folded": forward_folded, "heatmap": heatmap}
    for fn in runs.values():  # warm-up: allocator, oneDNN/cuDNN kernel choice
        fn()
        fn()
    sync()
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {"model": key, "layer": rb.config.layer, "source": source, **med,
            "ratio": med["heatmap"] / med["forward"], "ratio_folded": med["heatmap"] / med["folded"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="efficientnet_lite0", help="comma-separated network keys")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"{args.repeats} alternating repeats (medians)")
    print(f"{'model':<20}{'layer':<10}{'forward ms':>11}{'folded ms':>11}{'heatmap ms':>12}"
          f"{'ratio':>8}{'vs folded':>11}  readout")
    worst = 0.0
    for key in (k.strip() for k in args.models.split(",")):
        r = bench(key, args.repeats, device, args.batch)
        worst = max(worst, r["ratio"])
        print(f"{r['model']:<20}{r['layer']:<10}{1e3 * r['forward']:>11.1f}{1e3 * r['folded']:>11.1f}"
              f"{1e3 * r['heatmap']:>12.1f}{r['ratio']:>7.2f}x{r['ratio_folded']:>10.2f}x  {r['source']}", flush=True)
    print(f"heatmap / forward (median ratio, worst model): {worst:.2f}x  (target ≤ 2.5x)")


if __name__ == "__main__":
    main()
