"""The model zoo as a benchmark (issue 39): one small variant of every timm module and every Hugging Face
`AutoModelForImageClassification` type that builds offline, random weights, a 5-class head, saved as users save
them (`benchmarks/zoo_models.py`), then loaded with no code as `--model FOLDER` is (`load_network(folder)`) and
explained on a real photo (scikit-image's chelsea through the network's own preprocessing) by every method below.

Per (family, method): works (a finite map), says why (`available_for`'s sentence, or the UserError's message a user
sees), an internal error (any other exception: a bug, its type and first line) or timed out. Per family: seconds
to build, to load, of the default layer's statistics (the library's own statistics path, in a fresh cache), of each
method, and from `--model FOLDER` to the first Per-Sample map (load + statistics + the map). The readout is trained
for each model on the offline photos (one short epoch) before it runs: a minimal checkpoint, to see that it
runs, not a useful one. Each model runs in its own subprocess under --timeout: a hung or huge model stops only
itself. Prints the CPU model, torch threads and the load average: on 2 busy cores every figure is several-fold.

    python benchmarks/bench_zoo.py                                  # every family: an hour or more on 2 cores
    python benchmarks/bench_zoo.py --families timm:resnet,hf:vit --fast
    python benchmarks/bench_zoo.py --out zoo.jsonl --write-docs     # run, then regenerate the docs' table
    python benchmarks/bench_zoo.py --write-docs --results zoo.jsonl # the docs' table from an earlier run only
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_new_network import cpu_model  # noqa: E402 - one copy of the CPU's name for every benchmark

#: The methods run on every model, in the table's order (`iba` is the paper's Per-Sample Bottleneck, iba_10).
METHODS = ("iba", "coiba", "grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "saliency", "readout")
#: --fast: fewer steps and samples, for iterating (the figures are then not the defaults').
#: (CoIBA in fp32: "auto" would measure its precision again for its range, as it does for the Per-Sample map.)
FAST = {"iba": {"steps": 2, "batch": 2}, "coiba": {"steps": 2, "batch": 2, "precision": "fp32"}}
FAST_STATS_SAMPLES = "16"
DOCS = ROOT / "docs" / "operations" / "model-zoo.md"


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def run_method(network, key: str, x, target: int, settings: dict, record: dict) -> dict:
    """One method on one network: {"status", "seconds", "reason"}; statistics timed apart for the bottlenecks."""
    import numpy as np

    from iba_core.errors import UserError, user_message
    from iba_core.methods import get_method

    result: dict = {"status": "works"}
    start = time.perf_counter()
    try:
        method = get_method(key, **settings)
        reason = method.available_for(network)
        if reason is not None:
            return {"status": "says_why", "reason": reason, "where": "available_for"}
        if hasattr(method, "statistics") and getattr(method, "needs_stats", False):
            t = time.perf_counter()
            method.statistics(network)  # the library's one statistics path, as the CLI's first map
            result["stats_s"] = round(time.perf_counter() - t, 3)
        amap = method.attribute(network, x, target)
        values = np.asarray(amap.values)
        if not np.isfinite(values).all():
            result = {"status": "internal", "reason": "the map is not finite"}
        elif float(values.std()) == 0.0:
            result["constant"] = True  # works, but says nothing: noted in the table
        if "layer" in amap.extra:
            result["layer"] = amap.extra["layer"]
    except UserError as err:
        return {"status": "says_why", "reason": user_message(err, "cli"), "where": "attribute",
                "seconds": round(time.perf_counter() - start, 3)}
    except Exception as err:  # noqa: BLE001 - a bug: recorded with its type and first line
        import traceback

        frames = traceback.extract_tb(err.__traceback__)
        at = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        return {"status": "internal", "reason": first_line(err), "at": at,
                "seconds": round(time.perf_counter() - start, 3)}
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def train_tiny_readout(folder: Path, out: Path) -> str:
    """A readout checkpoint from one short epoch on the offline photos (a UserError says why none can be)."""
    from iba_core.readout import TrainConfig, train_readout

    cfg = TrainConfig(model=str(folder), weights="pretrained", sample_photos=4, batch_size=2, epochs=1, stats_n=4,
                      out=str(out), log_every=1, lr=1e-3)
    summary = train_readout(cfg, progress=False, log=lambda message: None)
    return summary["checkpoint"]


def save_record(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # the parent reads a whole record, also after a timeout


def worker(family: str, record_path: Path, fast: bool, readout: bool) -> None:
    """Build, save, load and explain one family's model, saving the record after every phase."""
    import torch

    from zoo_models import NotBuilt, build_family

    record: dict = {"family": family, "methods": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["IBA_CACHE_DIR"] = str(Path(tmp) / "cache")  # a model this machine has never seen
        folder = Path(tmp) / family.replace(":", "-")
        t = time.perf_counter()
        try:
            record.update(build_family(family, folder))
        except NotBuilt as err:
            record.update(status="not_built", reason=str(err))
            return save_record(record_path, record)
        record["build_s"] = round(time.perf_counter() - t, 3)
        save_record(record_path, record)
        record["load_status"] = "loading"
        first_map = explain(folder, record, record_path, fast, readout, Path(tmp))
        if first_map is not None:
            record["first_map_s"] = round(first_map, 3)
        record["status"] = record.get("status", "run")
        record["threads"] = torch.get_num_threads()
        save_record(record_path, record)


def explain(folder: Path, record: dict, record_path: Path, fast: bool, readout: bool, tmp: Path) -> float | None:
    """Load the folder as the CLI does and run every method; the seconds from `--model FOLDER` to the first map."""
    from iba_core.errors import UserError, user_message
    from iba_core.images import load_sample
    from iba_core.networks import load_network

    t = time.perf_counter()
    try:
        network = load_network(str(folder))
        x = network.preprocess(load_sample("chelsea"))
        target = network.top_k(x, 1)[0][0]
    except UserError as err:
        record.update(status="load_says_why", reason=user_message(err, "cli"))
        return None
    except Exception as err:  # noqa: BLE001 - a bug of loading
        record.update(status="load_internal", reason=first_line(err))
        return None
    record.pop("load_status", None)
    record["load_s"] = round(time.perf_counter() - t, 3)
    record["default_layer"] = network.spec.default_layer
    record["input_size"] = list(x.shape[-2:])
    for key in METHODS:
        settings = FAST.get(key, {}) if fast else {}
        if key == "readout":
            if not readout:
                continue
            settings = readout_settings(folder, network, tmp, record)
            if settings is None:
                save_record(record_path, record)
                continue
        record["methods"][key] = run_method(network, key, x, target, settings, record)
        save_record(record_path, record)
    iba = record["methods"].get("iba", {})
    return record["load_s"] + iba.get("seconds", 0.0) if iba.get("status") == "works" else None


def readout_settings(folder: Path, network, tmp: Path, record: dict) -> dict | None:
    """The readout's settings with a checkpoint trained here; None (its record written) where training says why."""
    from iba_core.errors import UserError, user_message
    from iba_core.methods import get_method

    reason = get_method("readout", checkpoint=str(folder)).available_for(network)
    if reason is not None:  # no named layers: the readout cannot apply, whatever the checkpoint
        record["methods"]["readout"] = {"status": "says_why", "reason": reason, "where": "available_for"}
        return None
    t = time.perf_counter()
    try:
        checkpoint = train_tiny_readout(folder, tmp / "readout")
    except UserError as err:
        record["methods"]["readout"] = {"status": "says_why", "reason": user_message(err, "cli"), "where": "training"}
        return None
    except Exception as err:  # noqa: BLE001 - a bug of training
        record["methods"]["readout"] = {"status": "internal", "reason": first_line(err), "where": "training"}
        return None
    record["readout_train_s"] = round(time.perf_counter() - t, 3)
    return {"checkpoint": checkpoint}


def run_family(family: str, args: argparse.Namespace) -> dict:
    """`family` in a subprocess under the time cap; its record (what finished, on a timeout)."""
    with tempfile.TemporaryDirectory() as tmp:
        record_path = Path(tmp) / "record.json"
        command = [sys.executable, __file__, "--worker", family, "--record", str(record_path)]
        command += ["--fast"] * args.fast + ["--no-readout"] * (not args.readout)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
        if args.fast:
            env["IBA_STATS_SAMPLES"] = FAST_STATS_SAMPLES
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
            tail = (done.stderr or "").strip().splitlines()[-1:] if done.returncode else []
        except subprocess.TimeoutExpired:
            done, tail = None, []
        record = json.loads(record_path.read_text()) if record_path.is_file() else {"family": family, "methods": {}}
        record["wall_s"] = round(time.perf_counter() - start, 1)
        if done is None:
            record["status"] = "timed_out"
            record["reason"] = f"it did not finish within the benchmark's {args.timeout:.0f} s."
        elif done.returncode and record.get("status") not in ("not_built",):
            record["status"] = "crashed"
            record["reason"] = f"the worker exited with status {done.returncode}: {tail[0][:200] if tail else ''}"
        return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=None, help="comma-separated families (timm:MODULE, hf:TYPE); "
                        "default: every timm module and Hugging Face type")
    parser.add_argument("--fast", action="store_true", help="2 steps × 2 copies and 16 statistics samples")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per model (default 600)")
    parser.add_argument("--out", type=Path, default=Path("zoo_results.jsonl"), help="JSON lines results file "
                        "(appended: a rerun of some families replaces their lines when the docs are written)")
    parser.add_argument("--no-readout", dest="readout", action="store_false", help="skip the readout (its "
                        "training is the slowest part on a small model)")
    parser.add_argument("--resume", action="store_true", help="skip the families --out holds already")
    parser.add_argument("--write-docs", action="store_true", help=f"regenerate {DOCS.relative_to(ROOT)}'s table")
    parser.add_argument("--results", type=Path, default=None, help="with --write-docs: the results file to "
                        "write it from, without running anything")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.record, args.fast, args.readout)
    import zoo_report

    if args.results is not None:
        records = zoo_report.read_results(args.results)
    else:
        records = run_all(args)
    print(zoo_report.table(records))
    if args.write_docs:
        zoo_report.write_docs(DOCS, records, args.results or args.out, ROOT)
        print(f"wrote {DOCS.relative_to(ROOT)}")


