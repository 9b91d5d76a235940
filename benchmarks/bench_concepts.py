"""Seconds and peak memory of concept discovery (`iba_core.concepts.find_concepts`, issue #41 point 4) on a folder
run of real photos.

The folder: N PNGs made offline from the sample photos (scikit-image's chelsea, coffee, astronaut, rocket, …), each
a seeded random crop, flip and small rotation, so no two are the same, in two class folders (tabby, space shuttle:
labels for grouping only, alternating). The run: `run_folder` with the offline pretrained efficientnet_lite0 (the
project's default) and the Per-Sample Bottleneck (`iba_10`), untimed. Then, each in a fresh spawned process:
  - baseline: load the network and open the run; its peak RSS; then `estimate_seconds` (the page's estimate);
  - concepts: the same, then `find_concepts` (every class and the whole run: each image is read in its class's
    group and in "all") — its seconds, and the peak RSS over the baseline's (what concepts add);
  - with --stream, the same with `discover.STREAM_IMAGES` set to 0 in that process: every group fitted by
    MiniBatchNMF, streamed (the path of groups over 10,000 images), on the same images.
The concept set is removed before each measured call (find_concepts resumes: a finished group would be skipped).

The passes are timed by wrapping, in the measured process only, `discover.fit_group` (the fit pass: reading the
images, sampling rows, the NMF fits), `factorise.choose_k` / `fit` / `stream` (the NMF alone, outermost calls;
streamed, the reading happens inside `stream`), and `discover.measure_batch` (coefficients, maps, the 2K + 2 removal
checks per image); the measure pass is the rest of the call (reading again, the measures, writing the set). The
library is not changed. Peak RSS is the child's own high-water mark (VmHWM; see `_peak_rss_kib`); on a GPU, also its
peak allocated memory.

    python benchmarks/bench_concepts.py                      # 64 photos, CPU, K by the elbow
    python benchmarks/bench_concepts.py --images 8           # a smoke run
    python benchmarks/bench_concepts.py --stream --write-docs  # both paths; regenerate docs/concepts.md's figures
    python benchmarks/bench_concepts.py --device cuda --images 512 --per-class 6

--write-docs stores the figures in docs/bench_concepts.json and rewrites the block of docs/concepts.md between
`<!-- figures: bench_concepts -->` and `<!-- /figures -->` from them (never by hand; tests/concepts checks). Run it
alone: on a shared machine the figures measure the neighbours too (the load average is printed before and after).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "concepts.md"
RESULTS = ROOT / "docs" / "bench_concepts.json"
BEGIN, END = "<!-- figures: bench_concepts -->", "<!-- /figures -->"
#: The two class folders (ImageNet names the network resolves) the photos alternate between.
CLASSES = ("tabby", "space shuttle")
MODEL = "efficientnet_lite0"


def write_photos(folder: Path, count: int, seed: int = 0, side: int = 320) -> Path:
    """`count` PNGs in two class folders below `folder`: the offline sample photos, each a seeded random crop (60-100%
    of each side), a flip half the time and a rotation of up to 10 degrees, scaled to a long side of `side` px."""
    from PIL import Image

    from iba_core.images import load_sample, sample_image_names

    rng, names = random.Random(seed), sample_image_names()
    for name in CLASSES:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for i in range(count):
        img = load_sample(names[i % len(names)])
        w, h = img.size
        cw, ch = int(w * rng.uniform(0.6, 1)), int(h * rng.uniform(0.6, 1))
        x, y = rng.randrange(w - cw + 1), rng.randrange(h - ch + 1)
        img = img.crop((x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        img = img.rotate(rng.uniform(-10, 10), resample=Image.Resampling.BILINEAR)
        scale = side / max(img.size)
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
        img.save(folder / CLASSES[i % 2] / f"photo_{i:05d}.png")
    return folder


def make_run(photos: Path, run_dir: Path, device: str) -> dict:
    """A finished folder run of `photos` (the Per-Sample Bottleneck, the default settings) in `run_dir`; resumed
    where one is there already. Returns its images and seconds (not part of the figures)."""
    from iba_core.methods import get_method
    from iba_core.networks import load_network
    from iba_core.runs import finish_run, list_images, run_folder

    network = load_network(MODEL, weights="pretrained", device=device)
    top, items = list_images(photos, class_index=network.class_index)
    started = time.perf_counter()
    run_folder(network, items, [get_method("iba_10")], run_dir, root=top)
    finish_run(run_dir)
    return {"images": len(items), "seconds": time.perf_counter() - started}


def _peak_rss_kib() -> int:
    """This process's peak RSS in KiB: Linux's VmHWM, the high-water mark of its own memory since its exec. Not
    `ru_maxrss`: Linux folds into it the RSS the process had at its exec, a fork of the parent (here the parent that
    made the run: gigabytes that are not the child's)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # elsewhere: KiB on Linux, bytes on macOS


def _instrument(timers: dict[str, float]) -> None:
    """Wrap the passes' functions of this process's iba_core.concepts with timers (outermost calls only: choose_k
    calls fit)."""
    from iba_core.concepts import discover, factorise

    depth = {"nmf": 0}

    def timed(module, name: str, key: str) -> None:
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            outer = depth.get(key, 0) == 0
            depth[key] = depth.get(key, 0) + 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                depth[key] -= 1
                if outer:
                    timers[key] = timers.get(key, 0.0) + time.perf_counter() - started

        setattr(module, name, wrapper)

    timed(discover, "fit_group", "fit_pass")
    timed(discover, "measure_batch", "measure_compute")
    for name in ("choose_k", "fit", "stream"):
        timed(factorise, name, "nmf")


def measure(run_dir: str, device: str, what: str, k: int | None) -> dict:
    """In a fresh process: load the network and open the run, then `what`: "baseline" (the estimate after the
    peak RSS is read), "concepts" or "stream" (find_concepts, the latter with every group streamed)."""
    import torch

    from iba_core.concepts import ConceptSettings, discover, find_concepts, open_concepts
    from iba_core.networks import load_network
    from iba_core.runs import open_run

    cuda = torch.device(device).type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    network = load_network(MODEL, weights="pretrained", device=device)
    len(open_run(run_dir).table)  # find_concepts reads the table too: part of the baseline
    settings = ConceptSettings(k=k)
    out: dict = {"what": what, "rss_kib": _peak_rss_kib(),
                 "gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None}
    if what == "baseline":
        started = time.perf_counter()
        out["estimate_s"] = discover.estimate_seconds(network, run_dir, settings)
        out["estimate_took_s"] = time.perf_counter() - started
        return out
    if what == "stream":
        discover.STREAM_IMAGES = 0  # every group through MiniBatchNMF
    timers: dict[str, float] = {}
    _instrument(timers)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sync()
    started = time.perf_counter()
    summary = find_concepts(network, run_dir, settings)
    sync()
    seconds = time.perf_counter() - started
    table = open_concepts(run_dir).concepts
    out.update(seconds=seconds, images=summary.images, groups=len(summary.done), rss_kib=_peak_rss_kib(),
               gpu_mib=torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
               fit_pass_s=timers.get("fit_pass", 0.0), nmf_s=timers.get("nmf", 0.0),
               measure_compute_s=timers.get("measure_compute", 0.0),
               k=" ".join(f"{g}:{n}" for g, n in table.groupby("group", sort=True)["k"].first().items()),
               unreadable=len(summary.unreadable))
    out["measure_pass_s"] = seconds - out["fit_pass_s"]
    return out


def in_child(run_dir: Path, device: str, what: str, k: int | None) -> dict:
    """`measure` in a spawned process of its own (a fresh interpreter: its peak memory is its own)."""
    shutil.rmtree(run_dir / "concepts", ignore_errors=True)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(measure, (str(run_dir), device, what, k))


def figures(base: dict, found: dict, images: int) -> dict:
    """One path's figures: per 1,000 images, the passes, the estimate's ratio and the memory over the baseline."""
    mib = 1024.0
    return {
        "path": "MiniBatchNMF (streamed)" if found["what"] == "stream" else "NMF",
        "images": images, "groups": found["groups"], "k": found["k"], "seconds": round(found["seconds"], 2),
        "per_1000_images_s": round(found["seconds"] / images * 1000, 1),
        "fit_pass_s": round(found["fit_pass_s"], 2), "nmf_s": round(found["nmf_s"], 2),
        "measure_pass_s": round(found["measure_pass_s"], 2), "measure_compute_s": round(found["measure_compute_s"], 2),
        "estimate_s": round(base["estimate_s"], 2),
        "measured_over_estimate": round(found["seconds"] / base["estimate_s"], 2),
        "peak_rss_mib": round(found["rss_kib"] / mib, 1), "baseline_rss_mib": round(base["rss_kib"] / mib, 1),
        "added_rss_mib": round((found["rss_kib"] - base["rss_kib"]) / mib, 1),
        "added_per_1000_images_mib": round((found["rss_kib"] - base["rss_kib"]) / mib / images * 1000, 1),
        "gpu_peak_mib": None if found["gpu_mib"] is None else round(found["gpu_mib"], 1),
    }


COLUMNS = (("path", "path"), ("groups", "groups"), ("k", "K per group"), ("seconds", "seconds"),
           ("per_1000_images_s", "s per 1,000 images"), ("fit_pass_s", "fit pass s"), ("nmf_s", "of which NMF s"),
           ("measure_pass_s", "measure pass s"), ("estimate_s", "estimate s"),
           ("measured_over_estimate", "measured / estimate"), ("peak_rss_mib", "peak RSS MiB"),
           ("added_rss_mib", "added over baseline MiB"), ("gpu_peak_mib", "GPU peak MiB"))


def markdown(results: dict | None) -> str:
    """The docs block for `results` (as `main` stores them), or the line saying none were measured yet."""
    if not results:
        return "\nNot measured yet: `python benchmarks/bench_concepts.py --stream --write-docs`, alone on a quiet " \
               "machine, writes the figures here.\n"
    h = results["header"]
    out = ["", f"Measured by `python benchmarks/bench_concepts.py {h['arguments']}` on {h['date']}: {h['machine']}, "
               f"load average {h['load_before']} before and {h['load_after']} after; {h['model']} with the "
               f"Per-Sample Bottleneck's run of {h['images']} photos in {len(CLASSES)} classes (the photos: the "
               "sample photos cropped, flipped and turned, seeded). Each image is read in its class's group and in "
               f"the whole run's. Baseline (the network loaded, the run opened): {h['baseline_rss_mib']} MiB peak "
               f"RSS; the page's estimate took {h['estimate_took_s']} s.", ""]
    shown = [(key, title) for key, title in COLUMNS if key != "gpu_peak_mib" or any(
        r.get(key) is not None for r in results["rows"])]
    out += ["| " + " | ".join(t for _, t in shown) + " |", "|" + "---|" * len(shown)]
    out += ["| " + " | ".join("" if r.get(key) is None else str(r[key]) for key, _ in shown) + " |"
            for r in results["rows"]]
    return "\n".join(out) + "\n\n"


def page_part(text: str) -> str:
    """The generated block of the page's text (between BEGIN and END)."""
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)]


