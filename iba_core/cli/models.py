"""`python -m iba_core models`: the networks, their layers, and whether their weights are here.

With `--model MODEL` (a registered key, torchvision:NAME, timm:NAME, hf:ORG/NAME, a model folder or a model
card), that one network is loaded and every layer is listed with its output shape (one dry forward pass), marking
the default and Grad-CAM layers; timm and Hugging Face networks list their blocks and stages.
"""
from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    from .common import add_network_args

    p = sub.add_parser("models", help="list networks, layers and whether weights are available")
    p.add_argument("--json", action="store_true", help="one JSON line per network")
    add_network_args(p, layer=False, model_default=None)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..networks import REGISTRY, weights_status
    from . import files
    from .common import print_json

    files.weights_file(args)  # before the network loads
    if args.model is not None:
        return _one(args)
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


def _one(args: argparse.Namespace) -> int:
    """One network's layers with their shapes; without its weights, the structure from random weights."""
    from ..networks import WeightsUnavailableError
    from .common import load_from_args, print_json

    note = None
    try:
        network = load_from_args(args)
    except WeightsUnavailableError as err:
        if args.weights:
            raise
        note = f"{err} Layers below are from random weights."
        network = load_from_args(args, weights="random")
    spec = network.spec
    table = network.layer_table()  # every module found, usable or not, with shape and kind
    shapes = {info.name: list(info.shape[1:]) for info in table}
    kinds = {info.name: info.kind for info in table}
    cam = spec.cam_layer[0] if spec.cam_layer else None
    row = {
        "model": spec.key, "title": spec.title, "weights": network.weights_id, "classes": len(network.categories),
        "default_layer": spec.default_layer, "cam_layer": cam, "can_split": network.can_split,
        "preprocess": {"resize": spec.resize, "crop": spec.crop, "mean": list(spec.mean), "std": list(spec.std),
                       "interpolation": spec.interpolation, "channels": spec.channels,
                       **({"display_bands": list(spec.display_bands)} if spec.display_bands else {})},
        "layers": [{"name": name, "shape": shapes.get(name), "kind": kinds.get(name, "map")} for name in spec.layers],
        "unusable": [{"name": info.name, "reason": info.reason} for info in table if not info.usable],
    }
    if note:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print_json(row)
        return 0
    print(f"{row['model']}: {row['title']}")
    print(f"  weights: {row['weights']}; classes: {row['classes']}; "
          f"input: resize {spec.resize} ({spec.interpolation}), crop {spec.crop}")
    for layer in row["layers"]:
        marks = [m for m, on in (("default", layer["name"] == spec.default_layer),
                                 ("Grad-CAM", layer["name"] == cam)) if on]
        shape = "×".join(str(v) for v in layer["shape"]) if layer["shape"] else "?"
        tokens = "  tokens" if layer["kind"] == "tokens" else ""
        print(f"  {layer['name']:<40} {shape}{'  (' + ', '.join(marks) + ')' if marks else ''}{tokens}")
    for layer in row["unusable"]:
        print(f"  {layer['name']:<40} not usable: {layer['reason']}")
    return 0


