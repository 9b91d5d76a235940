"""Training the Readout Bottleneck (paper §3.3): data, the training loop, checkpoints and DDP.

Loss per batch: CE(noisy logits, label) + β·L_I with β = beta_k / k (paper: β = 10/k, Adam,
lr 1e-5, batch 16, 10 epochs, σ_s = 1). Only the readout network is trained; the analysed network
stays frozen in eval mode.

Data
- An image folder. Labels (``labels="auto"``):
  * images directly in the folder (no sub-folders) are unlabelled: the label is the analysed
    network's own top-1 on the same (augmented) crop, from the clean first pass;
  * ImageNet-style class folders named by **class index** (``0`` … ``999``) or by the **class name**
    as the network lists it (``tabby``, case-insensitive) map directly;
  * folders named by **WordNet id** (``n02123045``): this machine has no offline wnid → index table,
    so either pass ``class_map`` (LOC_synset_mapping.txt, any text file with one wnid per line in
    class-index order, or Keras' imagenet_class_index.json), or the tree must hold all 1000 class
    folders, in which case sorted order is the class index (the ILSVRC-2012 convention torchvision's
    ImageFolder also follows);
  * ``labels="top1"`` ignores folders and always uses the network's top-1.
- Or augmented crops of the offline sample photos (``sample_photos=N`` crops per epoch), labelled
  with the network's top-1.
Augmentation: random resized crop (scale 0.25–1, aspect 3/4–4/3, the same helper the feature
statistics use) and horizontal flip, seeded per (seed, epoch, index): runs, resumes and any number of
data-loader workers or ranks give the same crops.

Distributed: under ``torchrun`` (WORLD_SIZE > 1) the readout is wrapped in DistributedDataParallel
(gloo on CPU, nccl on CUDA), a DistributedSampler splits each epoch across ranks, statistics are
computed on rank 0 and broadcast, and only rank 0 writes files.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import json
import os
import random
import re
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data.distributed import DistributedSampler

from .images import ImageError, load_image, load_sample, sample_image_names
from .model_state import frozen_eval
from .models import DEFAULT_MODEL, load_model
from .readout import (
    DEFAULT_HIDDEN,
    ReadoutBottleneck,
    ReadoutCheckpointError,
    load_checkpoint,
    make_checkpoint,
    readout_from_checkpoint,
    save_checkpoint,
    state_digest,
)
from .stats import _random_resized_crop, find_images, get_stats, sample_photo_batches

WNID = re.compile(r"^n\d{8}$")
#: Preview image when training on the sample photos.
PREVIEW_SAMPLE = "chelsea"


class DataError(ValueError):
    """An image folder that cannot be used for training (no images, labels that cannot be resolved)."""


# --------------------------------------------------------------------------------------------
# Configuration.


@dataclass
class TrainConfig:
    """Everything a training run depends on (stored in each checkpoint)."""

    model: str = DEFAULT_MODEL
    weights: str = "pretrained"  # "pretrained", "random" or a state-dict file
    device: str = "cpu"
    images: str | None = None  # image folder; None: the offline sample photos
    sample_photos: int = 0  # crops of the sample photos per epoch (when images is None)
    extra_photos: bool = False  # with sample_photos: also the other offline photos (offline_photos)
    repeats: int = 1  # augmented crops per folder image and epoch
    labels: str = "auto"  # "auto" | "folders" | "top1"
    class_map: str | None = None
    layer: str | None = None  # bottleneck layer (default: the network's readout layer)
    reads: tuple[str, ...] | None = None  # read-out layers (default: readout.READOUT_READS)
    hidden: tuple[int, int] = DEFAULT_HIDDEN
    epochs: int = 10  # paper: 10 (table; the text says 20)
    batch_size: int = 16  # paper: 16
    lr: float = 1e-5  # paper: 1e-5
    beta_k: float = 10.0  # paper: β = 10/k
    sigma: float = 1.0  # paper: σ_s = 1
    seed: int = 0
    stats_n: int = 1000  # images for the feature statistics
    workers: int = 0
    out: str = "readout_runs"
    save_every: int = 0  # also checkpoint every N steps within an epoch (0: only at epoch ends)
    max_steps: int = 0  # stop each epoch after N steps (0: whole epoch); for quick trials
    log_every: int = 10  # steps per entry of the loss curve kept in the checkpoint
    preview: str | None = None  # image for the per-epoch preview (default: first image / chelsea)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in known}
        return cls(**kw)

    def validate(self) -> "TrainConfig":
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch size must be ≥ 1.")
        if not self.lr > 0:
            raise ValueError(f"The learning rate must be positive, got {self.lr}.")
        if not np.isfinite(self.beta_k) or self.beta_k < 0:
            raise ValueError(f"β·k must be a non-negative number, got {self.beta_k}.")
        if self.images is None and self.sample_photos < 1:
            raise ValueError("Give an image folder, or a number of sample-photo crops per epoch.")
        if self.labels not in ("auto", "folders", "top1"):
            raise ValueError(f"labels must be auto, folders or top1, got {self.labels!r}.")
        if self.stats_n < 1 or self.repeats < 1 or self.workers < 0:
            raise ValueError("stats_n and repeats must be ≥ 1, workers ≥ 0.")
        return self


# --------------------------------------------------------------------------------------------
# Labels.


def read_class_map(path: str | os.PathLike) -> dict[str, int]:
    """wnid → class index from LOC_synset_mapping.txt / one-wnid-per-line text / imagenet_class_index.json."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise DataError(f"Cannot read the class map {path}: {err}") from err
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
            mapping = {str(v[0]): int(k) for k, v in data.items()}
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
            raise DataError(f"{path} is not an imagenet_class_index.json-style map ({{\"0\": [wnid, name]}}).") from err
    else:
        wnids = [line.split()[0] for line in text.splitlines() if line.strip()]
        mapping = {w: i for i, w in enumerate(wnids)}
    bad = [w for w in mapping if not WNID.match(w)]
    if bad or not mapping:
        raise DataError(f"{path} does not list WordNet ids (e.g. n01440764); found {bad[:3] or 'nothing'}.")
    return mapping


