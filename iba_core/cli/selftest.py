"""`python -m iba_core selftest FOLDER --mark text|patch|border|FILE.png --out DIR`: the planted-mark self-test
(`iba_core.selftest.self_test`): the folder's images copied clean and marked, the methods run on both, the model's
reaction and each method's localisation ratio and AUROC. Prints JSON lines: the reaction (with the verdict), one
line per method and target (ranked ones first, best first), and a last line with the ranking, the files and the
paired view's folders (`compare-runs` of the marked run against the clean one, per target and method).
Rerunning the command resumes (copies and finished rows are kept)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import files
from .common import add_methods_arg, add_network_args, positive_int, real_number

#: The methods a self-test runs when --methods is left out: one of each family (a bottleneck, a gradient, a CAM).
DEFAULT_METHODS = ["iba_10", "saliency", "grad_cam"]


def add_parser(sub) -> None:
    from ..selftest.marks import DEFAULT_PLACE, DEFAULT_SIZE, DEFAULT_TEXT, KINDS, PLACES
    from .stats import STATS_N_HELP, sample_count

    p = sub.add_parser("selftest", help="plant a mark on a folder's images: does the model react to it, and would "
                       "each method's maps show it?")
    p.add_argument("folder", type=Path, metavar="FOLDER", help="a folder of images (class folders give the labels)")
    add_network_args(p)
    p.add_argument("--mark", required=True, metavar="KIND|FILE.png",
                   help=f"the mark: {', '.join(KINDS)} (a short text, a solid square, a frame round the crop) or a PNG "
                   "file (its transparency kept)")
    p.add_argument("--where", default=None, metavar="PLACE|X,Y",
                   help=f"where on the network's crop: {', '.join(k for k in PLACES if k != 'center')}, or x,y in 0–1 "
                   f"(0,0: flush with the top-left corner; default: {DEFAULT_PLACE}; not for a border)")
    p.add_argument("--size", type=real_number, default=None,
                   help="the mark's longer side as a share of the crop side (a border: its width; default: "
                   + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_SIZE.items()) + ")")
    p.add_argument("--opacity", type=real_number, default=1.0, help="0.01–1 (default: 1, opaque)")
    p.add_argument("--colour", default=None, help="the colour of a text, patch or border: a name or R,G,B "
                   "(default: red)")
    p.add_argument("--text", default=DEFAULT_TEXT, help="a text mark's text (default: %(default)s)")
    add_methods_arg(p, "attribution method keys, or 'all'", default=list(DEFAULT_METHODS))
    p.add_argument("--sample", type=positive_int, default=None, metavar="N",
                   help="a seeded sample of N images (default: every image)")
    p.add_argument("--out", type=Path, required=True, help="the test's folder (created; an earlier test there resumes)")
    p.add_argument("--steps", type=positive_int, default=None, help="the bottlenecks' optimisation steps")
    p.add_argument("--n", type=sample_count, default=None, help=STATS_N_HELP)
    p.add_argument("--stats-images", default=None, help="image folder for the feature statistics")
    p.add_argument("--batch-images", type=positive_int, default=8, help="images per batch (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    # what `attribute_folder.method_list` reads of `attribute`'s options, left at their defaults here
    p.set_defaults(func=run, method="per-sample", readout=None, layer_range=None, placement=None, beta_k=None,
                   batch=None, lr=None, sigma=None, seed=None, read_point=None, inactive_threshold=None,
                   precision=None)


def _checked(args: argparse.Namespace):
    """(the mark, the methods), every option checked before the network loads."""
    from ..selftest.marks import make_mark
    from ..selftest.selftest import check_folders
    from .attribute_folder import method_list

    files.readable_folder(args.folder, "image folder", "Image folder")
    files.weights_file(args)
    files.image_folder(args.stats_images, "--stats-images")
    check_folders(args.folder, args.out)  # before --out is created inside the image folder
    files.output_folder(args.out, "--out")
    mark = make_mark(args.mark, args.where, args.size, args.opacity, args.colour, args.text)
    return mark, method_list(args)


def run(args: argparse.Namespace) -> int:
    """Check the options, load the network, run the self-test, print its JSON lines."""
    from ..runs import FolderSettings
    from ..selftest.selftest import IMAGES_FILE, MAPS_FILE, RESULTS_FILE, self_test
    from .common import load_from_args, method_keys_arg, names_all, print_json, progress_bar, runnable

    mark, methods = _checked(args)
    network = load_from_args(args)
    if names_all(method_keys_arg(args.methods)):
        methods = runnable(methods, network)
    settings = FolderSettings(stats_images=args.stats_images, batch_images=args.batch_images)
    progress, close = (None, lambda: None) if args.no_progress else progress_bar("selftest")
    try:
        result = self_test(network, args.folder, mark, methods, args.out, sample=args.sample, progress=progress,
                           settings=settings)
    finally:
        close()
    for key, why in result.unreadable.items():
        print(f"note: {key} was left out: {why}", file=sys.stderr)
    r = result.reaction
    print_json({"verdict": r.verdict, "reacts": r.reacts, "images": r.images, "sample": result.sample,
                "mean_delta_p": r.delta_p_own, "changed_share": r.changed_share, "toward": r.toward_name,
                "toward_ratio": r.toward_ratio, "changed_to": r.changed_to, "box": list(result.box),
                "region_share": result.region_share})
    for score in sorted(result.scores, key=lambda s: (s.rank is None, s.rank or 0, s.target, s.method)):
        print_json({"rank": score.rank, "method": score.method, "name": score.name, "target": score.target,
                    "localisation_ratio": score.localisation_ratio, "auroc": score.auroc, "images": score.images,
                    "best_ratio": score.best_ratio})
    out = Path(args.out)
    print_json({"ranking": result.ranking, "caution": result.caution, "new_rows": result.new_rows,
                "files": {"summary": str(out / RESULTS_FILE), "images": str(out / IMAGES_FILE),
                          "maps": str(out / MAPS_FILE)},
                "paired": {t: {m: str(out / d) for m, d in by.items()} for t, by in result.paired_dirs.items()}})
    return 0
