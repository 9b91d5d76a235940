"""Image sources and the labels of image folders: one place for evaluation, statistics and readout training.

Image sources (below): the offline photos, augmented crops of them (`random_resized_crop`,
`sample_photo_batches`) and batches from an image folder (`FolderBatches`); feature statistics,
PatternAttribution's patterns and readout training all draw their images from here.

A *label* is the name of an image's class folder or an entry of a label file. `LabelResolver` turns
one into a class index, with the same rules everywhere:

- a **class index** (``285``), checked against the number of classes;
- a **WordNet id** (``n02123045``) through a wnid → index table. No such table ships offline, so it
  comes from a file (`read_label_file`: ImageNet's ``LOC_synset_mapping.txt`` / ``synsets.txt`` or
  any text file with one wnid per line in class-index order, ``<wnid>,<index>`` rows, or Keras'
  ``imagenet_class_index.json``), or, for a tree holding a folder for every class, from the sorted
  order of the folders (the ILSVRC-2012 convention torchvision's ImageFolder also follows);
- a **class name** as the network lists it (``tabby``, case-insensitive, or a part of a name that
  fits exactly one class: `iba_core.classes.resolve_class`); a name that two classes share
  (ImageNet has two ``crane``s) is ambiguous and resolves to nothing.

An image's class folder is the top-level folder below the image root (`class_folder`), so images in
sub-folders of a class folder belong to that class; images directly in the root have none.

Two policies use the resolver:
- readout training (`folder_labels`) is strict: every class folder must resolve, else a `DataError`
  says how to name it; unlabelled images (or ``mode="top1"``) get -1, the network's own top-1;
- evaluation (`iba_core.metrics.dataset.list_items`) is lenient: a label that does not resolve is
  None, and a label file's rows for single images come first.

Label files: separators may be commas, tabs or spaces; blank lines and lines starting with '#' are
ignored. A row is ``<image>,<label>`` (the image's path relative to the root, its file name or its
stem) or ``<wnid>,<index>``.
"""
from __future__ import annotations

import json
import os
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
from PIL import Image

from .classes import resolve_class
from .errors import UserError
from .images import ImageError, MultiBandImage, channels_text, load_image, load_sample, sample_image_names

WNID = re.compile(r"^n\d{8}$")
#: Label files found in an image root when none is named (evaluation).
LABEL_FILES = ("labels.txt", "labels.csv", "LOC_synset_mapping.txt", "synsets.txt")


class DataError(UserError):
    """Images or labels that cannot be used (no images, class folders whose class cannot be told)."""


# --------------------------------------------------------------------------------------------
# Label files.


@dataclass
class LabelMap:
    images: dict[str, str]  # image path / name / stem → label text
    wnids: dict[str, int]  # WordNet id → class index

    @classmethod
    def empty(cls) -> "LabelMap":
        return cls({}, {})


def _split(line: str) -> list[str]:
    """Split at the first tab, else after a leading wnid + space, else at the first comma or space."""
    if "\t" in line:
        return [p.strip() for p in line.split("\t", 1)]
    head = line.split(None, 1)
    if WNID.match(head[0]):
        return head
    if "," in line:
        return [p.strip() for p in line.split(",", 1)]
    return head


def _read_class_index_json(path: Path, text: str) -> LabelMap:
    """Keras' imagenet_class_index.json: {"0": [wnid, name], …}."""
    try:
        data = json.loads(text)
        wnids = {str(v[0]): int(k) for k, v in data.items()}
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as err:
        raise DataError(f"{path} is not an imagenet_class_index.json-style map ({{\"0\": [wnid, name]}}).") from err
    return LabelMap({}, wnids)


def read_label_file(path: str | os.PathLike) -> LabelMap:
    """Parse a label / wnid-mapping file (see the module docstring); OSError if it cannot be read."""
    path = Path(path).expanduser()
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        return _read_class_index_json(path, text)
    rows = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rows.append(_split(line))
    labels = LabelMap.empty()
    wnid_rows = [r for r in rows if WNID.match(r[0])]
    synset_list = bool(rows) and len(wnid_rows) == len(rows) and not any(
        len(r) > 1 and r[1].strip().isdigit() for r in rows
    )
    if synset_list:  # one wnid per line, in class-index order
        labels.wnids = {r[0]: i for i, r in enumerate(rows)}
        return labels
    for r in rows:
        if len(r) < 2:
            continue
        key, value = r[0], r[1].strip()
        if WNID.match(key) and value.isdigit():
            labels.wnids[key] = int(value)
        else:
            labels.images[key] = value
    return labels


def read_class_map(path: str | os.PathLike) -> dict[str, int]:
    """wnid → class index from a class map (any file `read_label_file` reads); DataError if it has none."""
    path = Path(path).expanduser()
    try:
        table = read_label_file(path).wnids
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"Cannot read the class map {path}: {err}") from err
    if not table:
        raise DataError(f"{path} does not list WordNet ids (e.g. n01440764).")
    return table