def folder_labels(
    root: str | os.PathLike,
    files: Sequence[Path],
    categories: Sequence[str],
    mode: str = "auto",
    class_map: str | os.PathLike | None = None,
) -> tuple[list[int], str]:
    """A class index per file (-1: use the network's top-1) and a sentence saying where labels came from."""
    root = Path(root).expanduser()
    if mode == "top1":
        return [-1] * len(files), "the network's own top-1 on each crop (labels=top1)"
    top = [p.relative_to(root).parts[0] if len(p.relative_to(root).parts) > 1 else None for p in files]
    folders = sorted({t for t in top if t is not None})
    if not folders:
        if mode == "folders":
            raise DataError(f"No class folders below {root}; put images in folders named by class, or use labels=top1.")
        return [-1] * len(files), "the network's own top-1 on each crop (unlabelled folder)"
    n = len(categories)
    mapping: dict[str, int] = {}
    wnids = [f for f in folders if WNID.match(f)]
    how = ""
    if wnids:
        if len(wnids) != len(folders):
            raise DataError(f"Class folders below {root} mix WordNet ids with other names: {folders[:5]} …")
        if class_map is not None:
            table = read_class_map(class_map)
            unknown = [w for w in wnids if w not in table]
            if unknown:
                raise DataError(f"The class map {class_map} has no entry for {', '.join(unknown[:5])}.")
            mapping, how = {w: table[w] for w in wnids}, f"WordNet-id folders via {class_map}"
        elif len(wnids) == n:
            mapping, how = {w: i for i, w in enumerate(sorted(wnids))}, "WordNet-id folders in sorted order (all 1000)"
        else:
            raise DataError(
                f"The class folders below {root} are named by WordNet id, but only {len(wnids)} of the {n} classes "
                "are present and no offline wnid → index table exists. Pass a class map (--class-map "
                "LOC_synset_mapping.txt or imagenet_class_index.json), rename the folders to class indices "
                "(0…999) or class names, or use --labels top1."
            )
    else:
        by_name: dict[str, list[int]] = {}
        for i, c in enumerate(categories):
            by_name.setdefault(c.lower(), []).append(i)
        for f in folders:
            if f.isdigit() and 0 <= int(f) < n:
                mapping[f] = int(f)
            elif len(by_name.get(f.lower(), [])) == 1:
                mapping[f] = by_name[f.lower()][0]
            elif len(by_name.get(f.lower(), [])) > 1:
                idx = by_name[f.lower()]
                raise DataError(f"The class name {f!r} is ambiguous (indices {idx}); name the folder by index.")
            else:
                raise DataError(
                    f"Cannot tell the class of folder {f!r} below {root}: name class folders by index (0…{n - 1}), "
                    "by class name or by WordNet id, or use --labels top1."
                )
        how = "class folders (index or class name)"
    labels = [-1 if t is None else mapping[t] for t in top]
    unlabelled = labels.count(-1)
    if unlabelled:
        how += f"; {unlabelled} images outside class folders use the network's top-1"
    return labels, how


