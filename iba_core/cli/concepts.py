"""`python -m iba_core concepts RUN_DIR`: the concepts of a folder run, per class and for the whole run, ranked by
the bits they carry (`iba_core.concepts.find_concepts`), into a concept set inside the run folder: one JSON line per
group finished (its concepts, flagged ones named) and a summary line. Resumable; under torchrun the image passes are
shared among the ranks."""
from __future__ import annotations

import argparse

from . import files
from .common import add_network_args, positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("concepts", help="concepts of a folder run per class, ranked by the bits they carry and their "
                       "effect; shortcut candidates flagged")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out folder of `attribute FOLDER --out RUN_DIR`")
    add_network_args(p, model_default=None)
    p.add_argument("--per-class", type=positive_int, default=None, metavar="K",
                   help="concepts per class (default: the elbow of the reconstruction error over 2 … 8)")
    p.add_argument("--classes", nargs="+", default=None, metavar="CLASS",
                   help="only these classes (indices or names; default: every class of the run)")
    p.add_argument("--method", default=None,
                   help="the run's bottleneck method whose bits are shared out (default: its first)")
    p.add_argument("--no-whole-run", action="store_true", help="no concepts of all the run's images together")
    p.add_argument("--seed", type=int, default=0, help="seed of the factorisation's sampling (default: 0)")
    p.add_argument("--batch", type=positive_int, default=8, help="images per batch (default: 8)")
    p.add_argument("--words-model", default=None, metavar="CLIP",
                   help="a CLIP model (clip:FOLDER or clip:ORG/NAME) that names each concept: the prompts that best "
                   "match its top crops (a short built-in list plus --prompt)")
    p.add_argument("--prompt", nargs="+", default=(), metavar="TEXT", help="words to try besides the built-in list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Open the run, load its network (the run's own unless --model), find the concepts, print JSON lines."""
    from ..concepts import ConceptSettings, find_concepts, open_concepts
    from ..runs.tables import open_run
    from .common import load_from_args, print_json, progress_bar

    run_dir = files.readable_folder(args.run_dir, "RUN_DIR", "Run folder")
    files.weights_file(args)
    run_ = open_run(run_dir)
    if args.model is None:
        args.model = str(run_.info.get("network"))
    network = load_from_args(args)
    classes = tuple(network.class_index(c) for c in args.classes) if args.classes else None
    settings = ConceptSettings(k=args.per_class, layer=args.layer, method=args.method, classes=classes,
                               whole_run=not args.no_whole_run, seed=args.seed, batch_images=args.batch)
    progress, close = progress_bar("concepts")
    try:
        summary = find_concepts(network, run_dir, settings, progress=progress)
    finally:
        close()
    found = open_concepts(run_dir, summary.set_dir.name)
    if args.words_model:
        found = _add_words(args, run_, network, found)
    for group in summary.done + summary.skipped:
        rows = found.concepts[found.concepts["group"] == group]
        print_json({"group": group, "class_name": rows["class_name"].iloc[0] if len(rows) else None,
                    "k": int(rows["k"].iloc[0]) if len(rows) else 0,
                    "bits_share": [round(float(v), 4) for v in rows["bits_share"]],
                    "effect": [round(float(v), 4) for v in rows["effect"]],
                    "flagged": {int(c): r for c, r in zip(rows["concept"], rows["flag_reasons"]) if r},
                    **({"words": {int(c): [w for w, _ in found.words_of(_target(rows), int(c))[:3]]
                                  for c in rows["concept"]}} if found.words is not None else {})})
    print_json({"concepts": str(summary.set_dir), "done": summary.done, "skipped": summary.skipped,
                "images": summary.images, "unreadable": summary.unreadable[:5], "damaged": summary.damaged,
                "seconds": round(summary.seconds, 1), "missing": found.missing})
    return 0


def _target(rows) -> int | None:
    import pandas as pd

    return None if not len(rows) or pd.isna(rows["target"].iloc[0]) else int(rows["target"].iloc[0])


def _add_words(args: argparse.Namespace, run_, network, found):
    """Name the concepts with the CLIP model of --words-model; the concept set reopened with its words."""
    from ..concepts import open_concepts
    from ..concepts.crops import words_table
    from ..concepts.store import write_words
    from ..networks import load_network
    from .common import trust_from_args

    clip = load_network(args.words_model, device=args.device, trust=trust_from_args(args))
    write_words(found.path, words_table(run_, network, found, clip, tuple(args.prompt)))
    return open_concepts(run_.path, found.path.name)
