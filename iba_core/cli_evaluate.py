"""`python -m iba_core evaluate {degradation,bbox,sensitivity-n,sanity,beta-table} …`.

Runs one of the paper's evaluation metrics over an image folder for several attribution methods,
appending one JSON line per finished (image, method, setting) to `--out` (flushed at once). A rerun
with the same `--out` skips every key already there, so an interrupted evaluation resumes where it
stopped. At the end a paper-style table is printed and saved next to the results (results.table.md).

Under torchrun (RANK / WORLD_SIZE set) the images are sharded across ranks: rank r takes every
WORLD_SIZE-th image, writes `results.rank{r}.jsonl` and, when done, `results.rank{r}.done`. With a
torch.distributed rendezvous (torchrun's MASTER_ADDR) the ranks meet at a barrier and rank 0 merges
the rank files into `--out` and writes the table; without one, whichever rank finishes last does.
`--merge-only` merges and tabulates existing rank files by hand.

Registered with `add_evaluate_parser(subparsers)`; the metrics themselves live in iba_core.metrics.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .metrics import results as res
from .metrics.common import stable_seed

METRIC_NAMES = ("degradation", "bbox", "sensitivity-n", "sanity", "beta-table")
DEFAULT_TILES = {"degradation": (8, 14), "sensitivity-n": (8,)}


# --------------------------------------------------------------------------------------------
# Methods.


class RandomMethod:
    """Uniform random attribution, seeded by the image (always available; the paper's 'Random')."""

    key = "random"
    name = "Random"
    signed = False
    unit = ""

    def attribute(self, loaded, x: torch.Tensor, target: int) -> np.ndarray:
        seed = stable_seed("random", int(target), float(x.detach().double().sum()))
        return np.random.default_rng(seed).random(tuple(x.shape[-2:]))


LOCAL_METHODS: dict[str, Callable[[], object]] = {"random": RandomMethod}


def _registry():
    """(get_method, method_keys) of iba_core.baselines, or None while it does not exist."""
    try:
        from .baselines import get_method, method_keys  # type: ignore[attr-defined]
    except ImportError:
        return None
    return get_method, method_keys


def resolve_methods(keys: Sequence[str] | None) -> dict[str, object]:
    """Method objects for the given keys (default: every registered method, else just 'random')."""
    registry = _registry()
    known = list(registry[1]()) if registry else []
    if not keys:
        keys = known or list(LOCAL_METHODS)
    methods = {}
    for key in keys:
        if key in known:
            methods[key] = registry[0](key)
        elif key in LOCAL_METHODS:
            methods[key] = LOCAL_METHODS[key]()
        else:
            choices = ", ".join(dict.fromkeys([*known, *LOCAL_METHODS]))
            raise ValueError(f"Unknown attribution method {key!r}; choose from: {choices}.")
    return methods


# --------------------------------------------------------------------------------------------
# The evaluation loop.


@dataclass
class EvalOptions:
    tiles: Sequence[int] | None = None
    points: int | None = None  # degradation: measurement points per curve (None: every tile)
    batch_size: int = 64
    sets: int = 100  # sensitivity-n: random tile sets per n
    n_count: int = 16  # sensitivity-n: number of log-spaced n values
    seed: int = 0
    boxes: Path | None = None
    max_box_fraction: float = 0.33
    layer: str | None = None  # beta-table
    beta_ks: Sequence[float] = (0.01, 0.1, 1.0, 10.0, 100.0)
    steps: int = 10
    stats_images: str | None = None
    stats_n: int | None = None
    sanity_levels: Sequence[str] | None = None
    readouts: Sequence[str] | None = None  # beta-table: readout checkpoints (None: the shipped one)
    progress: bool = True
    extra: dict = field(default_factory=dict)


class _Context:
    """Per-run state shared by the metric loops: the model, the writer, the done keys, the counters."""

    def __init__(self, metric: str, loaded, writer: res.ResultsWriter, done: set, options: EvalOptions):
        self.metric, self.loaded, self.writer, self.done, self.options = metric, loaded, writer, done, options
        self.stats = _stats_getter(loaded, options)
        self.model_id = f"{loaded.key}/{getattr(loaded, 'weights_id', '')}"
        self.written = 0
        self._scoring = None
        self.bar = None

    def note(self, text: str) -> None:
        """Show what is being worked on next to the progress bar."""
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    @property
    def scoring(self):
        """The (BatchNorm-folded) network the degradation / sensitivity passes run on."""
        if self._scoring is None:
            from .metrics.common import scoring_model

            self._scoring = scoring_model(self.loaded)
        return self._scoring

    def key(self, item, method: str, setting: str) -> tuple:
        return (self.metric, item.key, method, setting)

    def is_done(self, item, method: str, setting: str) -> bool:
        return self.key(item, method, setting) in self.done

    def prepare(self, item) -> tuple[torch.Tensor, int]:
        """(preprocessed image on the model's device, target): the label, else the top-1 class."""
        from .images import load_image

        x = self.loaded.preprocess(load_image(item.path)).to(getattr(self.loaded, "device", "cpu"))
        if item.label is not None:
            return x, int(item.label)
        from .model_state import frozen_eval

        with frozen_eval(self.loaded.model), torch.no_grad():
            return x, int(self.loaded.model(x).argmax(dim=1)[0])

    def write(self, item, method_key: str, method, setting: str, target: int, **data) -> None:
        record = {
            "metric": self.metric,
            "image": item.key,
            "method": method_key,
            "setting": setting,
            "method_name": getattr(method, "name", method_key),
            "model": self.loaded.key,
            "weights": getattr(self.loaded, "weights_id", ""),
            "target": int(target),
            "label": item.label,
            **data,
        }
        self.writer.write(record)
        self.done.add(res.record_key(record))
        self.written += 1


def _timed_map(method, loaded, x: torch.Tensor, target: int, ctx: "_Context | None" = None) -> tuple[np.ndarray, float]:
    if ctx is not None:
        ctx.note(getattr(method, "name", ""))
    start = time.perf_counter()
    values = np.asarray(method.attribute(loaded, x, target), dtype=np.float64)
    return values, time.perf_counter() - start


def _run_degradation(ctx: _Context, item, methods: dict) -> None:
    from .metrics.degradation import degradation_curves

    o = ctx.options
    tiles = list(o.tiles or DEFAULT_TILES["degradation"])

    def setting(t: int) -> str:
        return f"{ctx.model_id}|tile={t}" + (f"|points={o.points}" if o.points else "")

    pending = {k: [t for t in tiles if not ctx.is_done(item, k, setting(t))] for k in methods}
    if not any(pending.values()):
        return
    x, target = ctx.prepare(item)
    for key, method in methods.items():
        if not pending[key]:
            continue
        values, seconds = _timed_map(method, ctx.loaded, x, target, ctx)
        for t in pending[key]:
            curves = degradation_curves(ctx.scoring, x, values, target, t, points=o.points,
                                        batch_size=o.batch_size).to_record()
            curves.pop("target")
            ctx.write(item, key, method, setting(t), target, points=o.points, attribution_seconds=seconds, **curves)


def _run_bbox(ctx: _Context, item, methods: dict) -> None:
    from .metrics.bbox import bbox_ratio, box_mask, find_annotation, parse_voc

    o = ctx.options
    if o.boxes is None:
        raise ValueError("The bbox metric needs --boxes DIR (Pascal-VOC XML files named like the images).")
    setting = f"{ctx.model_id}|max_box={o.max_box_fraction:g}"
    if ctx.is_done(item, "*", setting) or all(ctx.is_done(item, k, setting) for k in methods):
        return
    crop = ctx.loaded.preprocess.crop_size if hasattr(ctx.loaded.preprocess, "crop_size") else 224
    resize = getattr(ctx.loaded.preprocess, "resize", 256)
    xml = find_annotation(o.boxes, item.key)
    reason, mask = None, None
    if xml is None:
        reason = "no annotation"
    else:
        mask = box_mask(parse_voc(xml), resize, crop)
        share = float(mask.mean())
        if mask.sum() == 0:
            reason = "box outside the crop"
        elif share > o.max_box_fraction:
            reason = f"box covers {share:.0%} of the crop"
    if reason is not None:
        ctx.write(item, "*", None, setting, -1, skipped=reason)
        return
    x, target = ctx.prepare(item)
    for key, method in methods.items():
        if ctx.is_done(item, key, setting):
            continue
        values, seconds = _timed_map(method, ctx.loaded, x, target, ctx)
        ratio = bbox_ratio(values, mask, seed=stable_seed(item.key))
        ctx.write(item, key, method, setting, target, ratio=ratio, box_pixels=int(mask.sum()),
                  attribution_seconds=seconds)


def _run_sensitivity(ctx: _Context, item, methods: dict) -> None:
    from .metrics.sensitivity_n import correlations, logit_drops

    o = ctx.options
    tiles = list(o.tiles or DEFAULT_TILES["sensitivity-n"])

    def setting(t: int) -> str:
        return f"{ctx.model_id}|tile={t}|sets={o.sets}|n_count={o.n_count}|seed={o.seed}"

    pending = {k: [t for t in tiles if not ctx.is_done(item, k, setting(t))] for k in methods}
    if not any(pending.values()):
        return
    x, target = ctx.prepare(item)
    drops = {}
    for key, method in methods.items():
        if not pending[key]:
            continue
        values, seconds = _timed_map(method, ctx.loaded, x, target, ctx)
        for t in pending[key]:
            if t not in drops:  # the random sets and logit drops are shared by all methods
                drops[t] = logit_drops(ctx.scoring, x, target, t, n_count=o.n_count, sets=o.sets,
                                       seed=stable_seed(o.seed, item.key, t), batch_size=o.batch_size)
            corr = correlations(drops[t], values)
            ctx.write(item, key, method, setting(t), target, tile=t, sets=o.sets, n=drops[t].ns.tolist(),
                      pixels=(drops[t].ns * t * t).tolist(), corr=corr.tolist(), attribution_seconds=seconds)


def _run_sanity(ctx: _Context, item, methods: dict) -> None:
    from .metrics.sanity import cascading_randomisation, heatmap_ssim, uses_max_over_sign

    o = ctx.options
    setting = f"{ctx.model_id}|seed={o.seed}" + (f"|levels={','.join(o.sanity_levels)}" if o.sanity_levels else "")
    pending = {k: m for k, m in methods.items() if not ctx.is_done(item, k, setting)}
    if not pending:
        return
    x, target = ctx.prepare(item)
    originals = {k: _timed_map(m, ctx.loaded, x, target, ctx)[0] for k, m in pending.items()}
    levels: list[str] = []
    scores: dict[str, list[float]] = {k: [] for k in pending}
    wanted = set(o.sanity_levels) if o.sanity_levels else None
    for name, randomised in cascading_randomisation(ctx.loaded, seed=o.seed):
        if wanted is not None and name not in wanted:
            continue
        levels.append(name)
        ctx.note(f"randomised down to {name}")
        for k, m in pending.items():
            h = np.asarray(m.attribute(randomised, x, target), dtype=np.float64)
            scores[k].append(heatmap_ssim(originals[k], h, uses_max_over_sign(m)))
        if wanted is not None and wanted <= set(levels):
            break
    for k, m in pending.items():
        ctx.write(item, k, m, setting, target, levels=levels, ssim=scores[k], max_over_sign=uses_max_over_sign(m))


def _run_beta_table(ctx: _Context, item, methods: dict) -> None:
    from .metrics.beta_table import INITIAL, ORIG, column_name, per_sample_row, readout_row
    from .per_sample import BottleneckSettings

    o = ctx.options
    layer = o.layer or ctx.loaded.spec.default_layer
    if item.label is None:
        return  # counted and reported by the caller
    columns = [ORIG, INITIAL, *(column_name(float(b)) for b in o.beta_ks)]

    def setting(column: str) -> str:
        return f"{ctx.model_id}|{layer}|steps={o.steps}|seed={o.seed}|{column}"

    todo = [c for c in columns if not ctx.is_done(item, "per_sample", setting(c))]
    readouts = [(ckpt, f"{ctx.model_id}|readout={Path(ckpt).name}|seed={o.seed}") for ckpt in _readout_checkpoints(ctx)]
    readout_todo = [(ckpt, s) for ckpt, s in readouts if not ctx.is_done(item, "readout", s)]
    if not todo and not readout_todo:
        return
    x, label = ctx.prepare(item)
    per_sample = type("PerSample", (), {"name": "Per-Sample"})()
    if todo:
        stats = ctx.stats(layer)
        prefix, suffix = ctx.loaded.fast_split(layer)
        base = BottleneckSettings(steps=o.steps, seed=o.seed)
    if ORIG in todo or INITIAL in todo:
        row = per_sample_row(prefix, suffix, stats, x, label, None, base)
        if ORIG in todo:
            ctx.write(item, "per_sample", per_sample, setting(ORIG), label, column=ORIG, layer=layer,
                      top1=row["orig_top1"], top5=row["orig_top5"], info_per_k=None, p_without=row["p_without"])
        if INITIAL in todo:
            ctx.write(item, "per_sample", per_sample, setting(INITIAL), label, column=INITIAL, layer=layer, **row)
    for b in o.beta_ks:
        c = column_name(float(b))
        if c in todo:
            row = per_sample_row(prefix, suffix, stats, x, label, float(b), base)
            ctx.write(item, "per_sample", per_sample, setting(c), label, column=c, layer=layer, beta_k=float(b), **row)
    readout = type("Readout", (), {"name": "Readout"})()
    for ckpt, s in readout_todo:
        row = readout_row(ctx.loaded, x, label, ckpt, seed=o.seed)
        if row is not None:
            ctx.write(item, "readout", readout, s, label, column=column_name(row["beta_k"]), **row)


def _readout_checkpoints(ctx: _Context) -> list[str]:
    """Readout checkpoints for the β table: --readout, else the shipped one for the network (if any)."""
    if ctx.options.readouts is not None:
        return [str(c) for c in ctx.options.readouts]
    try:
        from .readout import default_checkpoint
    except ImportError:
        return []
    path = default_checkpoint(ctx.loaded.key)
    return [str(path)] if path is not None else []


RUNNERS = {
    "degradation": _run_degradation,
    "bbox": _run_bbox,
    "sensitivity-n": _run_sensitivity,
    "sanity": _run_sanity,
    "beta-table": _run_beta_table,
}


def run_evaluation(
    metric: str,
    loaded,
    items: Sequence,
    methods: dict[str, object],
    out: str | Path,
    options: EvalOptions | None = None,
    rank: int = 0,
    world: int = 1,
) -> int:
    """Evaluate `items` (this rank's shard is taken here) and append records; returns how many were written.

    loaded: a LoadedModel, or any object with `.model`, `.preprocess`, `.key` (and `.device`).
    Keys already present in `out` or its rank files are skipped.
    """
    if metric not in RUNNERS:
        raise ValueError(f"Unknown metric {metric!r}; choose one of: {', '.join(RUNNERS)}.")
    options = options or EvalOptions()
    out = Path(out)
    done = res.done_keys([out, *res.rank_files(out)])
    path = out if world == 1 else res.rank_path(out, rank)
    mine = res.shard(list(items), rank, world)
    from tqdm import tqdm

    with res.ResultsWriter(path) as writer:
        ctx = _Context(metric, loaded, writer, done, options)
        bar = tqdm(mine, desc=f"{metric}" + (f" rank {rank}/{world}" if world > 1 else ""), unit="img",
                   file=sys.stderr, dynamic_ncols=True, disable=not options.progress)
        ctx.bar = bar if options.progress else None
        for item in bar:
            RUNNERS[metric](ctx, item, methods)
        bar.close()
        return ctx.written


def _stats_getter(loaded, options: EvalOptions):
    cache = {}

    def get(layer: str):
        if layer not in cache:
            from .stats import get_stats

            cache[layer] = get_stats(loaded, layer, images=options.stats_images, n=options.stats_n or _env_samples())
        return cache[layer]

    return get


def _env_samples() -> int:
    """IBA_STATS_SAMPLES (as the baselines use it) if set to a positive integer, else 1000."""
    try:
        n = int(os.environ.get("IBA_STATS_SAMPLES", ""))
    except ValueError:
        return 1000
    return n if n > 0 else 1000


# --------------------------------------------------------------------------------------------
# Ranks, merging, tables.


def _barrier(world: int) -> bool:
    """Meet the other ranks if torch.distributed can rendezvous (torchrun); False if it cannot."""
    if world <= 1:
        return False
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    if not dist.is_available():
        return False
    created = False
    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            return False
        import datetime

        # Joining the group is itself a rendezvous of all ranks; ranks finish at different times.
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=7))
        created = True
    dist.barrier()
    if created:
        dist.destroy_process_group()
    return True


