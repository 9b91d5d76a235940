"""Checks of what users give the app: images (uploads and sample photos) and object boxes.

Each check raises an error with a message written for users (ImageError or ValueError).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np
from PIL import Image

from ..errors import UserError
from ..images import FORMAT_INFO, FRAMES_INFO, ImageError, load_sample
from ..band_images import MultiBandImage, channels_text, load_input
from ..networks.spec import CROP

#: Uploads above this size are refused before decoding (the widget enforces it in the browser too).
MAX_UPLOAD_MB = 25
#: The digest of a sample photo: this prefix and its name (an upload's is `image_digest`'s 16 hex digits).
SAMPLE_PREFIX = "sample:"
#: Images with a shorter side below this many pixels get a warning: the network sees a blown-up copy.
MIN_SIDE = 32
#: Images whose long side exceeds this many times the short side get a warning: most is cropped away.
MAX_ASPECT = 4.0


# ---- images ------------------------------------------------------------------------------------


@dataclass
class ImageInput:
    """An image chosen by the user: its display name, the decoded picture (read for the network's channels:
    `band_images.load_input`) and a content digest."""

    name: str
    image: Image.Image | MultiBandImage
    digest: str  # identifies the content for caches (same bytes → same digest)

    @property
    def format_note(self) -> str | None:
        """What was made of the file itself, for a caption: the first frame of a GIF or an animation."""
        frames = int(self.image.info.get(FRAMES_INFO, 1) or 1)
        fmt = self.image.info.get(FORMAT_INFO)
        if fmt == "GIF":
            more = f" of its {frames} frames" if frames > 1 else ""
            return f"GIF: the network sees the first frame{more}, as an RGB photo."
        if frames > 1 and fmt in ("WEBP", "TIFF"):  # (a phone's multi-picture JPEG needs no note)
            return f"{fmt}: the file holds {frames} frames; the network sees the first."
        return None


def size_warnings(size: tuple[int, int], resize: int, crop: int = CROP) -> list[str]:
    """Warnings about what preprocessing (short side → `resize`, centre `crop`) does to an image of `size`.

    An image with a side under MIN_SIDE px is blown up many times (the network sees a blurry enlargement);
    one with an aspect ratio above MAX_ASPECT:1 loses most of its area to the centre crop.
    """
    width, height = size
    short, long = min(width, height), max(width, height)
    out = []
    if short < MIN_SIDE:
        out.append(
            f"The image is only {width} × {height} px: it was upscaled {resize / short:.0f}× (short side to "
            f"{resize} px) before the {crop} × {crop} crop, so the network sees a blurry enlargement."
        )
    if short > 0 and long / short > MAX_ASPECT:
        kept = min(crop / (resize * long / short), 1.0) * min(crop / resize, 1.0)
        out.append(
            f"The image is {width} × {height} px ({long / short:.1f} : 1): the network sees only the centre "
            f"square, about {kept:.0%} of the picture; the rest was cropped away."
        )
    return out


def image_digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def upload_input(name: str, data: bytes, max_mb: int = MAX_UPLOAD_MB, *, channels: int = 3,
                 display_bands=None) -> ImageInput:
    """Validate and decode uploaded bytes for a network of `channels` input channels (a photo; a .npy or
    multi-band TIFF for more than 3: `band_images.load_input`); raises ImageError with a user-facing message."""
    if len(data) > max_mb * 1024 * 1024:
        raise ImageError(
            f"The file {name!r} is {len(data) / 2**20:.1f} MB; uploads are limited to {max_mb} MB. "
            "Please resize or re-compress it."
        )
    try:
        image = load_input(data, channels, display_bands)
    except ImageError as err:  # name the file: uploads of any type reach this check
        raise ImageError(_named(str(err), name)) from err
    return ImageInput(name=name, image=image, digest=image_digest(data))


def _named(message: str, name: str) -> str:
    """'The file is not …' → 'The file photo.heic is not …' (the loader's messages start like this)."""
    for start in ("The image file ", "The file ", "The image "):
        if message.startswith(start):
            return f"{start}{name} {message[len(start):]}"
    return f"{name}: {message}"


def sample_input(name: str, channels: int = 3) -> ImageInput:
    """One of the offline sample photos (in gray for a 1-channel network); an ImageError for a network of more
    than 3 bands, which the RGB photos cannot serve."""
    if channels > 3:
        raise ImageError(f"The sample photos are RGB, but the network takes {channels_text(channels)} images; "
                         f"upload one of its images ({upload_types_text(channels)}).")
    return ImageInput(name=name, image=load_input(load_sample(name), channels), digest=SAMPLE_PREFIX + name)


def upload_types_text(channels: int) -> str:
    """The files an upload for a network of `channels` input channels may be, in words (`band_images.upload_types`)."""
    if channels > 3:
        return f"a NumPy .npy array of height × width × {channels} or a multi-band TIFF"
    return f"PNG, JPEG, WebP, BMP, TIFF, GIF or a NumPy .npy array of height × width × {channels}"


def shown_note(cropped: Image.Image | MultiBandImage, channels: int) -> str:
    """What the picture of the crop shows, as a clause for its caption, where it is not the RGB photo itself: the
    bands of a multi-band composite, or the gray a 1-channel network sees; '' for an RGB network's photo."""
    if isinstance(cropped, MultiBandImage):
        return cropped.caption()
    return "shown in gray, the one channel the network takes" if channels == 1 else ""


# ---- object boxes ------------------------------------------------------------------------------
# Boxes are typed in the coordinates of the network's crop (`preprocess.crop_size` pixels a side), or come
# as a Pascal-VOC annotation of the original image, mapped through the network's own preprocessing.

Box = tuple[float, float, float, float]


def parse_box(text: str, size: int) -> tuple[int, int, int, int]:
    """'x0, y0, x1, y1' (pixels of the crop) → ints; ValueError with a readable message otherwise."""
    parts = [p for p in re.split(r"[,\s;]+", text.strip()) if p]
    if len(parts) != 4:  # (the text itself is not echoed: it may be anything pasted)
        entries = f"{len(parts)} entr{'y' if len(parts) == 1 else 'ies'}"
        raise UserError(f"Enter the box as four numbers x0, y0, x1, y1 (you gave {entries}).")
    try:
        x0, y0, x1, y1 = (int(round(float(p))) for p in parts)
    except (ValueError, OverflowError):  # not a number, NaN or infinite
        raise UserError("The box must be four finite numbers x0, y0, x1, y1, e.g. 50, 40, 170, 170.") from None
    # a typed box is in crop pixels: a corner outside the crop or swapped corners is a typo, said as such
    # (never silently clipped or reordered into another box)
    if not all(0 <= v <= size for v in (x0, y0, x1, y1)):
        raise UserError(f"The box's corners must lie inside the {size} × {size} crop: each number from 0 to {size}.")
    if x1 - x0 < 1 or y1 - y0 < 1:
        raise UserError(f"The box is empty inside the {size} × {size} crop; give x1 > x0 and y1 > y0.")
    return x0, y0, x1, y1


def crop_box_mask(box: Box, size: int) -> np.ndarray:
    """Mask of the crop pixels whose centres lie inside a box given in crop coordinates."""
    from ..metrics.bbox import Annotation, Box as BBox, box_mask

    # an "original image" the size of the crop: the mapping is the identity
    return box_mask(Annotation(size, size, [BBox("box", *box)]), resize=size, crop=size)


def voc_boxes(xml: str | bytes, preprocess) -> tuple[np.ndarray, list[Box]]:
    """(union mask in the crop, boxes in crop coordinates) from a Pascal-VOC annotation of the original image,
    mapped as the network's `preprocess` (its resize and centre crop) maps the image."""
    from ..metrics.bbox import boxes_on_crop, parse_voc

    text = xml.decode("utf-8", errors="replace") if isinstance(xml, bytes) else xml
    if not text.lstrip().startswith("<"):
        raise UserError("The annotation is not XML.")
    ann = parse_voc(text)
    if not ann.boxes:
        raise UserError("The annotation holds no <object> with a <bndbox>.")
    return boxes_on_crop(ann, preprocess)


def box_input(text: str, xml: str | bytes | None, preprocess) -> tuple[np.ndarray, list[Box]]:
    """(mask in the crop, boxes) from a Pascal-VOC annotation if one is given, else from the box typed in the
    crop's coordinates; `preprocess` is the network's (`Network.preprocess`)."""
    from ..metrics.bbox import preprocess_sizes

    if xml is not None:
        return voc_boxes(xml, preprocess)
    size = preprocess_sizes(preprocess)[1]
    box = parse_box(text, size)
    return crop_box_mask(box, size), [box]


# ---- text prompts ------------------------------------------------------------------------------

#: What a CLIP network's prompt box holds before anything is typed (one prompt a line).
EXAMPLE_PROMPTS = ("a photo of a cat", "a photo of a dog")


def prompts_from_text(text: str) -> list[str]:
    """The text prompts typed in a box, one a line: each cleaned as the network keeps prompts (stripped, inner
    spaces made one: `clip_models.clean_prompt`, which refuses an overlong one), blank lines skipped, each once. A
    UserError when none is left."""
    from ..networks.clip_models import clean_prompt

    prompts = list(dict.fromkeys(clean_prompt(line) for line in (text or "").splitlines() if line.strip()))
    if not prompts:
        raise UserError("Type at least one text prompt (one a line), e.g. “a photo of a dog”: the map shows what in "
                        "the image makes it similar to the prompt.")
    return prompts
