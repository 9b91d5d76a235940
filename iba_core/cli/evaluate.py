"""`python -m iba_core evaluate METRIC …`, METRIC one of the metric registry's (`metrics.registry.names()`).

Runs one evaluation metric (the paper's, or the field's: insertion, deletion, ROAD, the pointing game) over an
image folder for several attribution methods, appending one JSON line per finished (image, method,
setting) to `--out` (flushed at once). A rerun with the same `--out` skips every key already there, so
an interrupted evaluation resumes where it stopped. At the end a paper-style table is printed and saved
next to the results (results.table.md).

Under torchrun (RANK / WORLD_SIZE set) the images are sharded across ranks: rank r takes every
WORLD_SIZE-th image, writes `results.rank{r}.jsonl` and, when done, `results.rank{r}.done`. With a
torch.distributed rendezvous (torchrun's MASTER_ADDR) the ranks meet at a barrier and rank 0 merges
the rank files into `--out` and writes the table; without one, whichever rank finishes last does.
`--merge-only` merges and tabulates existing rank files by hand.

The loop lives in iba_core.metrics.runner; this module only parses and prints.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import MissingFileError, UserError
from .. import ranks
from ..metrics import results as res
from ..metrics.bbox import LARGEST_BOX_SHARE
from ..metrics.beta_table import PAPER_BETA_K
from ..metrics import registry
from ..metrics.runner import EvalOptions, finish, run_evaluation
# insertion / deletion and pointing (issue #29)
from ..metrics.insertion_deletion import protocol_from
from ..precision import PRECISIONS
from . import files
from .common import (COIBA_HELP, add_layer_range_arg, add_methods_arg, add_network_args, add_yardstick_args,
                     method_keys_arg, names_all)
from .common import positive_int as _positive_int


# --------------------------------------------------------------------------------------------
# Argument parsing.


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="run an evaluation metric (the paper's and the field's: see the choices) over an image folder",
        description=(
            "Evaluate attribution methods with the metrics of Schulz et al. (ICLR 2020: degradation, bbox, "
            "sensitivity-n, sanity, beta-table) or the field's yardsticks (insertion and deletion as in RISE, "
            "Petsiuk et al. 2018; road, Rong et al. 2022; pointing: the pointing game, energy-based pointing and "
            "InputIBA's effective heat ratio). Options name the metrics they serve. Results are appended "
            "to --out as JSON lines (one per image, method and setting); rerunning with the same --out resumes. "
            "A paper-style table is printed and saved next to --out (NAME.table.md)."
        ),
    )
    p.add_argument("metric", choices=list(registry.names()),
                   help="; ".join(f"{m.name}: {m.measures}" for m in registry.metrics()))
    add_network_args(p)
    p.add_argument("--images", type=Path, default=None, help="image folder (recursive)")
    p.add_argument("--labels", type=Path, default=None,
                   help="label file: '<image>,<class>' rows and/or '<wnid>,<index>' rows or a synset list "
                        "(default: labels.txt / labels.csv / LOC_synset_mapping.txt / synsets.txt in --images)")
    p.add_argument("--boxes", type=Path, default=None, help="folder of Pascal-VOC XML boxes (bbox and pointing)")
    add_methods_arg(p, f"attribution method keys, or 'all' (default: all registered methods that run on the network; "
                    f"{COIBA_HELP}, set by --layer-range)")
    add_layer_range_arg(p)
    p.add_argument("--tile", type=_positive_int, nargs="+", default=None,
                   help="tile size(s): degradation default 8 14, sensitivity-n default 8 (1 = pixels)")
    p.add_argument("--out", type=Path, required=True, help="results file (.jsonl), appended to and resumed")
    p.add_argument("--limit", type=_positive_int, default=None, help="only the first N images (sorted by path)")
    # 64: larger batches measured no faster, on 2 CPU cores nor on an H100 (docs/performance.md)
    p.add_argument("--batch-size", type=_positive_int, default=64, help="images per forward pass")
    p.add_argument("--points", type=_positive_int, default=None,
                   help="degradation: measure each curve at N evenly spaced steps instead of after every tile")
    p.add_argument("--sets", type=_positive_int, default=100, help="sensitivity-n: random tile sets per n")
    p.add_argument("--n-count", type=_positive_int, default=16, help="sensitivity-n: number of log-spaced n")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-box-fraction", type=float, default=LARGEST_BOX_SHARE, help="bbox: skip larger boxes")
    p.add_argument("--beta-k", type=float, nargs="+", default=list(PAPER_BETA_K),
                   help="beta-table: β·k values (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="beta-table: optimisation steps")
    p.add_argument("--stats-images", default=None, help="beta-table: image folder for the feature statistics")
    p.add_argument("--stats-n", type=_positive_int, default=None, help="beta-table: samples for the statistics (default: IBA_STATS_SAMPLES or 1000)")
    p.add_argument("--readout", nargs="+", default=None, metavar="CKPT",
                   help="beta-table: Readout Bottleneck checkpoints, one per β (default: the shipped one, if any)")
    p.add_argument("--levels", nargs="+", default=None,
                   help="sanity: only these cascade levels (e.g. logits conv5_3 …); default: all")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="precision of the metric's forward passes (degradation, sensitivity-n, insertion, deletion, "
                   "road); auto (default): a lower precision only where the hardware has it and one measurement shows it is faster")
    add_yardstick_args(p)  # ROAD, insertion / deletion and pointing (issue #29): one copy, cli/common.py
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--merge-only", action="store_true",
                   help="merge existing rank files into --out and print the table; evaluate nothing")
    p.set_defaults(func=run)


def check_files(args: argparse.Namespace) -> None:
    """Inputs readable and the results file writable, before the network loads (iba_core.cli.files)."""
    files.image_folder(args.images, "--images")
    files.readable_file(args.labels, "--labels")
    files.readable_folder(args.boxes, "--boxes")
    files.weights_file(args)
    for ckpt in args.readout or ():
        files.readable_file(ckpt, "--readout")
    files.image_folder(args.stats_images, "--stats-images")
    files.output_file(args.out)


def method_list(args: argparse.Namespace) -> list:
    """The methods --methods names (None: all), CoIBA's with --layer-range; a --layer-range no method takes, or
    one naming a layer the (registered) network lacks, fails here in words, before the network loads."""
    from ..methods import get_method, method_keys, resolve_methods
    from .common import check_layer_range, layer_settings, refuse_unused_range

    check_layer_range(args)
    settings = {key: layer_settings(get_method(key), None, args.layer_range) for key in method_keys()}
    keys = method_keys_arg(args.methods)
    methods = resolve_methods(None if names_all(keys) else keys, {key: value for key, value in settings.items()
                                                                  if value})
    refuse_unused_range(args.layer_range, methods)
    return methods


def say_evaluation_cost(network, metric, methods: dict, images: int, options: EvalOptions) -> None:
    """The maps' network passes and, for a metric measured per map, its own, said before a long evaluation."""
    from ..budget import Cost
    from .common import say_cost

    crop, _ = registry.crop_of(network) or (224, 224)
    per_map = metric.forward_passes(crop * crop, options)
    say_cost(Cost.of_methods(methods.values(), network, crop, crop, repeat=images)
             + Cost.part(metric.title, images * len(methods) * per_map))


