"""`python -m iba_core attribute IMAGE`: one bottleneck heatmap (Per-Sample, CoIBA or Readout) as one JSON line.

With a CLIP model (`--model clip:FOLDER`), `--prompt TEXT` (repeatable, exclusive with --target) explains the
image's similarity to each text prompt (M2IB): one Per-Sample fit per prompt, done together, one JSON line and one
map per prompt (`--out map.npy` → map_0_a-cat.npy, map_1_a-dog.npy, … where there are several). β·k defaults to
the head's (`heads.default_beta_k`: 10 for classifiers, M2IB's 0.1 for CLIP).

`attribute FOLDER --out RUN_DIR` (a folder, or a .txt list of images) runs every image instead: `attribute_folder`.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..bottleneck import DEFAULT_BETA_K
from ..coiba import PLACEMENTS
from ..methods import BottleneckRequest
from ..per_sample import BottleneckSettings
from ..precision import PRECISIONS
from . import attribute_folder, files
from .common import COIBA_HELP, add_layer_range_arg, add_network_args
from .stats import STATS_N_HELP, sample_count


#: --method's choices: the one-layer bottleneck (the paper's), CoIBA over a range of layers and M2IB, as their
#: authors run them (presets of the method registry: `coiba`, `m2ib`), a trained readout.
METHODS = ("per-sample", "coiba", "m2ib", "readout")


def add_parser(sub) -> None:
    d = BottleneckSettings()
    p = sub.add_parser("attribute", help="Per-Sample (CoIBA, or Readout) Bottleneck heatmap for one image, or for "
                       "every image of a folder (--out RUN_DIR)")
    p.add_argument("image", type=Path, help="image file (png, jpg, webp, bmp, tiff; for a network of more than 3 "
                   "bands a .npy of height × width × bands or a multi-band tiff), or a folder of images or a .txt "
                   "list of them (one path a line): a folder run into --out RUN_DIR")
    add_network_args(p)
    p.add_argument("--method", choices=METHODS, default="per-sample",
                   help=f"per-sample: the Per-Sample Bottleneck at one layer (default); {COIBA_HELP} "
                   "(--layer-range); m2ib: M2IB (Wang et al. 2023) as its authors run it (standard-normal prior, "
                   "β·k 0.1, block 9 of 12); readout: a trained Readout Bottleneck")
    add_layer_range_arg(p)
    p.add_argument("--placement", choices=PLACEMENTS, default=None,
                   help="coiba: where its bottlenecks sit: branch (the input of each transformer block's attention "
                   "branch, the authors'), output (whole layer outputs), auto (default: branch on a transformer "
                   "with a class token, else output)")
    p.add_argument("--readout", default=None, help="readout checkpoint (default: the one shipped for the network)")
    p.add_argument("--beta-k", type=float, default=None,
                   help="β·k (default: the network's: the paper's 10, β = 10/k; for a CLIP model M2IB's 0.1)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--target", default=None, help="class index or class name (default: top-1)")
    which.add_argument("--prompt", action="append", default=None, metavar="TEXT",
                       help="a text prompt to explain, for a CLIP model (--model clip:FOLDER); repeat it for several "
                       "(one map each)")
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--sigma", type=float, default=None,
                   help=f"σ_s of the mask smoothing (default: {d.sigma:g}; coiba: 0, as its authors)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                   help="network passes in fp32, bf16 or fp16; auto (default): a lower precision only where the "
                   "hardware has it and one measurement shows it is faster")
    p.add_argument("--read-point", choices=BottleneckSettings.READ_POINTS, default=None,
                   help="heatmap from the final λ (per-sample's default) or the last step's forward pass (the "
                   "authors' code; coiba's and m2ib's default)")
    p.add_argument("--inactive-threshold", type=float, default=d.inactive_threshold, metavar="FRACTION",
                   help="mask units non-zero in at most this fraction of the statistics samples "
                   "(the authors' code: 0.01; default: no masking)")
    p.add_argument("--stats-images", default=None, help="image folder for the feature statistics")
    p.add_argument("--n", type=sample_count, default=None, help=STATS_N_HELP)
    p.add_argument("--out", type=Path, default=None, help="save the bits-per-pixel heatmap (.npy); for a folder: the "
                   "run folder (results.parquet, maps, run.json)")
    p.add_argument("--png", type=Path, default=None, help="save an overlay image (.png)")
    attribute_folder.add_folder_args(p)
    p.set_defaults(func=run)


def check_files(args: argparse.Namespace) -> None:
    """Inputs readable and outputs writable, before the network loads (iba_core.cli.files)."""
    files.image_file(args.image)
    files.weights_file(args)
    files.readable_file(args.readout, "--readout")
    files.image_folder(args.stats_images, "--stats-images")
    files.output_file(args.out and files.npy_path(args.out), "--out")
    if args.png:
        files.image_format(args.png, "--png")
        files.output_file(args.png, "--png")


def check_layer_options(args: argparse.Namespace) -> None:
    """--layer places the one-layer bottleneck, --layer-range CoIBA's: the other one given is a mistake said in
    words (it would be ignored), and a registered network's layer names are checked before it loads."""
    from ..errors import UserError
    from .common import check_layer_range

    if args.method == "coiba" and args.layer is not None:
        raise UserError("--layer places the one-layer bottleneck; CoIBA spans a range of layers.",
                        cli_hint="Give --layer-range FIRST:LAST instead (e.g. block3_2:block7_1).")
    if args.method != "coiba" and getattr(args, "placement", None) is not None and getattr(args, "methods", None) is None:
        raise UserError(f"--placement places CoIBA's bottlenecks, but --method is {args.method}.",
                        cli_hint="Add --method coiba (or, for a folder run, --methods … coiba).")
    if args.method != "coiba" and args.layer_range is not None and getattr(args, "methods", None) is None:
        raise UserError(f"--layer-range sets CoIBA's layers, but --method is {args.method}.",
                        cli_hint="Add --method coiba (or, for a folder run, --methods … coiba).")
    check_layer_range(args)


