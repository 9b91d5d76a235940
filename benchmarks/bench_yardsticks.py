"""Seconds per image of each per-map metric of the metric registry (insertion, deletion, ROAD, the pointing game,
MoRF AOPC, …) on one network.

    python benchmarks/bench_yardsticks.py                         # efficientnet_lite0 (offline), CPU
    python benchmarks/bench_yardsticks.py --model resnet50 --weights random --device cuda --precision auto

The map is Grad-CAM's on chelsea (a metric's cost does not depend on which map it scores); each metric runs
`--repeats` times on the same image after one warm-up, and the median is printed with the machine, the load
average before and after, and the protocol. Run it alone: anything beside it on 2 cores makes it 4–6× slower.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--weights", default="pretrained", help="pretrained, random (no download) or a file")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", help="fp32, bf16, fp16 or auto (the metrics' forward passes)")
    parser.add_argument("--protocol", default="rise", help="insertion/deletion protocol: rise or coiba")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from iba_core.heads import head_of
    from iba_core.images import load_sample
    from iba_core.methods import get_method
    from iba_core.metrics.common import scoring_model
    from iba_core.metrics import registry
    from iba_core.metrics.insertion_deletion import PROTOCOLS
    from iba_core.metrics.yardsticks import YardstickOptions
    from iba_core.networks import load_network
    from iba_core.precision import machine_id

    load_before = os.getloadavg()
    network = load_network(args.model, weights=args.weights, device=args.device)
    pre = network.preprocess
    x = pre.normalise(pre.crop(load_sample("chelsea"))).to(args.device)
    with torch.no_grad():
        target = int(network.model(x).argmax())
    values = get_method("grad_cam").attribute(network, x, target).values
    model = scoring_model(network, args.precision)
    head = head_of(network)
    protocol = PROTOCOLS[args.protocol]
    box = torch.zeros(values.shape, dtype=torch.bool).numpy()
    box[60:160, 60:160] = True

    options = YardstickOptions(protocol=protocol, batch_size=args.batch_size)
    batch = registry.MapBatch(model, x, [values], target, head, box)
    # one job per registered per-map metric, as folder runs and the pages measure it
    jobs = {m.title: (lambda m=m: m.measure(batch, options)) for m in registry.per_map()}
    print(f"machine: {machine_id(args.device)}; device {args.device}; torch threads {torch.get_num_threads()}")
    print(f"network {args.model} ({network.weights_id}), crop {tuple(x.shape[-2:])}, precision "
          f"{getattr(model, 'precision', 'fp32')} (asked {args.precision}), batch {args.batch_size}; "
          f"{protocol.describe()}")
    for name, job in jobs.items():
        job()  # warm-up: kernels, the precision measurement, caches
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            job()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        print(f"{name:>20}: {statistics.median(times):7.3f} s per image (median of {args.repeats}; "
              f"min {min(times):.3f}, max {max(times):.3f})", flush=True)
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
