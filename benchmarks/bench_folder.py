"""Images per second of a folder run (`python -m iba_core attribute FOLDER --out RUN_DIR`, issue #22 point 5).

A folder of N images (the offline sample photos, written as JPEGs and repeated) runs through `iba_core.runs`'
loop, as the command runs it: loading and preprocessing, one network pass per chunk, the maps, the per-map measures,
the float16 maps and the parts on disk. Timed per method, each into a fresh run folder:
  - Per-Sample: the paper's settings (β = 10/k, T = 10 steps, B = 10 copies), `--batch-images` images per batched
    fit (`PerSampleBottleneck.attribute_batch`);
  - Readout: the shipped checkpoint (where one ships for the network: efficientnet_lite0), the chunk's maps in one
    pass.
Statistics and the readout are loaded before the clock starts (a run does that once). The table (results.parquet,
with distance_to_class_mean) is built after the clock stops and timed on its own.

    python benchmarks/bench_folder.py                                    # offline network, CPU, 32 images
    python benchmarks/bench_folder.py --images 2                         # a smoke run
    python benchmarks/bench_folder.py --model resnet50 --weights random --device cuda --images 512 \
        --batch-images 64 --precision auto                               # issue goals: ≥ 100 img/s Per-Sample,
                                                                         # ≥ 1,000 img/s Readout (GPU)

Printed: the processor (or GPU), torch's threads, the load average (a busy machine gives lower figures), then one
line per method: images/s, seconds per image, and the precision the passes ran in.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from iba_core.images import load_sample, sample_image_names
from iba_core.methods import get_method
from iba_core.networks import load_network
from iba_core.precision import machine_id
from iba_core.runs import FolderSettings, build_table, list_images, open_run, run_folder


def write_photos(folder: Path, count: int) -> Path:
    """`count` JPEGs: the offline sample photos, repeated."""
    folder.mkdir(parents=True, exist_ok=True)
    names = sample_image_names()
    for i in range(count):
        load_sample(names[i % len(names)]).save(folder / f"{i:05d}.jpg", quality=95)
    return folder


def bench(network, method, folder: Path, out: Path, batch_images: int) -> dict:
    root, items = list_images(folder, class_index=network.class_index)
    settings = FolderSettings(batch_images=batch_images)
    # one batch first, into another folder: statistics, the readout and an "auto" precision (measured per batch
    # size) are ready untimed
    run_folder(network, items[:batch_images], [method], out / "warm-up", settings, root=root)
    sync = torch.cuda.synchronize if network.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    summary = run_folder(network, items, [method], out / "run", settings, root=root)
    sync()
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    build_table(out / "run")
    table_seconds = time.perf_counter() - start
    table = open_run(out / "run").table
    return {"images": summary.images, "seconds": seconds, "table_seconds": table_seconds,
            "errors": int(table["error"].notna().sum()), "precision": ",".join(sorted(set(table["precision"].dropna())))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="efficientnet_lite0")
    parser.add_argument("--weights", default="pretrained", help="pretrained, random or a file")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--images", type=int, default=32)
    parser.add_argument("--batch-images", type=int, default=8)
    parser.add_argument("--precision", default="auto", help="Per-Sample network passes: fp32, bf16, fp16 or auto")
    parser.add_argument("--methods", default="per-sample,readout")
    args = parser.parse_args()

    network = load_network(args.model, weights=args.weights, device=args.device)
    load = os.getloadavg()
    print(f"{machine_id(network.device)} | load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} | "
          f"{network.key} ({network.weights_id}) | {args.images} images, {args.batch_images} per batch")
    methods = []
    if "per-sample" in args.methods:
        methods.append(("Per-Sample", get_method("iba_10", precision=args.precision)))
    if "readout" in args.methods:
        readout = get_method("readout")
        if readout.available_for(network) is None:
            methods.append(("Readout", readout))
        else:
            print(f"Readout: skipped ({readout.available_for(network)})")
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_photos(Path(tmp) / "photos", args.images)
        for name, method in methods:
            r = bench(network, method, folder, Path(tmp) / name, args.batch_images)
            print(f"{name:10s} {r['images'] / r['seconds']:8.2f} images/s  {r['seconds'] / r['images']:.3f} s/image  "
                  f"precision {r['precision'] or '-'}  errors {r['errors']}  table {r['table_seconds']:.2f} s")


if __name__ == "__main__":
    main()
