"""`python -m iba_core compare IMAGE --model M [--layer L] [--methods all|KEY …] [--target N|NAME] --out DIR`.

Writes every map as `<key>.npy` (float32, H×W), `grid.png` (all maps side by side) and `summary.json`
(image, network, class, and per method: name, seconds, value range, extras such as the IBA's total bits).
A tqdm progress bar runs on stderr. A failing method is reported and skipped; the exit status is then 1.

"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from ..errors import CLI_LOG_PLACE, UserError, user_message
from . import files
from .common import (ALL_METHODS, COIBA_HELP, EXIT_FAILED, EXIT_OK, add_layer_range_arg, add_methods_arg,
                     add_network_args, method_keys_arg, names_all)


def add_parser(sub) -> None:
    from ..methods import method_keys

    p = sub.add_parser(
        "compare",
        help="run attribution baselines and the Per-Sample Bottleneck on one image",
        description="Run attribution methods on one image; write <key>.npy maps, grid.png and summary.json.",
    )
    p.add_argument("image", type=Path, help="image file (png, jpg, webp, bmp, tiff)")
    add_network_args(p)
    add_methods_arg(p, "'all' or keys, from: " + ", ".join(method_keys()) + " (default: all; " + COIBA_HELP
                    + ", set by --layer-range)", default=[ALL_METHODS])
    add_layer_range_arg(p)
    p.add_argument("--target", default=None, help="class index or class name (default: top-1)")
    p.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = method_settings(args)
    files.image_file(args.image)
    files.weights_file(args)
    out = files.output_folder(args.out)  # made after the cheap checks: a typo leaves no empty folder
    from ..band_images import photo_or_path
    from ..budget import Cost
    from ..methods import resolve_methods
    from .common import load_from_args, runnable, say_cost

    image = photo_or_path(args.image)  # a damaged photo is refused before the network loads
    network = load_from_args(args)
    image = network.preprocess.load(image)  # for its channels: the photo (in gray for one), or a .npy / TIFF
    cropped = network.preprocess.crop(image)
    x = network.preprocess.normalise(cropped)
    target = network.top_k(x, 1)[0][0] if args.target is None else network.class_index(args.target)
    methods = resolve_methods(chosen_methods(args), settings)
    if chosen_methods(args) == ALL_METHODS:  # those that can run here; the others named with their reason
        methods = runnable(methods, network)
    say_cost(Cost.of_methods([m for m in methods if m.available_for(network) is None], network, *x.shape[-2:]))
    maps, failures = run_methods(network, x, target, methods, settings)
    summary = write_results(out, maps, failures, network, cropped, target, image_name=str(args.image))
    print(json.dumps({"out": str(out), "target": target, "class_name": summary["class_name"],
                      "methods": [m.key for m in maps], "failed": sorted(failures)}))
    return EXIT_FAILED if failures else EXIT_OK


def method_settings(args: argparse.Namespace) -> dict[str, dict]:
    """Per-method settings from --layer and --layer-range; a layer typo or an unknown method key fails before any
    slow work."""
    from ..methods import get_method, method_keys, resolve_methods
    from ..networks import REGISTRY, get_spec
    from .common import check_layer_range, layer_settings, refuse_unused_range

    if args.layer is not None and args.model in REGISTRY:  # derived specs (torchvision:NAME, cards): once loaded
        get_spec(args.model).check_layer(args.layer)
    check_layer_range(args)
    # --layer goes to every method that places a bottleneck on one layer, --layer-range to CoIBA
    settings = {key: layer_settings(get_method(key), args.layer, args.layer_range) for key in method_keys()}
    settings = {key: value for key, value in settings.items() if value}
    refuse_unused_range(args.layer_range, resolve_methods(chosen_methods(args), settings))
    return settings


def chosen_methods(args: argparse.Namespace) -> str | list[str]:
    """What --methods names, as `compare` takes it: "all" (those that run on the network), else the keys."""
    keys = method_keys_arg(args.methods)
    return ALL_METHODS if names_all(keys) else keys


def run_methods(network, x, target: int, methods_arg: str | list,
                settings: dict[str, dict]) -> tuple[list, dict[str, str]]:
    """(maps, failures by key) of the methods --methods names, with a progress bar on stderr; a failing
    method is reported and skipped."""
    from tqdm import tqdm

    from ..compare import compare
    from ..methods import resolve_methods

    methods = methods_arg if methods_arg == ALL_METHODS else resolve_methods(methods_arg, settings)
    failures: dict[str, str] = {}
    # The total comes from compare() itself: "all" runs only the methods that can run on this network, a count
    # known once it has looked (never len("all")).
    bar = tqdm(total=None, desc="compare", unit="method", file=sys.stderr, dynamic_ncols=True)

    def progress(done: int, total: int, label: str) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        bar.set_postfix_str(label, refresh=True)

    def on_error(key: str, err: BaseException) -> None:
        # a user's mistake as its sentence; a bug said to be one, its traceback on stderr (as `run_command` does)
        if not isinstance(err, UserError):
            traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
        failures[key] = user_message(err, "cli", CLI_LOG_PLACE)
        tqdm.write(f"warning: {key} failed: {failures[key]}", file=sys.stderr)

    try:
        maps = compare(network, x, target, methods, settings=settings, progress=progress, on_error=on_error)
    finally:
        bar.close()
    return maps, failures


def write_results(out: Path, maps: list, failures: dict[str, str], network, cropped, target: int, *,
                  image_name: str) -> dict:
    """Write `<key>.npy` per map, grid.png and summary.json into `out` (each file atomically); return the summary."""
    import numpy as np

    from ..jsonable import jsonable
    from ..render import grid_png

    for amap in maps:
        files.save_npy(out / f"{amap.key}.npy", amap.values.astype(np.float32))
    class_name = network.class_name(target)
    network_title = network.spec.title + (" — random weights" if network.weights_id == "random" else "")
    files.write_bytes(out / "grid.png",
                      grid_png(maps, cropped, title=f"{network_title} — class {target} ({class_name})"))
    summary = {
        "image": image_name,
        "model": network.key,
        "weights": network.weights_id,
        "target": target,
        "class_name": class_name,
        "methods": [
            {
                "key": m.key, "name": m.name, "signed": m.signed, "unit": m.unit,
                "seconds": round(m.seconds, 4),
                "min": float(m.values.min()), "max": float(m.values.max()), "sum": float(m.values.sum()),
                "file": f"{m.key}.npy", "extra": m.extra,
            }
            for m in maps
        ],
        "failed": failures,
        "grid": "grid.png",
    }
    files.write_text(out / "summary.json", json.dumps(jsonable(summary), indent=2))
    return summary