def find_label_file(root: str | os.PathLike) -> Path | None:
    """The first of LABEL_FILES present in `root`, if any."""
    root = Path(root)
    return next((root / n for n in LABEL_FILES if (root / n).is_file()), None)


# --------------------------------------------------------------------------------------------
# The resolver.


class LabelResolver:
    """Class index for a label (a folder name or a label file's text); see the module docstring.

    categories: the network's class names in index order (empty: indices are not range-checked and
    names do not resolve). class_index: resolves indices and names instead of `resolve_class` (e.g.
    `Network.class_index`, or a test's table). wnids: the wnid → index table.
    """

    def __init__(
        self,
        categories: Sequence[str] = (),
        wnids: Mapping[str, int] | None = None,
        class_index: Callable[[str], int] | None = None,
    ):
        self.categories = list(categories)
        self.wnids = dict(wnids or {})
        self.class_index = class_index

    def __call__(self, label: str) -> int:
        """The class index of `label`; DataError with the reason when there is none."""
        text = str(label).strip()
        if WNID.match(text):
            if text in self.wnids:
                return self.wnids[text]
            raise DataError(f"No class index is known for the WordNet id {text} (no wnid → index table has it).")
        try:
            if self.class_index is not None:
                return int(self.class_index(text))
            same = [i for i, name in enumerate(self.categories) if name.lower() == text.lower()]
            if len(same) > 1:
                raise DataError(f"The class name {text!r} is ambiguous (indices {same}); give its index.")
            return resolve_class(self.categories, text)
        except DataError:
            raise
        except (ValueError, KeyError) as err:
            raise DataError(str(err).strip("'\"")) from err

    def get(self, label: str) -> int | None:
        """The class index of `label`, or None when it does not resolve."""
        try:
            return self(label)
        except DataError:
            return None


def class_folder(root: str | os.PathLike, path: str | os.PathLike) -> str | None:
    """The class folder of an image: the top-level folder below `root` (None directly in root)."""
    parts = Path(path).relative_to(root).parts
    return parts[0] if len(parts) > 1 else None


def folder_labels(
    root: str | os.PathLike,
    files: Sequence[Path],
    categories: Sequence[str],
    mode: str = "auto",
    class_map: str | os.PathLike | None = None,
) -> tuple[list[int], str]:
    """A class index per file (-1: use the network's top-1) and a sentence saying where labels came from.

    mode: "auto" (class folders if there are any, else top-1), "folders" (class folders required) or
    "top1" (ignore folders). class_map: a wnid → index file for WordNet-id folders.
    """
    root = Path(root).expanduser()
    if mode == "top1":
        return [-1] * len(files), "the network's own top-1 on each crop (labels=top1)"
    top = [class_folder(root, p) for p in files]
    folders = sorted({t for t in top if t is not None})
    if not folders:
        if mode == "folders":
            raise DataError(f"No class folders below {root}; put images in folders named by class, or use labels=top1.")
        return [-1] * len(files), "the network's own top-1 on each crop (unlabelled folder)"
    n = len(categories)
    wnids = [f for f in folders if WNID.match(f)]
    table: dict[str, int] = {}
    how = "class folders (index or class name)"
    if wnids:
        if len(wnids) != len(folders):
            raise DataError(f"Class folders below {root} mix WordNet ids with other names: {folders[:5]} …")
        if class_map is not None:
            table = read_class_map(class_map)
            unknown = [w for w in wnids if w not in table]
            if unknown:
                raise DataError(f"The class map {class_map} has no entry for {', '.join(unknown[:5])}.")
            how = f"WordNet-id folders via {class_map}"
        elif len(wnids) == n:
            table, how = {w: i for i, w in enumerate(sorted(wnids))}, "WordNet-id folders in sorted order (all 1000)"
        else:
            raise DataError(
                f"The class folders below {root} are named by WordNet id, but only {len(wnids)} of the {n} classes "
                "are present and no offline wnid → index table exists.",
                cli_hint="Pass a class map (--class-map LOC_synset_mapping.txt or imagenet_class_index.json), "
                f"rename the folders to class indices (0…{n - 1}) or class names, or use --labels top1.",
                app_hint=f"Rename the folders to class indices (0…{n - 1}) or class names.",
            )
    resolve = LabelResolver(categories, table)
    mapping: dict[str, int] = {}
    for f in folders:
        try:
            mapping[f] = resolve(f)
        except DataError as err:
            raise DataError(
                f"Cannot tell the class of folder {f!r} below {root}: {err}",
                cli_hint=f"Name class folders by index (0…{n - 1}), by class name or by WordNet id, or use "
                "--labels top1.",
                app_hint=f"Name class folders by index (0…{n - 1}), by class name or by WordNet id.",
            ) from err
    labels = [-1 if t is None else mapping[t] for t in top]
    unlabelled = labels.count(-1)
    if unlabelled:
        how += f"; {unlabelled} images outside class folders use the network's top-1"
    return labels, how


