"""`python -m iba_core attribute FOLDER --out RUN_DIR`: every image of a folder (or of a .txt list) with one or more
methods, into a run folder (`iba_core.runs`: results.parquet, the maps, run.json); one JSON line at the end.

With a CLIP network, `--prompt A --prompt B` explains text prompts instead of classes: a row per image × method ×
prompt, with a `prompt` column; a rerun with another prompt adds its rows to the run.

Rerunning the command resumes (done pairs are skipped, damaged parts moved aside and their rows done again); adding
a method computes only it; adding a metric (--metrics) measures it for the rows already there, on their stored maps; a run folder made with another network, weights, layer or settings is refused; two
commands into one run folder share its images (each image once). Under torchrun each rank takes every WORLD_SIZE-th
image and rank 0 writes the table once all are done. The loop lives in iba_core.runs.folder; this module parses and
prints.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import UserError
from . import files
from .common import add_methods_arg, add_yardstick_args, method_keys_arg, names_all, positive_int


def add_folder_args(p: argparse.ArgumentParser) -> None:
    """The options of a folder run (on `attribute`'s parser)."""
    from ..metrics.yardsticks import YARDSTICKS
    from ..runs.run_settings import BATCH_IMAGES

    g = p.add_argument_group("a folder of images (IMAGE is a folder or a .txt list of images; --out RUN_DIR)")
    add_methods_arg(g, "attribution method keys, or 'all' (default: the Per-Sample Bottleneck, iba_10 at --beta-k "
                    "10; --method readout: the Readout; --method coiba: CoIBA over --layer-range); coiba takes "
                    "--layer-range")
    g.add_argument("--labels", type=Path, default=None,
                   help="label file as `evaluate` reads it: '<image>,<class>' rows and/or '<wnid>,<index>' rows or a "
                   "synset list (default: labels.txt / labels.csv / LOC_synset_mapping.txt / synsets.txt in the "
                   "folder; else class folders; else the network's top-1)")
    g.add_argument("--boxes", type=Path, default=None,
                   help="folder of Pascal-VOC XML boxes named like the images: adds box_share")
    g.add_argument("--limit", type=positive_int, default=None, help="only the first N images (sorted by path)")
    g.add_argument("--batch-images", type=positive_int, default=BATCH_IMAGES,
                   help="images per batch (one network pass and one batched Per-Sample fit each; "
                   "default %(default)s)")
    g.add_argument("--retry-errors", action="store_true",
                   help="try again the images that have an error row (a rerun skips them otherwise)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--metrics", nargs="+", default=None, choices=YARDSTICKS, metavar="METRIC",
                   help=f"the field's metrics per map, as columns of the table ({', '.join(YARDSTICKS)}; pointing "
                   "needs --boxes): each costs forward passes per image and method (insertion or deletion: one per "
                   "step, ROAD: two per percentage); none by default")
    add_yardstick_args(p)


def is_folder_source(path: Path) -> bool:
    """Whether `attribute`'s argument asks for a folder run: a folder, or a .txt list of images."""
    from ..runs.image_list import LIST_SUFFIX

    path = Path(path).expanduser()
    return path.is_dir() or path.suffix.lower() == LIST_SUFFIX


def refuse_folder_options(args: argparse.Namespace) -> None:
    """For one image: a UserError naming the folder-run options given (they would be ignored)."""
    from ..runs.run_settings import BATCH_IMAGES

    given = [flag for flag, value in (("--methods", args.methods), ("--labels", args.labels), ("--boxes", args.boxes),
                                      ("--limit", args.limit), ("--retry-errors", args.retry_errors or None),
                                      ("--batch-images", None if args.batch_images == BATCH_IMAGES else 1),
                                      ("--metrics", args.metrics))
             if value is not None]
    if given:
        raise UserError(f"{', '.join(given)} apply to a folder run, but {args.image} is one image file.",
                        cli_hint="Give a folder (or a .txt list of images) and --out RUN_DIR, or use `compare` for "
                        "several methods on one image.")


def check_files(args: argparse.Namespace) -> None:
    """Inputs readable and the run folder writable, before the network loads (iba_core.cli.files)."""
    if args.out is None:
        raise UserError("A folder run needs a run folder for its table and maps.",
                        cli_hint="Give --out RUN_DIR (created if missing; an existing run there is resumed).")
    if args.png is not None:
        raise UserError("--png draws the overlay of one image; a folder run keeps every map in its run folder.",
                        cli_hint="Leave out --png; read the maps with iba_core.open_run(RUN_DIR).heatmap(row).")
    image = Path(args.image).expanduser()
    if image.is_dir():
        files.readable_folder(image, "image folder", "Image folder")
    else:
        files.readable_file(image, "image list")
    files.readable_file(args.labels, "--labels")
    files.readable_folder(args.boxes, "--boxes")
    files.weights_file(args)
    files.readable_file(args.readout, "--readout")
    files.image_folder(args.stats_images, "--stats-images")
    files.output_folder(args.out, "--out")


def per_sample_at(key: str, settings_for) -> object:
    """The Per-Sample method a key like "iba_0_1" names (β·k 0.1, with the command's bottleneck settings), or the
    key unchanged (an unknown key is refused by `resolve_methods` with the known ones listed)."""
    from ..methods import PER_SAMPLE_KEY
    from ..methods.bottlenecks import PerSampleIBA

    match = PER_SAMPLE_KEY.match(key)
    if match is None:
        return key
    return PerSampleIBA(float(match.group(1).replace("_", ".")), **settings_for(PerSampleIBA()))


def method_list(args: argparse.Namespace) -> list:
    """The methods to run, with the command's Per-Sample settings (--layer, --steps, …) and --readout; unknown keys
    and out-of-range settings fail here, before the network loads."""
    from ..methods import PRESETS, BottleneckMethod, get_method, method_keys, resolve_methods
    from ..methods.bottlenecks import PerSampleIBA

    from .common import layer_settings, refuse_unused_range

    # the bottleneck's options go to the methods that place a bottleneck on a layer (--layer to a one-layer one,
    # --layer-range to CoIBA), --readout to the Readout; an option not given leaves the method's own default
    bottleneck = {"steps": args.steps, "batch": args.batch, "lr": args.lr, "sigma": args.sigma,
                  "seed": args.seed, "read_point": args.read_point, "inactive_threshold": args.inactive_threshold,
                  "precision": args.precision, "stats_samples": args.n,
                  "placement": getattr(args, "placement", None)}  # CoIBA's, to the methods that take it

    def settings_for(method) -> dict:
        defaults = method.default_settings()
        if "beta_k" in defaults:  # a bottleneck (M2IB's needs no statistics, but takes the same options)
            return {**{k: v for k, v in bottleneck.items() if k in defaults and v is not None},
                    **layer_settings(method, args.layer, args.layer_range)}
        return {"checkpoint": args.readout} if "checkpoint" in defaults and args.readout else {}

    if args.methods is None:
        if args.method == "readout":
            keys = ["readout"]
        elif args.method in ("coiba", "m2ib"):  # the authors' presets; β·k from --beta-k where given
            preset = get_method(args.method)
            given = {"beta_k": args.beta_k} if getattr(args, "beta_k", None) is not None else {}
            keys = [preset.with_settings(**given, **settings_for(preset))]
        else:  # the paper's default, β·k from --beta-k (key iba_10 at the default 10)
            # --beta-k left out (None): the paper's 10 (the head's default, `heads.default_beta_k`, needs the network)
            from ..bottleneck import DEFAULT_BETA_K

            beta_k = DEFAULT_BETA_K if getattr(args, "beta_k", None) is None else args.beta_k
            keys = [PerSampleIBA(beta_k, **settings_for(PerSampleIBA()))]
    else:
        keys = method_keys_arg(args.methods)
        if names_all(keys):
            keys = method_keys()
    known = {*method_keys(), *PRESETS}  # the registry's keys and its presets beside it (m2ib)
    keys = [per_sample_at(k, settings_for) if isinstance(k, str) and k not in known else k for k in keys]
    settings = {k: settings_for(get_method(k)) for k in keys if isinstance(k, str) and k in known}
    methods = resolve_methods(keys, settings)
    refuse_unused_range(args.layer_range, methods)
    if bottleneck["placement"] is not None and not any("placement" in m.default_settings() for m in methods):
        raise UserError("--placement places CoIBA's bottlenecks, but none of the chosen methods is CoIBA.",
                        cli_hint="Add coiba to --methods, or leave out --placement.")
    for method in methods:
        if isinstance(method, BottleneckMethod):
            method.settings_object()  # the ranges, checked now
    return methods


def folder_prompts(args: argparse.Namespace) -> tuple[str, ...]:
    """The text prompts a folder run explains (`--prompt`, given once per prompt), checked before the network loads:
    a UserError for --labels with them (labels name classes)."""
    prompts = tuple(getattr(args, "prompt", None) or ())
    if prompts and args.labels is not None:
        raise UserError("--labels names the images' classes, but this run explains text prompts.",
                        cli_hint="Leave out --labels (or --prompt to explain classes).")
    return prompts


def check_folder_options(args: argparse.Namespace) -> list:
    """The run's methods, with every option checked before the network loads (files, boxes a metric needs, the
    yardsticks' values)."""
    from ..metrics import registry
    from .common import yardstick_options

    folder_prompts(args)
    check_files(args)
    boxed = [registry.get(m) for m in args.metrics or () if registry.get(m).needs_boxes]
    if boxed and args.boxes is None:  # the pointing game, and any other metric that scores against boxes
        raise UserError(f"{boxed[0].title} needs the objects' boxes.",
                        cli_hint="Give --boxes DIR (Pascal-VOC XML files named like the images), or leave out "
                        f"{boxed[0].name}.")
    yardstick_options(args)  # its values checked before the network loads
    return method_list(args)


def folder_settings(args: argparse.Namespace, network, methods: list) -> tuple[list, object, list, object]:
    """(the methods as they run on `network`, the folder's root, its items, the `runs.run_settings.FolderSettings`): the
    one settings object of a folder run, as the Dataset page builds it too."""
    from ..runs import FolderSettings, list_images
    from .common import runnable, yardstick_options

    if names_all(method_keys_arg(args.methods)):
        methods = runnable(methods, network)  # those that can run here; the others named with their reason
    if args.methods is None and args.method == "per-sample" and getattr(args, "beta_k", None) is None:
        from ..heads import default_beta_k

        # --beta-k left out: the network's head decides (M2IB's 0.1 for a CLIP model, else the paper's 10)
        methods = [m.with_settings(beta_k=default_beta_k(network)) for m in methods]
    prompts = folder_prompts(args)
    target = None if args.target is None else network.class_index(args.target)
    if prompts:  # folder labels name classes, not prompts: the rows keep no label
        root, items = list_images(args.image, limit=args.limit)
        items = [replace(item, label=None) for item in items]
    else:
        root, items = list_images(args.image, args.labels, network.class_index, args.limit, network.categories)
    settings = FolderSettings(target=target, boxes=args.boxes, stats_images=args.stats_images,
                              batch_images=args.batch_images, retry_errors=args.retry_errors,
                              metrics=tuple(args.metrics or ()), yardsticks=yardstick_options(args),
                              prompts=prompts)
    return methods, root, items, settings


def print_notes(summary, out: Path) -> None:
    """What the user should know about the rows: examples of errors, where a bug's traceback is, damaged parts."""
    from ..runs.bug_log import ERROR_LOG, LOG_PLACE

    for example in summary.error_examples:
        print(f"note: {example}", file=sys.stderr)
    if any(LOG_PLACE in example for example in summary.error_examples):  # a bug: where its traceback is, in full
        print(f"note: the tracebacks of rows a bug failed are in {out / ERROR_LOG}", file=sys.stderr)
    for part in summary.damaged:
        print(f"note: the damaged part {part} was moved to {out / 'damaged'}; its rows were done again",
              file=sys.stderr)
    for warning in summary.box_warnings:  # a bad box file, by name: its image is scored without it
        print(f"warning: {warning}", file=sys.stderr)
    if summary.box_skipped:
        counts = ", ".join(f"{reason} ({count})" for reason, count in sorted(summary.box_skipped.items()))
        print(f"note: {sum(summary.box_skipped.values())} image(s) scored without a box (no pointing scores, no "
              f"box_share): {counts}; each row's box_skipped column says why", file=sys.stderr)
    if summary.metric_failures:
        print(f"note: a metric failed on {summary.metric_failures} map(s): the maps are kept, the metric's columns "
              "left blank (each row's metric_errors says why); a rerun measures it again", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from .. import ranks
    from ..runs import finish_run, run_folder
    from ..runs.store import TABLE_FILE
    from .common import load_from_args, print_json, progress_bar, say_cost

    rank, world = ranks.rank_and_world()
    methods = check_folder_options(args)
    network = load_from_args(args, device=ranks.rank_device(args.device))  # one GPU per rank under torchrun
    methods, root, items, settings = folder_settings(args, network, methods)
    from ..app.folder_job import image_cost

    say_cost(image_cost(network, methods, settings.metrics, settings.prompts).times(len(items)))
    progress, close = (None, lambda: None) if args.no_progress else progress_bar(
        f"attribute {Path(args.image).name}" + (f" rank {rank}/{world}" if world > 1 else ""))
    try:
        summary = run_folder(network, items, methods, args.out, settings, root=root, rank=rank, world=world,
                             progress=progress)
    finally:
        close()
    print_notes(summary, Path(args.out))
    table = finish_run(args.out, rank, world)
    record = {
        "run": str(args.out), "model": network.key, "weights": network.weights_id,
        "methods": [m.key for m in methods], "metrics": list(settings.metrics), "images": len(items),
        **({"prompts": list(settings.prompts)} if settings.prompts else {}),
        "rank": rank, "world_size": world, "rank_images": summary.images, "already_done": summary.skipped,
        "new_rows": summary.rows, "new_errors": summary.errors, "damaged_parts_redone": len(summary.damaged),
        "rows_given_metrics": summary.measured,
        # only when something was skipped or failed (the usual line stays as it was)
        **({"boxes_skipped": dict(sorted(summary.box_skipped.items()))} if summary.box_skipped else {}),
        **({"metric_failures": summary.metric_failures} if summary.metric_failures else {}),
    }
    if table is not None:
        record.update(rows=len(table), errors=int(table["error"].notna().sum()),
                      table=str(Path(args.out) / TABLE_FILE))
    print_json(record)
    return 0