def bottleneck_settings(args: argparse.Namespace) -> BottleneckSettings:
    """The bottleneck's settings from the options, checked (with their ranges) before the network loads: the
    preset's (`methods.get_method`: coiba's `coiba.CoIBASettings`, m2ib's standard-normal prior) with the options
    given, else the Per-Sample Bottleneck's."""
    given = dict(beta_k=args.beta_k, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                 read_point=args.read_point, sigma=args.sigma, precision=args.precision)
    given = {k: v for k, v in given.items() if v is not None}
    if args.method == "coiba":
        from ..coiba import CoIBASettings

        return CoIBASettings(**given, **({"placement": args.placement} if args.placement else {}))
    if args.method == "m2ib":
        from ..methods import get_method

        return get_method("m2ib", **given, inactive_threshold=args.inactive_threshold).bottleneck_settings()
    # β·k left out: the paper's 10 for now, the network's head's default once it is loaded (`attribute_image`)
    given.setdefault("beta_k", DEFAULT_BETA_K)
    return BottleneckSettings(**given, inactive_threshold=args.inactive_threshold)


@dataclass(frozen=True)
class AttributeRequest:
    """Everything `attribute IMAGE` was asked, read from the options once (`request_of`) and checked before the
    network loads; the rest of the command reads this, not the options."""

    image: Path
    method: str  # one of METHODS
    #: the bottleneck as the library takes it (the Per-Sample page builds the same object); None for the readout
    bottleneck: BottleneckRequest | None
    #: whether β·k was given: if not, the Per-Sample Bottleneck takes the network's head's default once it is loaded
    beta_k_given: bool
    target: str | None
    prompts: tuple = ()  # PromptTarget per --prompt
    readout: str | None = None
    batch: int = 10
    seed: int | None = 0
    out: Path | None = None
    png: Path | None = None


def request_of(args: argparse.Namespace) -> AttributeRequest:
    """The command's one request from its options; a UserError for what cannot work, before the network loads."""
    from ..errors import UserError
    from ..methods.targets import PromptTarget

    prompts = tuple(PromptTarget(text) for text in (getattr(args, "prompt", None) or ()))  # an empty one refused
    if prompts and args.method == "readout":
        raise UserError("Text prompts are explained by the Per-Sample Bottleneck (M2IB); leave out --method readout.")
    bottleneck = None
    if args.method != "readout":  # the settings are checked (with their ranges) here
        bottleneck = BottleneckRequest(bottleneck_settings(args), layer=args.layer, layer_range=args.layer_range,
                                       stats_images=args.stats_images, stats_samples=args.n)
    return AttributeRequest(image=args.image, method=args.method, bottleneck=bottleneck,
                            beta_k_given=args.beta_k is not None, target=args.target, prompts=prompts,
                            readout=args.readout, batch=args.batch, seed=args.seed, out=args.out, png=args.png)


def prompt_path(path: Path, index: int, prompt: str) -> Path:
    """The file of the `index`-th of several prompts' maps: NAME_<index>_<prompt in safe characters>.SUFFIX
    (map.npy → map_0_a-cat.npy); the index keeps prompts that differ only in punctuation apart."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", prompt).strip("-")[:40] or "prompt"
    path = Path(path)
    return path.with_name(f"{path.stem}_{index}_{slug}{path.suffix}")


def run(args: argparse.Namespace) -> int:
    check_layer_options(args)
    if attribute_folder.is_folder_source(args.image):
        return attribute_folder.run(args)
    attribute_folder.refuse_folder_options(args)
    check_files(args)
    request = request_of(args)
    from ..band_images import photo_or_path
    from .common import load_from_args

    image = photo_or_path(request.image)  # a damaged photo is refused before the network loads
    return attribute_image(load_from_args(args), image, request)


def attribute_image(network, image, request: AttributeRequest) -> int:
    """The request's maps of one image on a loaded network, each written with its JSON line."""
    image = network.preprocess.load(image)  # for its channels: the photo (in gray for one), or a .npy / TIFF
    target = None if request.target is None else network.class_index(request.target)
    cropped = network.preprocess.crop(image)
    x = network.preprocess.normalise(cropped)
    if request.method == "readout":
        from ..readout import readout_attribute

        # The readout's bottleneck layer and statistics come from its checkpoint.
        results = [readout_attribute(network, request.readout, x, target, batch=request.batch, seed=request.seed)]
        layers, stats_samples = [results[0].readout["layer"]], None
    else:
        results, layers, stats_samples = _bottleneck_results(network, request, x, target)
    several = len(results) > 1
    for i, result in enumerate(results):
        name = network.class_name(result.target)
        out = request.out and (prompt_path(files.npy_path(request.out), i, name) if several else request.out)
        png = request.png and (prompt_path(request.png, i, name) if several else request.png)
        text = None
        if request.prompts:  # which words carry the information: M2IB's text side, beside the image's map
            from ..text_side import TextSideSettings, text_side

            text = text_side(network, x, name, TextSideSettings(seed=request.seed)).summary()
        _write(request, network, cropped, result, layers, stats_samples, out, png, text=text)
    return 0