def run(args: argparse.Namespace) -> int:
    rank, world = ranks.rank_and_world()
    if args.merge_only:
        records = res.merge_results(args.out) if res.rank_files(args.out) else res.read_records(args.out)
        if not records:
            raise MissingFileError(f"No results in {args.out} or its rank files.")
        text, path = res.write_table(records, args.out)
        print(text)
        print(f"table saved to {path}", file=sys.stderr)
        return 0
    if args.images is None:
        raise UserError("--images DIR is required (a folder of images, searched recursively).")
    metric = registry.get(args.metric)
    if metric.needs_boxes and args.boxes is None:  # bbox, pointing: before the network loads
        raise UserError(f"{metric.title} needs --boxes DIR (Pascal-VOC XML files named like the images).")
    if args.tolerance < 0:
        raise UserError(f"--tolerance must be 0 pixels or more (not {args.tolerance}).")
    protocol = protocol_from(args.protocol, step=args.step, deletion_baseline=args.deletion_baseline,
                             blur_kernel=args.blur_kernel, blur_sigma=args.blur_sigma)
    options = EvalOptions(
        tiles=args.tile, points=args.points, batch_size=args.batch_size, sets=args.sets, n_count=args.n_count,
        seed=args.seed, boxes=args.boxes, max_box_fraction=args.max_box_fraction, layer=args.layer,
        beta_ks=args.beta_k, steps=args.steps, stats_images=args.stats_images, stats_n=args.stats_n,
        sanity_levels=args.levels, readouts=args.readout, progress=not args.no_progress, precision=args.precision,
        road_removed=args.removed, road_noise=args.noise, protocol=protocol, tolerance=args.tolerance,
    )
    metric.check(options)  # the metric's own refusals (ROAD's percentages and noise, …), before any slow work
    check_files(args)
    from ..image_folders import list_items
    from .common import load_from_args, runnable

    methods = {} if args.metric == "beta-table" else {m.key: m for m in method_list(args)}
    network = load_from_args(args, device=ranks.rank_device(args.device))  # one GPU per rank under torchrun
    if args.methods is None or names_all(method_keys_arg(args.methods)):  # every registered method that can run here
        methods = {m.key: m for m in runnable(list(methods.values()), network)}  # the others named, with why
    items = list_items(args.images, args.labels, network.class_index, args.limit, categories=network.categories)
    if not items:
        raise MissingFileError(f"No images (jpg, png, …) found below {args.images}.")
    if args.metric == "beta-table":
        unlabelled = sum(item.label is None for item in items)
        if unlabelled == len(items):
            raise UserError(
                "beta-table needs labelled images: class folders named by index (e.g. 285/), WordNet-id folders "
                "with a wnid mapping file, or a labels.txt/labels.csv with '<image>,<class>' rows (see --labels)."
            )
        if unlabelled:
            print(f"note: {unlabelled} unlabelled image(s) are skipped", file=sys.stderr)
    say_evaluation_cost(network, metric, methods, len(items), options)
    if world > 1:
        res.done_marker(args.out, rank).unlink(missing_ok=True)
    written = run_evaluation(args.metric, network, items, methods, args.out, options, rank, world)
    print(f"{written} new result(s) written", file=sys.stderr)
    finish(args.out, rank, world)
    return 0