def finish(out: str | Path, rank: int, world: int, print_table: bool = True) -> str | None:
    """After this rank's shard: merge (if it falls to this rank) and write/print the table."""
    out = Path(out)
    if world > 1:
        res.done_marker(out, rank).touch()
        met = _barrier(world)
        if (met and rank != 0) or (not met and not res.all_ranks_done(out, world)):
            print(f"rank {rank}: shard finished; rank files are merged when all ranks are done", file=sys.stderr)
            return None
        records = res.merge_results(out)
    else:
        records = res.read_records([out, *res.rank_files(out)])
    text, path = res.write_table(records, out)
    if print_table:
        print(text)
        print(f"table saved to {path}", file=sys.stderr)
    return text


# --------------------------------------------------------------------------------------------
# Argument parsing.


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def add_evaluate_parser(subparsers) -> argparse.ArgumentParser:
    """Register `evaluate` on an argparse subparsers object; returns the new parser."""
    from .models import DEFAULT_MODEL, REGISTRY

    p = subparsers.add_parser(
        "evaluate",
        help="run a paper metric (degradation, bbox, sensitivity-n, sanity, beta-table) over an image folder",
        description=(
            "Evaluate attribution methods with the metrics of Schulz et al. (ICLR 2020). Results are appended "
            "to --out as JSON lines (one per image, method and setting); rerunning with the same --out resumes. "
            "A paper-style table is printed and saved next to --out (NAME.table.md)."
        ),
    )
    p.add_argument("metric", choices=METRIC_NAMES)
    p.add_argument("--model", default=DEFAULT_MODEL, choices=list(REGISTRY), help="network (default: %(default)s)")
    p.add_argument("--weights", default=None, help="local weights file (state dict)")
    p.add_argument("--random-weights", action="store_true", help="untrained weights (for structure/speed tests)")
    p.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    p.add_argument("--images", type=Path, default=None, help="image folder (recursive)")
    p.add_argument("--labels", type=Path, default=None,
                   help="label file: '<image>,<class>' rows and/or '<wnid>,<index>' rows or a synset list "
                        "(default: labels.txt / labels.csv / LOC_synset_mapping.txt / synsets.txt in --images)")
    p.add_argument("--boxes", type=Path, default=None, help="folder of Pascal-VOC XML boxes (bbox metric)")
    p.add_argument("--methods", nargs="+", default=None,
                   help="attribution method keys (default: all registered methods)")
    p.add_argument("--tile", type=_positive_int, nargs="+", default=None,
                   help="tile size(s): degradation default 8 14, sensitivity-n default 8 (1 = pixels)")
    p.add_argument("--out", type=Path, required=True, help="results file (.jsonl), appended to and resumed")
    p.add_argument("--limit", type=_positive_int, default=None, help="only the first N images (sorted by path)")
    p.add_argument("--batch-size", type=_positive_int, default=64, help="images per forward pass")
    p.add_argument("--points", type=_positive_int, default=None,
                   help="degradation: measure each curve at N evenly spaced steps instead of after every tile")
    p.add_argument("--sets", type=_positive_int, default=100, help="sensitivity-n: random tile sets per n")
    p.add_argument("--n-count", type=_positive_int, default=16, help="sensitivity-n: number of log-spaced n")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-box-fraction", type=float, default=0.33, help="bbox: skip larger boxes")
    p.add_argument("--layer", default=None, help="beta-table: bottleneck layer (default: the network's)")
    p.add_argument("--beta-k", type=float, nargs="+", default=[0.01, 0.1, 1.0, 10.0, 100.0],
                   help="beta-table: β·k values (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="beta-table: optimisation steps")
    p.add_argument("--stats-images", default=None, help="beta-table: image folder for the feature statistics")
    p.add_argument("--stats-n", type=_positive_int, default=None, help="beta-table: samples for the statistics (default: IBA_STATS_SAMPLES or 1000)")
    p.add_argument("--readout", nargs="+", default=None, metavar="CKPT",
                   help="beta-table: Readout Bottleneck checkpoints, one per β (default: the shipped one, if any)")
    p.add_argument("--levels", nargs="+", default=None,
                   help="sanity: only these cascade levels (e.g. logits conv5_3 …); default: all")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--merge-only", action="store_true",
                   help="merge existing rank files into --out and print the table; evaluate nothing")
    p.set_defaults(func=cmd_evaluate)
    return p


