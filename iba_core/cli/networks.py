"""`python -m iba_core models`: the networks, their layers, and whether their weights are here."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("models", help="list networks, layers and whether weights are available")
    p.add_argument("--json", action="store_true", help="one JSON line per network")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..networks import REGISTRY, weights_status
    from .common import print_json

    rows = [
        {"model": spec.key, "title": spec.title, "default_layer": spec.default_layer,
         "layers": list(spec.layers), "weights": weights_status(spec)}
        for spec in REGISTRY.values()
    ]
    for row in rows:
        if args.json:
            print_json(row)
            continue
        print(f"{row['model']}: {row['title']}")
        print(f"  layers (default {row['default_layer']}): {' '.join(row['layers'])}")
        print(f"  {row['weights']}")
    return 0
