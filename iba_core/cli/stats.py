"""`python -m iba_core stats`: estimate and cache a layer's feature statistics."""
from __future__ import annotations

import argparse
import sys

from ..settings import RECOMMENDED_SAMPLES
from .common import add_network_args


def add_parser(sub) -> None:
    p = sub.add_parser("stats", help="estimate and cache a layer's feature statistics")
    add_network_args(p)
    p.add_argument("--images", default=None,
                   help="image folder (recursive); default: a model card's stats_images, else offline sample photos")
    p.add_argument("--n", type=int, default=RECOMMENDED_SAMPLES, help="number of samples (default: %(default)s)")
    p.add_argument("--refresh", action="store_true", help="recompute even if cached")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..stats import get_stats
    from .common import load_from_args, print_json, progress_bar

    network = load_from_args(args)
    layer = network.spec.check_layer(args.layer or network.spec.default_layer)
    progress, close = progress_bar(f"statistics {network.key}/{layer}")
    try:
        stats = get_stats(network, layer, images=args.images or network.spec.stats_images, n=args.n,
                          progress=progress, refresh=args.refresh)
    finally:
        close()
    print_json({
        "model": network.key, "weights": network.weights_id, "layer": layer, "samples": stats.n,
        "skipped": stats.skipped, "source": stats.source, "rough": stats.is_rough, "shape": list(stats.mean.shape),
    })
    if stats.is_rough:
        print(f"note: {stats.describe()}", file=sys.stderr)
    return 0