def write_docs(results: dict | None, path: Path = DOCS) -> None:
    """Replace the page's generated block with `markdown(results)`."""
    text = path.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + markdown(results) + text[stop:], encoding="utf-8")


def load_line() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run_all(args: argparse.Namespace, work: Path) -> dict:
    """The photos, the run, the baseline and each path's measurement; prints as it goes; returns the results."""
    from iba_core.precision import machine_id  # the processor's (or GPU's) name, torch and its threads: one copy

    load_before = load_line()
    machine = machine_id(args.device)
    print(f"{machine} | load average {load_before}", flush=True)
    photos, run_dir = write_photos(work / "photos", args.images), work / "run"
    made = make_run(photos, run_dir, args.device)
    print(f"run: {made['images']} photos, {MODEL} + iba_10, made in {made['seconds']:.1f} s (not measured)", flush=True)
    base = in_child(run_dir, args.device, "baseline", args.per_class)
    print(f"baseline: peak RSS {base['rss_kib'] / 1024:.1f} MiB; estimate {base['estimate_s']:.1f} s "
          f"(took {base['estimate_took_s']:.1f} s)", flush=True)
    rows = []
    for what in ("concepts", "stream") if args.stream else ("concepts",):
        row = figures(base, in_child(run_dir, args.device, what, args.per_class), made["images"])
        rows.append(row)
        print("  ".join(f"{title}: {row[key]}" for key, title in COLUMNS if row[key] is not None), flush=True)
    load_after = load_line()
    print(f"load average after: {load_after}")
    arguments = " ".join([f"--images {args.images}"] + ([f"--per-class {args.per_class}"] if args.per_class else [])
                         + ([f"--device {args.device}"] if args.device != "cpu" else [])
                         + (["--stream"] if args.stream else []))
    header = {"arguments": arguments, "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine,
              "load_before": load_before, "load_after": load_after, "model": MODEL, "images": made["images"],
              "baseline_rss_mib": round(base["rss_kib"] / 1024, 1),
              "estimate_took_s": round(base["estimate_took_s"], 1)}
    return {"header": header, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=64, help="photos in the run (default 64)")
    parser.add_argument("--per-class", type=int, default=None, help="concepts per group (default: the elbow)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--stream", action="store_true", help="measure the streamed MiniBatchNMF path too")
    parser.add_argument("--keep", type=Path, default=None, help="keep the photos and the run in this folder (its "
                        "run is resumed if there; its concepts/ is replaced)")
    parser.add_argument("--write-docs", action="store_true", help=f"store the figures in {RESULTS.name} and "
                        f"regenerate {DOCS.relative_to(ROOT)}'s block from them")
    args = parser.parse_args()
    if args.images < 2:
        parser.error("--images must be at least 2 (one per class)")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        results = run_all(args, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-concepts-") as tmp:
            results = run_all(args, Path(tmp))
    if args.write_docs:
        RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        write_docs(results)
        print(f"wrote {RESULTS.relative_to(ROOT)} and the figures in {DOCS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
