"""Training data: image folders with their labels, crops of the offline photos, resumable sampling.

Labels come from `iba_core.labels.folder_labels` (the label rules evaluation uses too): class
folders by index, class name or WordNet id; -1 means "the network's own top-1 on the same crop".
Augmentation: random resized crop (scale 0.25–1, aspect 3/4–4/3, the same helper the feature
statistics use) and horizontal flip, seeded per (seed, epoch, index): runs, resumes and any number
of data-loader workers or ranks give the same crops.
"""
from __future__ import annotations

import itertools
import random
import warnings
from pathlib import Path
from typing import Iterator

import torch
from torch.utils.data import Dataset, Sampler

from ...image_sources import check_photos_fit, offline_photos, random_resized_crop
from ...labels import DataError, folder_labels
from ...images import ImageError, find_images, sample_image_names
from .config import TrainConfig

def _item_rng(seed: int, epoch: int, index: int) -> random.Random:
    """An RNG for one item of one epoch: the same crop whatever worker or rank draws it."""
    return random.Random(f"{seed}:{epoch}:{index}")


class _EpochDataset(Dataset):
    def __init__(self, preprocess, seed: int = 0, augment: bool = True):
        self.preprocess, self.seed, self.augment, self.epoch = preprocess, seed, augment, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _tensor(self, img, index: int) -> torch.Tensor:
        if self.augment:
            img = random_resized_crop(img, self.preprocess.crop_size, _item_rng(self.seed, self.epoch, index))
        else:
            img = self.preprocess.crop(img)
        return self.preprocess.normalise(img)[0]


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
                img = self.preprocess.load(self.files[i])  # the network's channels: photos, .npy, TIFF
            except (ImageError, OSError) as err:
                if i not in self.skipped:
                    self.skipped.add(i)
                    warnings.warn(f"Skipping an unreadable or unusable image, {self.files[i]}: {err}", stacklevel=2)
                continue
            return self._tensor(img, index), self.labels[i]
        raise DataError(f"None of the images below {self.root} could be read.")


class SamplePhotoDataset(_EpochDataset):
    """`n` augmented crops per epoch of the offline photos (`offline_photos`); labels: the network's top-1."""

    def __init__(self, n: int, preprocess, seed: int = 0, extended: bool = False):
        check_photos_fit(preprocess)  # (a multi-band network needs a folder of its own images)
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


class SkipSampler(Sampler):
    """The base sampler's order without its first `skip` indices (resuming mid-epoch)."""

    def __init__(self, base: Sampler, skip: int):
        self.base, self.skip = base, skip

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(iter(self.base), self.skip, None)

    def __len__(self) -> int:
        return max(0, len(self.base) - self.skip)


def build_dataset(cfg: TrainConfig, network) -> ImageFolderDataset | SamplePhotoDataset:
    """The run's training data: the image folder, or crops of the offline photos."""
    if cfg.images is not None:
        return ImageFolderDataset(cfg.images, network.preprocess, network.categories, labels=cfg.labels,
                                  class_map=cfg.class_map, seed=cfg.seed, repeats=cfg.repeats)
    return SamplePhotoDataset(cfg.sample_photos, network.preprocess, cfg.seed, extended=cfg.extra_photos)