# --------------------------------------------------------------------------------------------
# Datasets.


def _item_rng(seed: int, epoch: int, index: int) -> random.Random:
    """An RNG for one item of one epoch: the same crop whatever worker or rank draws it."""
    return random.Random(f"{seed}:{epoch}:{index}")


def _to_tensor(img, mean, std) -> torch.Tensor:
    import torchvision.transforms.functional as TF

    return TF.normalize(TF.to_tensor(img), mean, std)


class _EpochDataset(Dataset):
    def __init__(self, preprocess, seed: int = 0, augment: bool = True):
        self.preprocess, self.seed, self.augment, self.epoch = preprocess, seed, augment, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _tensor(self, img, index: int) -> torch.Tensor:
        if self.augment:
            img = _random_resized_crop(img, self.preprocess.crop_size, _item_rng(self.seed, self.epoch, index))
        else:
            img = self.preprocess.crop(img)
        return _to_tensor(img, self.preprocess.mean, self.preprocess.std)


class ImageFolderDataset(_EpochDataset):
    """Images below a folder with their labels; unreadable files are replaced by the next readable one."""

    def __init__(self, root, preprocess, categories, *, labels="auto", class_map=None, seed=0, augment=True,
                 repeats=1, limit: int | None = None):
        super().__init__(preprocess, seed, augment)
        try:
            files = find_images(root)
        except FileNotFoundError as err:
            raise DataError(str(err)) from err
        if not files:
            raise DataError(f"No images (jpg, png, …) found below {root}.")
        self.root = Path(root).expanduser()
        self.files = files[:limit] if limit else files
        self.labels, self.label_source = folder_labels(root, self.files, categories, labels, class_map)
        self.repeats = repeats
        self.skipped: set[int] = set()

    def describe(self) -> str:
        return f"{len(self.files)} images below {self.root.resolve()} ×{self.repeats}; labels: {self.label_source}"

    def __len__(self) -> int:
        return len(self.files) * self.repeats

    def __getitem__(self, index: int):
        n = len(self.files)
        for k in range(n):
            i = (index + k) % n
            try:
                img = load_image(self.files[i])
            except (ImageError, OSError):
                if i not in self.skipped:
                    self.skipped.add(i)
                    warnings.warn(f"Skipping unreadable image {self.files[i]}", stacklevel=2)
                continue
            return self._tensor(img, index), self.labels[i]
        raise DataError(f"None of the images below {self.root} could be read.")