def cmd_evaluate(args: argparse.Namespace) -> int:
    rank, world = res.dist_info()
    if args.merge_only:
        records = res.merge_results(args.out) if res.rank_files(args.out) else res.read_records(args.out)
        if not records:
            raise FileNotFoundError(f"No results in {args.out} or its rank files.")
        text, path = res.write_table(records, args.out)
        print(text)
        print(f"table saved to {path}", file=sys.stderr)
        return 0
    if args.images is None:
        raise ValueError("--images DIR is required (a folder of images, searched recursively).")
    from .metrics.dataset import list_items
    from .models import load_model

    methods = resolve_methods(args.methods) if args.metric != "beta-table" else {}
    weights = args.weights or ("random" if args.random_weights else "pretrained")
    device = args.device
    if world > 1 and device == "cuda" and "LOCAL_RANK" in os.environ:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"  # one GPU per rank under torchrun
    loaded = load_model(args.model, weights=weights, device=device)
    items = list_items(args.images, args.labels, loaded.class_index, args.limit)
    if not items:
        raise FileNotFoundError(f"No images (jpg, png, …) found below {args.images}.")
    if args.metric == "beta-table":
        unlabelled = sum(item.label is None for item in items)
        if unlabelled == len(items):
            raise ValueError(
                "beta-table needs labelled images: class folders named by index (e.g. 285/), WordNet-id folders "
                "with a wnid mapping file, or a labels.txt/labels.csv with '<image>,<class>' rows (see --labels)."
            )
        if unlabelled:
            print(f"note: {unlabelled} unlabelled image(s) are skipped", file=sys.stderr)
    if args.metric == "bbox" and args.boxes is None:
        raise ValueError("The bbox metric needs --boxes DIR (Pascal-VOC XML files named like the images).")
    options = EvalOptions(
        tiles=args.tile, points=args.points, batch_size=args.batch_size, sets=args.sets, n_count=args.n_count,
        seed=args.seed, boxes=args.boxes, max_box_fraction=args.max_box_fraction, layer=args.layer,
        beta_ks=args.beta_k, steps=args.steps, stats_images=args.stats_images, stats_n=args.stats_n,
        sanity_levels=args.levels, readouts=args.readout, progress=not args.no_progress,
    )
    if world > 1:
        res.done_marker(args.out, rank).unlink(missing_ok=True)
    written = run_evaluation(args.metric, loaded, items, methods, args.out, options, rank, world)
    print(f"{written} new result(s) written", file=sys.stderr)
    finish(args.out, rank, world)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (`python -m iba_core.cli_evaluate …`), until `evaluate` is wired into iba_core.cli."""
    parser = argparse.ArgumentParser(prog="python -m iba_core")
    add_evaluate_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    from .models import UnknownModelError, WeightsUnavailableError

    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, WeightsUnavailableError, UnknownModelError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
