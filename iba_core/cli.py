"""Command line: `python -m iba_core {models,stats,attribute} …`.

Every subcommand prints plain text or one JSON line, so results can be scripted.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from .images import ImageError
from .models import DEFAULT_MODEL, REGISTRY, UnknownModelError, WeightsUnavailableError

EXIT_USAGE, EXIT_FAILED = 2, 1


def _progress_bar(desc: str):
    """A tqdm bar driven by (done, total) callbacks; returns (callback, close).

    The bar appears on the first callback only, so loading cached statistics prints nothing.
    """
    from tqdm import tqdm

    bars: list = []

    def update(done: int, total: int) -> None:
        if not bars:
            bars.append(tqdm(total=total or None, desc=desc, unit="img", file=sys.stderr, dynamic_ncols=True))
        bar = bars[0]
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    def close() -> None:
        for bar in bars:
            bar.close()

    return update, close


def _load(args: argparse.Namespace):
    from .models import load_model

    weights = args.weights or ("random" if args.random_weights else "pretrained")
    return load_model(args.model, weights=weights, device=args.device)


def cmd_models(args: argparse.Namespace) -> int:
    from .models import weights_status

    rows = []
    for spec in REGISTRY.values():
        rows.append({
            "model": spec.key,
            "title": spec.title,
            "default_layer": spec.default_layer,
            "layers": list(spec.layers),
            "weights": weights_status(spec),
        })
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        print(f"{row['model']}: {row['title']}")
        print(f"  layers (default {row['default_layer']}): {' '.join(row['layers'])}")
        print(f"  {row['weights']}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from .stats import get_stats

    loaded = _load(args)
    layer = args.layer or loaded.spec.default_layer
    progress, close = _progress_bar(f"statistics {loaded.key}/{layer}")
    try:
        stats = get_stats(loaded, layer, images=args.images, n=args.n, progress=progress, refresh=args.refresh)
    finally:
        close()
    print(json.dumps({
        "model": loaded.key, "weights": loaded.weights_id, "layer": layer, "samples": stats.n,
        "skipped": stats.skipped, "source": stats.source, "rough": stats.is_rough,
        "shape": list(stats.mean.shape),
    }))
    if stats.is_rough:
        print(f"note: {stats.describe()}", file=sys.stderr)
    return 0


def cmd_attribute(args: argparse.Namespace) -> int:
    import numpy as np

    from .images import load_image
    from .per_sample import BottleneckSettings, PerSampleBottleneck
    from .stats import get_stats

    image = load_image(args.image)
    loaded = _load(args)
    layer = args.layer or loaded.spec.default_layer
    from .models import check_layer

    check_layer(loaded.spec, layer)
    target = None if args.target is None else loaded.class_index(args.target)
    cropped = loaded.preprocess.crop(image)
    x = loaded.preprocess.normalise(cropped)
    if args.method == "readout":
        from .readout import readout_attribute

        # The readout's bottleneck layer and statistics come from its checkpoint.
        result = readout_attribute(loaded, args.readout, x, target, batch=args.batch, seed=args.seed)
        layer, stats_samples = result.readout["layer"], None
    else:
        progress, close = _progress_bar(f"statistics {loaded.key}/{layer}")
        try:
            stats = get_stats(loaded, layer, images=args.stats_images, n=args.n, progress=progress)
        finally:
            close()
        settings = BottleneckSettings(
            beta_k=args.beta_k, steps=args.steps, batch=args.batch, lr=args.lr, sigma=args.sigma, seed=args.seed
        )
        result = PerSampleBottleneck.for_model(loaded, layer, stats, settings).attribute(x, target)
        stats_samples = stats.n
    if args.out:
        np.save(args.out, result.heatmap)
    if args.png:
        from .plots import overlay_image

        overlay_image(cropped, result.heatmap).save(args.png)
    print(json.dumps({
        "image": str(args.image),
        "method": args.method,
        "model": loaded.key,
        "layer": layer,
        "target": result.target,
        "class_name": loaded.categories[result.target],
        "p_without": round(result.p_without, 6),
        "p_with": round(result.p_with, 6),
        "total_bits": round(result.total_bits, 3),
        "beta_k": result.settings.beta_k,
        "stats_samples": stats_samples,
        "seconds": round(result.seconds, 3),
    }))
    return 0


def _add_model_args(p: argparse.ArgumentParser, layer: bool = True) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL, choices=list(REGISTRY), help="network (default: %(default)s)")
    if layer:
        p.add_argument("--layer", default=None, help="layer name (default: the network's paper default)")
    p.add_argument("--weights", default=None, help="local weights file (state dict)")
    p.add_argument("--random-weights", action="store_true", help="untrained weights (for structure/speed tests)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m iba_core",
        description="Information Bottleneck Attribution (Schulz et al., ICLR 2020) from the command line.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("models", help="list networks, layers and whether weights are available")
    p.add_argument("--json", action="store_true", help="one JSON line per network")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("stats", help="estimate and cache a layer's feature statistics")
    _add_model_args(p)
    p.add_argument("--images", default=None, help="image folder (recursive); default: offline sample photos")
    p.add_argument("--n", type=int, default=1000, help="number of samples (default: %(default)s)")
    p.add_argument("--refresh", action="store_true", help="recompute even if cached")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("attribute", help="Per-Sample Bottleneck heatmap for one image")
    p.add_argument("image", type=Path, help="image file (png, jpg, webp, bmp, tiff)")
    _add_model_args(p)
    p.add_argument("--method", choices=("per-sample", "readout"), default="per-sample",
                   help="Per-Sample Bottleneck (default) or a trained Readout Bottleneck")
    p.add_argument("--readout", default=None,
                   help="readout checkpoint (default: the one shipped for the network, if any)")
    p.add_argument("--beta-k", type=float, default=10.0, help="β·k, paper default 10 (β = 10/k)")
    p.add_argument("--target", default=None, help="class index or ImageNet class name (default: top-1)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--sigma", type=float, default=1.0, help="σ_s of the mask smoothing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats-images", default=None, help="image folder for the feature statistics")
    p.add_argument("--n", type=int, default=1000, help="samples for the feature statistics")
    p.add_argument("--out", type=Path, default=None, help="save the bits-per-pixel heatmap (.npy)")
    p.add_argument("--png", type=Path, default=None, help="save an overlay image (.png)")
    p.set_defaults(func=cmd_attribute)

    # Capabilities built on the core register their own subcommands.
    from .cli_compare import add_compare_parser
    from .cli_evaluate import add_evaluate_parser
    from .cli_readout import add_readout_parser

    add_compare_parser(sub)
    add_evaluate_parser(sub)
    add_readout_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors print one line to stderr and exit non-zero, no traceback."""
    return run_command(build_parser().parse_args(argv))


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed subcommand; user errors become one line on stderr (shared by every CLI module)."""
    try:
        return args.func(args)
    except (ImageError, WeightsUnavailableError, UnknownModelError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