def offline_photos(extended: bool = False) -> dict[str, "Image.Image"]:
    """The real photos this machine has without a download, by name.

    Always the app's colour sample photos (`images.sample_image_names`). extended=True adds the other
    real photographs that ship inside installed packages: scikit-image's right view of the stereo
    motorcycle pair and its grey-scale photos `camera`, `clock`, `coins` (as RGB), and matplotlib's
    `grace_hopper.jpg` (skipped where matplotlib is missing).
    """
    photos = {name: load_sample(name) for name in sample_image_names()}
    if not extended:
        return photos
    import skimage.data
    from PIL import Image

    try:
        right = np.ascontiguousarray(skimage.data.stereo_motorcycle()[1])
        photos["motorcycle_right"] = load_image(Image.fromarray(right))
        for name in ("camera", "clock", "coins"):
            photos[name] = load_image(Image.fromarray(np.ascontiguousarray(getattr(skimage.data, name)())))
    except Exception as err:  # noqa: BLE001 - an older scikit-image may lack one: fewer photos, not a failure
        warnings.warn(f"Some scikit-image photos are unavailable ({err}).", stacklevel=2)
    try:
        from matplotlib import cbook

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            photos["grace_hopper"] = load_image(f.read())
    except Exception:  # noqa: BLE001 - matplotlib is optional
        pass
    return photos


class SamplePhotoDataset(_EpochDataset):
    """`n` augmented crops per epoch of the offline photos (`offline_photos`); labels: the network's top-1."""

    def __init__(self, n: int, preprocess, seed: int = 0, extended: bool = False):
        super().__init__(preprocess, seed, augment=True)
        self.n, self.extended = n, extended
        self._photos = None
        self.names = list(offline_photos(extended)) if extended else sample_image_names()
        self.label_source = "the network's own top-1 on each crop"

    def describe(self) -> str:
        return f"{self.n} augmented crops per epoch of {len(self.names)} offline photos ({', '.join(self.names)})"

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if self._photos is None:  # loaded lazily, once per worker
            self._photos = list(offline_photos(self.extended).values())
        return self._tensor(self._photos[index % len(self._photos)], index), -1


class _SkipSampler(Sampler):
    """The base sampler's order without its first `skip` indices (resuming mid-epoch)."""

    def __init__(self, base: Sampler, skip: int):
        self.base, self.skip = base, skip

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.base), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.base) - self.skip)


# --------------------------------------------------------------------------------------------
# Statistics.


def channel_stats(rb: ReadoutBottleneck, batches) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
    """Per-channel mean and std of every read-out layer (pooled over images and space), float64 sums."""
    sums: list[torch.Tensor] | None = None
    squares: list[torch.Tensor] = []
    counts: list[int] = []
    n = 0
    with frozen_eval(*rb.passes.modules), torch.inference_mode():
        for x in batches:
            out = rb.passes.first_pass(x.to(rb.mean.device))
            maps = [out[name] for name in rb.config.reads]
            if sums is None:
                sums = [torch.zeros(m.shape[1], dtype=torch.float64, device=m.device) for m in maps]
                squares = [s.clone() for s in sums]
                counts = [0] * len(maps)
            for i, m in enumerate(maps):
                m = m.to(torch.float64)
                dims = [0] + list(range(2, m.dim()))
                sums[i] += m.sum(dim=dims)
                squares[i] += (m * m).sum(dim=dims)
                counts[i] += m.numel() // m.shape[1]
            n += x.shape[0]
    if sums is None:
        raise DataError("No images to estimate the read-out statistics from.")
    result = []
    for s, q, c in zip(sums, squares, counts):
        mean = s / c
        var = (q / c - mean**2).clamp_min(0.0) * (c / max(c - 1, 1))
        result.append((mean.float().cpu(), var.sqrt().float().cpu()))
    return result, n


