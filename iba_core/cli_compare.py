"""`python -m iba_core compare IMAGE --model M [--layer L] [--methods all|a,b,…] [--target N|NAME] --out DIR`.

Writes every map as `<key>.npy` (float32, H×W), `grid.png` (all maps side by side) and `summary.json`
(image, network, class, and per method: name, seconds, value range, extras such as the IBA's total bits).
A tqdm progress bar runs on stderr. A failing method is reported and skipped; the exit status is then 1.

Wiring into the main CLI: `add_compare_parser(subparsers)`; the registered sub-command sets
`func=cmd_compare`. `main(argv)` runs the sub-command alone (used by the tests).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

EXIT_OK, EXIT_FAILED = 0, 1


def add_compare_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `compare` sub-command on an argparse sub-parsers object; returns its parser."""
    from .baselines import method_keys
    from .models import DEFAULT_MODEL, REGISTRY

    p = subparsers.add_parser(
        "compare",
        help="run attribution baselines and the Per-Sample Bottleneck on one image",
        description="Run attribution methods on one image; write <key>.npy maps, grid.png and summary.json.",
    )
    p.add_argument("image", type=Path, help="image file (png, jpg, webp, bmp, tiff)")
    p.add_argument("--model", default=DEFAULT_MODEL, choices=list(REGISTRY), help="network (default: %(default)s)")
    p.add_argument("--layer", default=None, help="bottleneck layer of the IBA methods (default: the network's)")
    p.add_argument(
        "--methods", default="all",
        help="'all' or comma-separated keys: " + ",".join(method_keys()) + " (default: %(default)s)",
    )
    p.add_argument("--target", default=None, help="class index or ImageNet class name (default: top-1)")
    p.add_argument("--out", type=Path, required=True, help="output folder (created if missing)")
    p.add_argument("--weights", default=None, help="local weights file (state dict)")
    p.add_argument("--random-weights", action="store_true", help="untrained weights (for structure/speed tests)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: %(default)s)")
    p.set_defaults(func=cmd_compare)
    return p


def cmd_compare(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    from .baselines import METHODS
    from .compare import compare, grid_png, resolve_methods
    from .images import load_image
    from .models import check_layer, get_spec, load_model

    settings = {}
    if args.layer is not None:
        check_layer(get_spec(args.model), args.layer)  # a typo fails before the network loads
        settings = {key: {"layer": args.layer} for key in METHODS if key.startswith("iba_")}
    methods = resolve_methods(args.methods, settings)  # unknown keys fail before any slow work
    image = load_image(args.image)
    weights = args.weights or ("random" if args.random_weights else "pretrained")
    loaded = load_model(args.model, weights=weights, device=args.device)
    cropped = loaded.preprocess.crop(image)
    x = loaded.preprocess.normalise(cropped)
    target = loaded.top_k(x, 1)[0][0] if args.target is None else loaded.class_index(args.target)

    failures: dict[str, str] = {}
    bar = tqdm(total=len(methods), desc="compare", unit="method", file=sys.stderr, dynamic_ncols=True)

    def progress(done: int, total: int, label: str) -> None:
        bar.update(done - bar.n)
        bar.set_postfix_str(label, refresh=True)

    def on_error(key: str, err: BaseException) -> None:
        failures[key] = f"{type(err).__name__}: {err}"
        tqdm.write(f"warning: {key} failed: {err}", file=sys.stderr)

    try:
        maps = compare(loaded, x, target, methods, progress=progress, on_error=on_error)
    finally:
        bar.close()

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for amap in maps:
        np.save(out / f"{amap.key}.npy", amap.values.astype(np.float32))
    class_name = loaded.categories[target]
    network = loaded.spec.title + (" — random weights" if loaded.weights_id == "random" else "")
    (out / "grid.png").write_bytes(grid_png(maps, cropped, title=f"{network} — class {target} ({class_name})"))
    summary = {
        "image": str(args.image),
        "model": loaded.key,
        "weights": loaded.weights_id,
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
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default))
    print(json.dumps({"out": str(out), "target": target, "class_name": class_name,
                      "methods": [m.key for m in maps], "failed": sorted(failures)}))
    return EXIT_FAILED if failures else EXIT_OK


def _json_default(obj):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(obj)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `compare …` on its own: argv without the leading "compare" is accepted too."""
    from .cli import run_command

    parser = argparse.ArgumentParser(prog="python -m iba_core")
    sub = parser.add_subparsers(dest="command", required=True)
    add_compare_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "compare":
        argv = ["compare", *argv]
    args = parser.parse_args(argv)
    return run_command(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