def run_all(args: argparse.Namespace) -> list[dict]:
    """Every chosen family in turn, a line per model on stdout and in the results file."""
    import torch

    from zoo_models import all_families

    families = args.families.split(",") if args.families else all_families()
    if args.resume and args.out.is_file():
        done = {json.loads(line).get("family") for line in args.out.read_text().splitlines() if line.strip()}
        families = [f for f in families if f not in done]
    header = {"header": True, "cpu": cpu_model(), "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_before": round(os.getloadavg()[0], 2), "fast": args.fast, "timeout": args.timeout,
              "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"CPU: {header['cpu']} · torch {header['torch']} · {header['threads']} threads · "
          f"load average {header['load_before']:.2f} (1 min) · {len(families)} families", flush=True)
    records = []
    with open(args.out, "a") as out:
        out.write(json.dumps(header) + "\n")
        for family in families:
            record = run_family(family, args)
            record["load_average"] = round(os.getloadavg()[0], 2)
            records.append(record)
            out.write(json.dumps(record) + "\n")
            out.flush()
            cells = " ".join(f"{k}:{v['status'][:5]}" for k, v in record.get("methods", {}).items())
            print(f"{family:38s} {record.get('variant', ''):32s} {record.get('status', ''):10s} "
                  f"{record.get('wall_s', 0):6.1f} s  {cells}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return [header, *records]


if __name__ == "__main__":
    main()