def compute_statistics(rb: ReadoutBottleneck, loaded, cfg: TrainConfig, log: Callable[[str], None]) -> None:
    """Bottleneck statistics (cached, shared with the Per-Sample Bottleneck) and read-out normalisation."""
    layer = rb.config.layer
    log(f"statistics: {layer} (per element) and {', '.join(rb.config.reads)} (per channel), {cfg.stats_n} images")
    stats = get_stats(loaded, layer, images=cfg.images, n=cfg.stats_n)
    if cfg.images is not None:
        ds = ImageFolderDataset(cfg.images, loaded.preprocess, loaded.categories, labels="top1", augment=False,
                                limit=cfg.stats_n)
        batches = (x for x, _ in DataLoader(ds, batch_size=32, num_workers=cfg.workers))
    else:
        batches = sample_photo_batches(loaded.preprocess, cfg.stats_n, 32, cfg.seed)
    read_stats, n = channel_stats(rb, batches)
    rb.set_statistics(stats.mean.to(rb.mean.device), stats.std.to(rb.mean.device), read_stats, {
        "bottleneck": stats.describe(), "bottleneck_samples": stats.n,
        "reads": f"per-channel over {n} images", "reads_samples": n,
    })


# --------------------------------------------------------------------------------------------
# Distributed helpers.


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> DistInfo:
    """Join the process group that torchrun describes in the environment (no-op for one process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dev = torch.device(device)
    if world <= 1:
        return DistInfo(device=dev)
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    owns = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        owns = True
    return DistInfo(rank, world, local, dev, owns)


def _broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    with torch.no_grad():
        for t in module.state_dict().values():
            dist.broadcast(t, src)


def _step_seed(seed: int, epoch: int, step: int, rank: int) -> int:
    digest = hashlib.sha256(f"noise:{seed}:{epoch}:{step}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _rng_state() -> dict:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": [list(x) if isinstance(x, tuple) else x for x in random.getstate()],
    }


def _set_rng_state(state: dict) -> None:
    if not state:
        return
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    npst = state["numpy"]
    np.random.set_state(("MT19937", npst["keys"].numpy().astype(np.uint32), npst["pos"], npst["has_gauss"],
                         npst["cached_gaussian"]))
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))


# --------------------------------------------------------------------------------------------
# Preview.


def _preview_image(cfg: TrainConfig, dataset, loaded):
    if cfg.preview:
        return loaded.preprocess.crop(load_image(cfg.preview))
    if isinstance(dataset, ImageFolderDataset):
        for path in dataset.files:
            try:
                return loaded.preprocess.crop(load_image(path))
            except (ImageError, OSError):
                continue
    return loaded.preprocess.crop(load_sample(PREVIEW_SAMPLE))


def save_preview(rb: ReadoutBottleneck, cropped, path: Path, title: str = "") -> dict:
    """The cropped image next to its readout heatmap (colour-mapped, normalised to its max)."""
    from PIL import Image, ImageDraw

    x = rb._loaded.preprocess.normalise(cropped)
    heat = rb.heatmap(x)
    try:
        from .plots import colorize, overlay_image

        right = Image.fromarray(colorize(heat))
        middle = overlay_image(cropped, heat)
    except ImportError:  # plotting extras missing: a grey-scale map still shows the result
        g = (255 * heat / max(float(heat.max()), 1e-12)).astype(np.uint8)
        right = middle = Image.fromarray(g).convert("RGB")
    w, h = cropped.size
    canvas = Image.new("RGB", (3 * w, h + 18), "white")
    for i, im in enumerate((cropped, middle, right.resize((w, h)))):
        canvas.paste(im.convert("RGB"), (i * w, 18))
    ImageDraw.Draw(canvas).text((4, 3), f"{title}  total {heat.sum():.0f} bits, max {heat.max():.3f} bits/px",
                                fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.png")
    canvas.save(tmp)
    os.replace(tmp, path)
    return {"total_bits": float(heat.sum()), "max_bits_per_pixel": float(heat.max())}


# --------------------------------------------------------------------------------------------
# Training.


def build_dataset(cfg: TrainConfig, loaded):
    if cfg.images is not None:
        return ImageFolderDataset(cfg.images, loaded.preprocess, loaded.categories, labels=cfg.labels,
                                  class_map=cfg.class_map, seed=cfg.seed, repeats=cfg.repeats)
    return SamplePhotoDataset(cfg.sample_photos, loaded.preprocess, cfg.seed, extended=cfg.extra_photos)


RESUME_OVERRIDABLE = ("epochs", "device", "workers", "out", "save_every", "max_steps", "preview", "images",
                      "class_map", "weights", "log_every")


def train_readout(
    cfg: TrainConfig,
    *,
    resume: str | os.PathLike | None = None,
    overrides: Sequence[str] | None = None,
    loaded=None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train (or resume training) a Readout Bottleneck; returns a summary for this rank.

    On resume the checkpoint's configuration is used; `overrides` names the fields of `cfg` to apply
    on top (default: the fields of `cfg` that differ from TrainConfig's defaults); only those in
    RESUME_OVERRIDABLE can change (e.g. more epochs, another output folder, a moved image folder).
    Others (lr, batch size, β, layers, …) cannot change mid-run and are ignored with a warning.

    loaded: an already loaded network to reuse (must match cfg.model and cfg.weights); by default
    it is loaded from cfg.
    """
    if log is None:
        def log(msg: str) -> None:
            print(msg, file=sys.stderr, flush=True)
    ckpt = None
    if resume is not None:
        ckpt = load_checkpoint(resume)
        training = ckpt.get("training") or {}
        if "optimizer" not in training or "config" not in training:
            raise ReadoutCheckpointError(
                f"{resume} holds no optimiser state (an exported, inference-only checkpoint); it cannot be resumed."
            )
        saved = TrainConfig.from_dict(training["config"])
        if overrides is None:  # the fields the caller changed from the defaults
            defaults = TrainConfig()
            overrides = [f.name for f in fields(TrainConfig) if getattr(cfg, f.name) != getattr(defaults, f.name)]
        for name in overrides:
            if name in RESUME_OVERRIDABLE:
                setattr(saved, name, getattr(cfg, name))
            elif getattr(cfg, name) != getattr(saved, name):
                warnings.warn(f"Resuming keeps the checkpoint's {name}={getattr(saved, name)!r}; "
                              f"{getattr(cfg, name)!r} is ignored.", stacklevel=2)
        cfg = saved
    cfg.validate()
    di = setup_distributed(cfg.device)
    say = log if di.main else (lambda msg: None)
    try:
        return _train(cfg, ckpt, resume, di, progress and di.main, say, loaded)
    finally:
        if di.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _train(cfg: TrainConfig, ckpt: dict | None, resume, di: DistInfo, progress: bool, say, loaded=None) -> dict:
    from tqdm import tqdm

    if loaded is None:
        loaded = load_model(cfg.model, weights=cfg.weights, device=di.device)
    elif loaded.key != cfg.model or (cfg.weights in ("random",) and loaded.weights_id != "random") \
            or loaded.device != di.device:
        raise ValueError(f"The network passed in ({loaded.key}, {loaded.weights_id}, {loaded.device}) does not "
                         f"match the run's settings ({cfg.model}, {cfg.weights}, {di.device}).")
    dataset = build_dataset(cfg, loaded)
    say(f"data: {dataset.describe()}")
    history: list[dict] = []
    curve: list[list[float]] = []
    epoch0 = step0 = global_step = 0
    seconds0 = 0.0
    if ckpt is not None:
        rb = readout_from_checkpoint(ckpt, loaded, str(resume)).train()
        tr = ckpt["training"]
        epoch0, step0, global_step = int(tr["epoch"]), int(tr["step"]), int(tr["global_step"])
        history, curve = list(tr.get("history", [])), [list(c) for c in tr.get("curve", [])]
        seconds0 = float(tr.get("seconds", 0.0))
        _set_rng_state(tr.get("rng", {}))
        say(f"resuming from {resume}: epoch {epoch0 + 1}, step {step0}")
    else:
        torch.manual_seed(cfg.seed)  # the readout's initial weights
        rb = ReadoutBottleneck.create(loaded, cfg.layer, cfg.reads, hidden=cfg.hidden, sigma=cfg.sigma,
                                      beta_k=cfg.beta_k)
        if di.main:
            compute_statistics(rb, loaded, cfg, say)
    if di.distributed:
        _broadcast_module(rb)  # rank 0's statistics (and, on resume, identical weights) everywhere
    rb.train()
    model = rb
    if di.distributed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(rb, device_ids=[di.device.index] if di.device.type == "cuda" else None,
                    broadcast_buffers=False)
    optimiser = torch.optim.Adam(rb.parameters(), lr=cfg.lr)
    if ckpt is not None:
        optimiser.load_state_dict(ckpt["training"]["optimizer"])

    out_dir = Path(cfg.out).expanduser()
    preview_crop = _preview_image(cfg, dataset, loaded) if di.main else None
    sampler = DistributedSampler(dataset, num_replicas=di.world, rank=di.rank, shuffle=True, seed=cfg.seed)
    steps_per_epoch = -(-len(sampler) // cfg.batch_size)
    if cfg.max_steps:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps)
    say(f"readout: {rb.config.model}/{rb.config.layer} reading {', '.join(rb.config.reads)}; "
        f"{sum(p.numel() for p in rb.parameters())} parameters; {di.world} process(es); "
        f"{steps_per_epoch} steps/epoch of {cfg.batch_size} per process; lr {cfg.lr}, β·k {rb.config.beta_k}")

    def checkpoint(epoch: int, step: int, name: str, seconds: float, partial: list | None = None) -> Path | None:
        """Rank 0 writes everything needed to continue: weights, optimiser, position, RNG, config, history."""
        if not di.main:
            return None
        training = {
            "epoch": epoch, "step": step, "global_step": global_step, "complete": step == 0,
            "optimizer": optimiser.state_dict(), "rng": _rng_state(), "config": cfg.to_dict(),
            "history": history, "curve": curve, "seconds": seconds, "world_size": di.world,
            "data": dataset.describe(),
            # sums (loss·n, ce·n, info·n, n) of the unfinished epoch's steps, so its history entry stays whole
            "epoch_totals": [t.clone() for t in partial] if step and partial else [],
        }
        ck = make_checkpoint(rb, training)
        path = save_checkpoint(out_dir / name, ck)
        if name != "readout_last.pt":
            save_checkpoint(out_dir / "readout_last.pt", ck)
        return path

    def summed(t: torch.Tensor) -> torch.Tensor:
        """Sum over all processes (a collective: every rank calls it at the same step)."""
        if not di.distributed:
            return t.clone()
        r = t.to(di.device)
        dist.all_reduce(r)
        return r.cpu()

    if di.main and ckpt is None:
        with frozen_eval(*rb.network_modules):
            save_preview(rb, preview_crop, out_dir / "preview_epoch000.png", "before training")
    resumed_totals = None
    if ckpt is not None and ckpt["training"].get("epoch_totals") and di.main:
        resumed_totals = [t.to(torch.float64) for t in ckpt["training"]["epoch_totals"]]
    samples_seen = 0
    last_path = None
    start = time.perf_counter()
    epoch, step = epoch0, step0
    totals = window = torch.zeros(4, dtype=torch.float64)
    with frozen_eval(*rb.network_modules):
        try:
            for epoch in range(epoch0, cfg.epochs):
                skip = step0 if epoch == epoch0 else 0
                sampler.set_epoch(epoch)
                dataset.set_epoch(epoch)
                loader = DataLoader(dataset, batch_size=cfg.batch_size, num_workers=cfg.workers,
                                    sampler=_SkipSampler(sampler, skip * cfg.batch_size),
                                    pin_memory=di.device.type == "cuda")
                # loss·n, ce·n, info·n, n of this epoch; on resume, rank 0 carries the steps done before
                totals = torch.zeros(4, dtype=torch.float64)
                window = torch.zeros(4, dtype=torch.float64)  # rank 0's running loss curve
                if skip and resumed_totals is not None:
                    totals, window = resumed_totals[0].clone(), resumed_totals[1].clone()
                bar = tqdm(total=steps_per_epoch, initial=min(skip, steps_per_epoch), unit="step",
                           desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress, file=sys.stderr,
                           dynamic_ncols=True)
                step = skip
                for x, labels in loader:
                    if step >= steps_per_epoch:
                        break
                    x, labels = x.to(di.device, non_blocking=True), labels.to(di.device)
                    gen = torch.Generator(device=di.device).manual_seed(_step_seed(cfg.seed, epoch, step, di.rank))
                    optimiser.zero_grad(set_to_none=True)
                    out = model(x, labels, gen)
                    out.loss.backward()
                    optimiser.step()
                    step += 1
                    global_step += 1
                    n = x.shape[0]
                    samples_seen += n
                    vals = torch.tensor([out.loss.item() * n, out.ce.item() * n, out.info.item() * n, n],
                                        dtype=torch.float64)
                    totals += vals
                    window += vals
                    if cfg.log_every and step % cfg.log_every == 0:
                        w = window / window[3]
                        curve.append([global_step, float(w[0]), float(w[1]), float(w[2])])
                        window.zero_()
                    t = totals / totals[3]
                    bar.set_postfix(loss=f"{t[0]:.3f}", ce=f"{t[1]:.3f}", L_I=f"{t[2]:.4g}")
                    bar.update(1)
                    if cfg.save_every and step % cfg.save_every == 0 and step < steps_per_epoch:
                        last_path = checkpoint(epoch, step, "readout_last.pt", seconds0 + time.perf_counter() - start,
                                               [summed(totals), window])
                bar.close()
                totals = summed(totals)
                t = totals / totals[3].clamp_min(1)
                entry = {
                    "epoch": epoch + 1, "loss": float(t[0]), "ce": float(t[1]), "info_nats": float(t[2]),
                    "beta_info": float(t[2]) * rb.config.beta,
                    "info_bits_per_element": float(t[2]) / rb.config.k / math.log(2),
                    "samples": int(totals[3]), "seconds": round(seconds0 + time.perf_counter() - start, 2),
                }
                step = 0
                if di.main:
                    entry["preview"] = save_preview(rb, preview_crop, out_dir / f"preview_epoch{epoch + 1:03d}.png",
                                                    f"epoch {epoch + 1}")
                history.append(entry)
                say(f"epoch {epoch + 1}: loss {entry['loss']:.4f}  ce {entry['ce']:.4f}  "
                    f"L_I {entry['info_nats']:.1f} nats ({entry['info_bits_per_element']:.3f} bits/element)")
                last_path = checkpoint(epoch + 1, 0, f"readout_epoch{epoch + 1:03d}.pt", entry["seconds"])
                if di.main:
                    (out_dir / "history.json").write_text(json.dumps(history, indent=1))
        except KeyboardInterrupt:
            # Not a collective: under DDP the unfinished epoch's sums are rank 0's only (an approximation).
            path = checkpoint(epoch, step, "readout_last.pt", seconds0 + time.perf_counter() - start,
                              [totals, window])
            if path is not None:
                say(f"interrupted: saved {path}; continue with --resume {path}")
            raise
    return {
        "event": "done", "rank": di.rank, "world_size": di.world, "epochs": cfg.epochs,
        "global_step": global_step, "samples_seen": samples_seen,
        "weights_sha256": state_digest(rb),
        "checkpoint": str(last_path) if last_path else None,
        "history": history if di.main else None,
    }
