"""Command line for the Readout Bottleneck: `train-readout`.

    python -m iba_core train-readout --model efficientnet_lite0 --images DIR --epochs 10
    python -m torch.distributed.run --nproc_per_node 2 -m iba_core train-readout …

Each process prints one JSON line when it is done (rank, world size, a SHA-256 of its final readout
weights, …); progress and messages go to stderr.
"""
from __future__ import annotations

import argparse

from . import files
from ..errors import UserError
from .common import add_network_args

#: argparse dest → TrainConfig field, for options whose names differ.
_FIELDS = {
    "images": "images", "sample_photos": "sample_photos", "extra_photos": "extra_photos", "repeats": "repeats",
    "labels": "labels", "class_map": "class_map", "layer": "layer", "read_layers": "reads", "hidden": "hidden", "epochs": "epochs",
    "batch_size": "batch_size", "lr": "lr", "beta_k": "beta_k", "sigma": "sigma", "seed": "seed",
    "stats_n": "stats_n", "workers": "workers", "out": "out", "save_every": "save_every",
    "max_steps": "max_steps", "preview": "preview", "device": "device", "model": "model",
}


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _widths(text: str) -> tuple[int, int]:
    try:
        parts = [int(t) for t in _names(text)]
    except ValueError:  # int's refusal of a word
        parts = []
    if len(parts) != 2 or min(parts) < 1:
        raise argparse.ArgumentTypeError("give two positive widths, e.g. 128,64")
    return parts[0], parts[1]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train-readout",
        help="train a Readout Bottleneck (paper §3.3) for a network",
        description="Train the readout network that predicts the bottleneck mask in one pass. "
        "Runs under torchrun (--nproc_per_node N) with DistributedDataParallel. "
        "Options left out take the paper's values (Adam, lr 1e-5, β = 10/k, batch 16, 20 epochs, σ_s = 1).",
    )
    # Defaults are None here so that, when resuming, only options given explicitly override the checkpoint.
    add_network_args(p, layer=False, model_default=None, device_default=None)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--images", default=None, help="image folder: class folders (index, name or WordNet id) "
                     "or unlabelled images (labelled by the network's own top-1)")
    src.add_argument("--sample-photos", type=int, default=None, metavar="N",
                     help="instead of a folder: N augmented crops per epoch of the offline sample photos")
    p.add_argument("--extra-photos", action="store_const", const=True, default=None,
                   help="with --sample-photos: also the other real photos installed packages ship (see "
                   "iba_core.readout.offline_photos)")
    p.add_argument("--repeats", type=int, default=None, help="augmented crops per folder image and epoch (default 1)")
    p.add_argument("--labels", choices=("auto", "folders", "top1"), default=None,
                   help="where labels come from (default auto: class folders if present, else top-1)")
    p.add_argument("--class-map", default=None, help="wnid → index table for WordNet-id folders "
                   "(LOC_synset_mapping.txt, one wnid per line, or imagenet_class_index.json)")
    p.add_argument("--layer", default=None, help="bottleneck layer (default: the network's readout layer)")
    p.add_argument("--read-layers", type=_names, default=None, help="comma-separated layers to read, 'fc' for "
                   "the logits (default: the network's, from its spec)")
    p.add_argument("--hidden", type=_widths, default=None, help="widths of the two hidden 1×1 convs (default 128,64)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default 20, paper §4.1)")
    p.add_argument("--batch-size", type=int, default=None, help="images per step and process (default 16)")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate (default 1e-5)")
    p.add_argument("--beta-k", type=float, default=None, help="β·k (default 10, i.e. β = 10/k)")
    p.add_argument("--sigma", type=float, default=None, help="σ_s of the mask smoothing (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for initialisation, crops and noise (default 0)")
    p.add_argument("--stats-n", type=int, default=None, help="images for the feature statistics (default 1000)")
    p.add_argument("--workers", type=int, default=None, help="data-loader worker processes (default 0)")
    p.add_argument("--out", default=None, help="output folder (default readout_runs/<model>)")
    p.add_argument("--resume", default=None, metavar="CKPT", help="continue from a training checkpoint")
    p.add_argument("--save-every", type=int, default=None, metavar="STEPS",
                   help="also checkpoint every STEPS steps within an epoch (default: epoch ends only)")
    p.add_argument("--max-steps", type=int, default=None, help="cap on steps per epoch (quick trials)")
    p.add_argument("--preview", default=None, help="image for the per-epoch preview heatmap")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace):
    """(TrainConfig, explicitly given field names) from parsed arguments."""
    from ..readout import TrainConfig

    cfg = TrainConfig()
    given: list[str] = []
    for dest, name in _FIELDS.items():
        value = getattr(args, dest, None)
        if value is not None:
            setattr(cfg, name, value)
            given.append(name)
    if args.weights or args.random_weights:
        cfg.weights = args.weights or "random"
        given.append("weights")
    if "out" not in given:
        cfg.out = f"readout_runs/{cfg.model}"
    return cfg, given


def check_files(args: argparse.Namespace, out: str) -> None:
    """Inputs readable and the output folder writable, before the network loads (iba_core.cli.files)."""
    files.image_folder(args.images, "--images")
    files.readable_file(args.class_map, "--class-map")
    files.readable_file(args.resume, "--resume")
    files.image_file(args.preview, "--preview")
    files.weights_file(args)
    if args.out is not None or args.resume is None:  # on resume without --out, the checkpoint's folder
        files.output_folder(out)


def run(args: argparse.Namespace) -> int:
    from ..readout import train_readout
    from .common import print_json, trust_from_args

    cfg, given = config_from_args(args)
    if args.resume is None and args.images is None and args.sample_photos is None:
        raise UserError("Give --images DIR (or --sample-photos N), or --resume CKPT.")
    check_files(args, cfg.out)
    summary = train_readout(cfg, resume=args.resume, overrides=given if args.resume else None,
                            progress=not args.no_progress, trust=trust_from_args(args),
                            trust_pickle=args.trust_pickle)
    history = summary.pop("history") or []
    if history:
        summary["last_epoch"] = {k: v for k, v in history[-1].items() if k != "preview"}
    print_json(summary)
    return 0
