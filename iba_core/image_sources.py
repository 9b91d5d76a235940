"""Image sources: where statistics, patterns and readout training draw their images from.

The offline photos (`offline_photos`: the app's sample photos, and with extended=True the other real
photographs that ship inside installed packages), augmented crops of them (`random_resized_crop`,
`sample_photo_batches`) and batches from an image folder (`FolderBatches`). Feature statistics,
PatternAttribution's patterns and readout training all draw their images from here; the labels of a
folder's images are `labels`' business.
"""
from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from PIL import Image

from .images import ImageError, load_image, load_sample, sample_image_names
from .band_images import MultiBandImage, channels_text
from .labels import DataError

__all__ = ["DataError", "FolderBatches", "check_photos_fit", "offline_photos", "photo_pool", "random_resized_crop",
           "sample_photo_batches"]


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
            "“Feature statistics”.")


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
        yield preprocess.normalise_batch(crops)
        done += k


class FolderBatches:
    """Batches from an image folder's files, read for the network's channels (`Preprocess.load`: photos, .npy
    and TIFF files); unreadable files (or files of another channel count, or smaller than `images.MIN_SIDE`) are skipped and counted, not fatal.

    One batch at a time: a pass over any number of files holds at most `batch_size` images."""

    def __init__(self, files: list[Path], preprocess, batch_size: int):
        self.files, self.preprocess, self.batch_size = files, preprocess, batch_size
        self.skipped = 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        batch: list = []  # crops; normalised together (`Preprocess.normalise_batch`): it checks nothing crop did not
        for path in self.files:
            try:
                batch.append(self.preprocess.crop(self.preprocess.load(path)))
            except (ImageError, OSError):
                self.skipped += 1
                continue
            if len(batch) == self.batch_size:
                yield self.preprocess.normalise_batch(batch)
                batch = []
        if batch:
            yield self.preprocess.normalise_batch(batch)