# --------------------------------------------------------------------------------------------
# Image sources.


def offline_photos(extended: bool = False) -> dict[str, "Image.Image"]:
    """The real photos this machine has without a download, by name.

    Always the app's colour sample photos (`images.sample_image_names`). extended=True adds the other
    real photographs that ship inside installed packages: scikit-image's right view of the stereo
    motorcycle pair and its grey-scale photos `camera`, `clock`, `coins` (as RGB), and matplotlib's
    `grace_hopper.jpg` (skipped where matplotlib is missing).
    """
    photos: dict[str, Image.Image] = {name: load_sample(name) for name in sample_image_names()}
    if not extended:
        return photos
    import skimage.data

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


def check_photos_fit(preprocess) -> None:
    """A DataError when the offline photos (RGB) cannot stand for the network's images: a network of more than
    3 bands needs a folder of its own images. (A 1-channel network reads them in gray.)"""
    channels = getattr(preprocess, "channels", 3)
    if channels > 3:
        raise DataError(
            f"The offline sample photos are RGB, so they cannot stand for the images of a network that takes "
            f"{channels_text(channels)} images; its feature statistics need a folder of its own {channels}-band "
            "images (.npy or .tif).",
            cli_hint="Give --stats-images FOLDER, or add stats_images = \"FOLDER\" to its model card.",
            app_hint="Add stats_images = \"folder of your images\" to its model card, or enter such a folder under "
            "*Feature statistics*.")


def random_resized_crop(img: Image.Image | MultiBandImage, size: int,
                        rng: random.Random) -> Image.Image | MultiBandImage:
    """Augmentation for the few offline photos: scale (0.25–1) and aspect (3/4–4/3) crop, random flip (a
    multi-band image is cropped as a tensor of its bands, antialiased)."""
    import torchvision.transforms.functional as TF

    w, h = img.size
    for _ in range(10):
        area = w * h * rng.uniform(0.25, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = int(round((area * aspect) ** 0.5)), int(round((area / aspect) ** 0.5))
        if 0 < cw <= w and 0 < ch <= h:
            left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
            break
    else:
        cw, ch, left, top = w, h, 0, 0
    bands = torch.from_numpy(img.data).permute(2, 0, 1) if isinstance(img, MultiBandImage) else img
    out = TF.resized_crop(bands, top, left, ch, cw, [size, size], antialias=True)
    out = TF.hflip(out) if rng.random() < 0.5 else out
    if isinstance(img, MultiBandImage):
        return MultiBandImage(out.permute(1, 2, 0).numpy(), img.display_bands, img.info)
    return out


def _shrink(img: Image.Image, short_side: int) -> Image.Image:
    scale = short_side / min(img.size)
    if scale >= 1:
        return img
    return img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.LANCZOS)


def photo_pool(exclude: Iterable[str] = ()) -> list[str]:
    """Names of the offline photos statistics are estimated from: all of `offline_photos(extended=True)`."""
    skip = set(exclude)
    return [name for name in offline_photos(extended=True) if name not in skip]


def sample_photo_batches(
    preprocess, n: int, batch_size: int = 32, seed: int = 0, photos: Iterable[str] | None = None
) -> Iterator[torch.Tensor]:
    """n augmented crops of the offline photos (`photo_pool()` unless named), normalised for the network (in gray
    for a 1-channel network; a DataError for one of more than 3 bands: `check_photos_fit`)."""
    check_photos_fit(preprocess)
    rng = random.Random(seed)
    pool = offline_photos(extended=True)
    names = list(photos) if photos is not None else photo_pool()
    # Shrink once: cropping the full-size photos (up to 1411 px) for every sample dominated the time.
    photos = [_shrink(pool[name], int(preprocess.crop_size * 1.5)) for name in names]
    done = 0
    while done < n:
        k = min(batch_size, n - done)
        crops = [random_resized_crop(photos[(done + i) % len(photos)], preprocess.crop_size, rng) for i in range(k)]
        yield torch.stack([preprocess.normalise(c)[0] for c in crops])
        done += k


class FolderBatches:
    """Batches from an image folder's files, read for the network's channels (`Preprocess.load`: photos, .npy
    and TIFF files); unreadable files (or files of another channel count) are skipped and counted, not fatal.

    One batch at a time: a pass over any number of files holds at most `batch_size` images."""

    def __init__(self, files: list[Path], preprocess, batch_size: int):
        self.files, self.preprocess, self.batch_size = files, preprocess, batch_size
        self.skipped = 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        batch: list[torch.Tensor] = []
        for path in self.files:
            try:
                batch.append(self.preprocess(self.preprocess.load(path))[0])
            except (ImageError, OSError):
                self.skipped += 1
                continue
            if len(batch) == self.batch_size:
                yield torch.stack(batch)
                batch = []
        if batch:
            yield torch.stack(batch)
