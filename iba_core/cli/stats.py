"""`python -m iba_core stats`: estimate and cache a layer's feature statistics (or every layer's, in one pass)."""
from __future__ import annotations

import argparse
import sys

from ..feature_stats import PHOTO_SAMPLES
from ..errors import UserError, check_range
from ..settings import MAX_SAMPLES, RECOMMENDED_SAMPLES
from . import files
from .common import add_network_args


def sample_count(text: str) -> int:
    """argparse type of --n: a whole number of samples in 1 … MAX_SAMPLES (refused before anything loads)."""
    try:
        number = int(text)
    except ValueError:  # int's own refusal of a text that is no whole number
        raise argparse.ArgumentTypeError(f"the number of samples must be a whole number (you gave {text[:40]!r})"
                                         ) from None
    try:
        return int(check_range("the number of samples", number, 1, MAX_SAMPLES, integer=True))
    except UserError as err:
        raise argparse.ArgumentTypeError(err.message) from None


#: --n's help, shared with `attribute`.
STATS_N_HELP = (f"samples for the feature statistics (default: {RECOMMENDED_SAMPLES} from an image folder or where "
                f"statistics ship, else {PHOTO_SAMPLES} crops of the offline photos)")


def add_parser(sub) -> None:
    p = sub.add_parser("stats", help="estimate and cache a layer's feature statistics")
    add_network_args(p)
    p.add_argument("--images", default=None,
                   help="image folder (recursive); default: a model card's stats_images, else offline sample photos")
    p.add_argument("--n", type=sample_count, default=None, help=STATS_N_HELP)
    p.add_argument("--refresh", action="store_true", help="recompute even if cached")
    p.add_argument("--all-layers", action="store_true",
                   help="estimate every layer of the network in one pass (slow and memory-hungry on large networks)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files.image_folder(args.images, "--images")  # before the network loads
    files.weights_file(args)
    from ..feature_stats import get_all_stats, get_stats
    from .common import load_from_args, print_json, progress_bar

    network = load_from_args(args)
    layer = network.spec.check_layer(args.layer or network.spec.default_layer)
    images = args.images or network.spec.stats_images
    progress, close = progress_bar(f"statistics {network.key}/{'all layers' if args.all_layers else layer}")
    try:
        if args.all_layers:
            every = get_all_stats(network, images=images, n=args.n, progress=progress, refresh=args.refresh)
            stats = every[layer]
        else:
            every = None
            stats = get_stats(network, layer, images=images, n=args.n, progress=progress, refresh=args.refresh)
    finally:
        close()
    print_json({
        "model": network.key, "weights": network.weights_id, "layer": layer, "samples": stats.n,
        "samples_asked": stats.requested,
        "skipped": stats.skipped, "source": stats.source, "rough": stats.is_rough, "shape": list(stats.mean.shape),
        **({"layers": sorted(every)} if every else {}),
    })
    if stats.is_rough or stats.shortfall:
        print(f"note: {stats.describe()}", file=sys.stderr)
    return 0