def _bottleneck_results(network, request: AttributeRequest, x, target) -> tuple[list, list[str], int]:
    """(the bottleneck's results, its layers, the statistics' samples) for x: one fit, or one per prompt."""
    from ..results import range_label
    from .common import progress_bar

    asked = request.bottleneck
    if not request.beta_k_given and request.method == "per-sample":
        from ..heads import default_beta_k

        asked = replace(asked, settings=replace(asked.settings, beta_k=default_beta_k(network)))
    # the one door: the registry's method for these settings resolves its layers on this network (CoIBA: the
    # placement and the range; M2IB: its depth; the Per-Sample Bottleneck: --layer or the default layer)
    method = asked.method()
    layers = method.resolve(network)[1]
    if request.method == "coiba" and (note := method.placement(network)[1]):
        print(f"note: {note}", file=sys.stderr)
    progress, close = progress_bar(f"statistics {network.key}/{range_label(layers[0], layers[-1])}")
    try:  # the one policy (also `attribute FOLDER`'s and the app's), every layer of a range in one pass
        stats = method.statistics(network, progress) if method.needs_stats else {}
    finally:
        close()
    bottleneck = method.bottleneck(network)
    stats_samples = min((s.n for s in stats.values()), default=0)  # 0: a prior, nothing estimated (M2IB)
    if not request.prompts:
        return [bottleneck.attribute(x, target)], layers, stats_samples
    from ..methods.base import check_target

    # each prompt's index (new ones added to the network's prompts); a classifier refuses them in one sentence;
    # one fit per prompt, together (each as it would be alone)
    targets = list(dict.fromkeys(check_target(network, prompt).index for prompt in request.prompts))
    return bottleneck.attribute_batch(x.expand(len(targets), *x.shape[1:]), targets), layers, stats_samples


def _write(request: AttributeRequest, network, cropped, result, layers: list[str], stats_samples, out, png, *,
           text: dict | None = None) -> None:
    """One map's files (.npy, .png) and its JSON line."""
    from .common import print_json

    if out:
        files.save_npy(out, result.heatmap)
    if png:
        from ..render import overlay_image
        from ..render.colours import run_scale

        # the run's one scale (as the app's views), with its legend in bits per pixel
        files.save_image(png, overlay_image(cropped, result.heatmap, top=run_scale(result).top, legend=True))
    print_json({
        "image": str(request.image),
        "method": request.method,
        "model": network.key,
        "layer": layers[0],
        **({"layers": layers} if request.method == "coiba" else {}),  # CoIBA's range; "layer" is its first
        "target": result.target,
        "class_name": network.class_name(result.target),
        **({"prompt": network.class_name(result.target), "out": str(files.npy_path(out)) if out else None}
           if request.prompts else {}),
        # what p means (iba_core.heads): softmax over classes, σ per label (multi-label), or binary
        "head": network.head,
        "p_without": round(result.p_without, 6),
        "p_with": round(result.p_with, 6),
        "bottleneck_lost_class": result.lost_class,
        # the network's own top-1, and a note when it hardly predicts the explained class (per_sample.target_note)
        **({"predicted": result.predicted, "predicted_name": network.class_name(result.predicted),
            "p_predicted": round(result.p_predicted, 6)} if getattr(result, "predicted", -1) >= 0 else {}),
        **({"target_note": result.target_note} if getattr(result, "target_note", "") else {}),
        "total_bits": round(result.total_bits, 3),
        "beta_k": result.settings.beta_k,
        "stats_samples": stats_samples,
        # the precision that ran ("auto" resolved, as the page and the reports say) and the one asked for beside it,
        # as in the run summaries (`AttributionResult.summary`)
        "precision": getattr(result, "precision", "fp32"),
        "precision_asked": getattr(result.settings, "precision", "fp32"),
        "seconds": round(result.seconds, 3),
        # only where they say something: a traced or hooked network, bits without a place on the image (ViT)
        **({"path": result.path} if getattr(result, "path", "stages") != "stages" else {}),
        **({"unlocated_bits": round(result.unlocated_bits, 3)} if getattr(result, "unlocated_bits", 0) else {}),
        # a prompt's words with their bits (M2IB's text side, `text_side.py`): which words the similarity needs
        **({"text_side": text} if text is not None else {}),
    })
