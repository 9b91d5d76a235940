"""Wall time of `evaluate degradation --tile 14 --methods random grad_cam iba_10` in fp32 and in `auto` precision.

    python benchmarks/bench_evaluate.py               # 20 photos (the 13 offline photos and 7 crops of them)
    python benchmarks/bench_evaluate.py --photos 4    # a quicker look; the cost per photo is constant
    python benchmarks/bench_evaluate.py --device cuda --precisions fp32,bf16,fp16

Both runs use the same folder, the same command and fresh result files, one after the other in this process
(fp32 first, then auto, whose one-off precision measurement is included in its time). Prints the CPU, the
precision `auto` chose, both times and the ratio.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from iba_core.cli import main as cli
from iba_core.precision import machine_id
from iba_core.image_sources import offline_photos


def make_folder(folder: Path, count: int) -> None:
    photos = list(offline_photos(extended=True).items())
    for i in range(count):
        name, image = photos[i % len(photos)]
        if i >= len(photos):  # more photos than the pool: a different centre crop of one of them
            w, h = image.size
            image = image.crop((w // 8, h // 8, w - w // 8, h - h // 8))
        image.convert("RGB").save(folder / f"{i:02d}_{name}.jpg", quality=95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=int, default=20)
    parser.add_argument("--precisions", default="fp32,auto")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cuda")
    parser.add_argument("--batch-size", default=None, help="images per forward pass (default: the CLI's)")
    args = parser.parse_args()
    print(f"machine: {machine_id(args.device)}; device {args.device}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "photos"
        folder.mkdir()
        make_folder(folder, args.photos)
        times = {}
        for precision in args.precisions.split(","):
            out = Path(tmp) / f"{precision}.jsonl"
            start = time.perf_counter()
            code = cli(["evaluate", "degradation", "--images", str(folder), "--tile", "14", "--methods", "random",
                        "grad_cam", "iba_10", "--out", str(out), "--no-progress", "--precision", precision, "--device", args.device]
                       + (["--batch-size", args.batch_size] if args.batch_size else []))
            times[precision] = time.perf_counter() - start
            chosen = {line.split('"precision":"')[1].split('"')[0] for line in out.read_text().splitlines()
                      if '"precision":"' in line}
            print(f"{precision}: {times[precision]:.1f} s for {args.photos} photos (exit {code}; passes ran in "
                  f"{', '.join(sorted(chosen)) or '?'})", flush=True)
        if {"fp32", "auto"} <= set(times):
            print(f"speed-up auto vs fp32: {times['fp32'] / times['auto']:.2f}x")


if __name__ == "__main__":
    main()
