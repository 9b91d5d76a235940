"""Seconds per image of the planted-mark self-test (`python -m iba_core selftest`, issue #42, item 2).

The offline sample photos (written as JPEGs, repeated to --images) get a mark (default: the text "© sample",
bottom-right) and go through `iba_core.selftest.self_test` as the command runs it: the copies, one network pass per
copy for the reaction, the folder runs on both copy folders (and, where the model reacts, the second pair for the
class the mark pushes toward), the measures and the files. Statistics (and an "auto" precision) are made ready on one
image into another folder first, so the clock measures the test itself. Printed: the processor and torch's threads,
the load average (a busy machine gives lower figures), the verdict, each method's scores, and the seconds per image.

    python benchmarks/bench_selftest.py                          # offline network, CPU, 8 images
    python benchmarks/bench_selftest.py --images 2 --methods saliency --mark patch --where top-left
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_folder import write_photos  # noqa: E402 - one copy of the photo folder the benchmarks time
from iba_core.methods import get_method  # noqa: E402
from iba_core.networks import load_network  # noqa: E402
from iba_core.precision import machine_id  # noqa: E402
from iba_core.selftest import make_mark, self_test  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--methods", default="iba_10,saliency,grad_cam")
    parser.add_argument("--mark", default="text")
    parser.add_argument("--where", default=None)
    parser.add_argument("--size", type=float, default=None)
    args = parser.parse_args()

    network = load_network(args.model, device=args.device)
    methods = [get_method(k) for k in args.methods.split(",")]
    mark = make_mark(args.mark, args.where, args.size)
    load = os.getloadavg()
    print(f"{machine_id(network.device)} | load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} | {network.key} | {args.images} images | mark {mark.identity()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_photos(Path(tmp) / "photos", args.images)
        warm = write_photos(Path(tmp) / "warm", 1)
        self_test(network, warm, mark, methods, Path(tmp) / "warm-up")  # statistics and precision ready, untimed
        start = time.perf_counter()
        result = self_test(network, folder, mark, methods, Path(tmp) / "test")
        seconds = time.perf_counter() - start
    n = len(result.images)
    print(result.reaction.verdict)
    for s in sorted(result.scores, key=lambda s: (s.rank is None, s.rank or 0, s.target)):
        print(f"  {s.target:6s} {s.name:24s} ratio {s.localisation_ratio:7.2f} (chance 1, at most {s.best_ratio:.0f})"
              f"  AUROC {s.auroc:.3f}  rank {s.rank}")
    print(f"{seconds / n:.2f} s/image ({n} images, {len(result.runs) * 2} folder runs of {len(methods)} methods: "
          f"{seconds:.1f} s)")


if __name__ == "__main__":
    main()
