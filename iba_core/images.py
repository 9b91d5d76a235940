"""Loading and validating user images.

Everything the app shows or attributes goes through :func:`load_image`, so every
image downstream is a fully decoded, upright, 8-bit RGB ``PIL.Image.Image`` and
every image we refuse surfaces as one :class:`ImageError` with a sentence that
can be shown to the user as-is.

Nothing here changes global PIL state (``Image.MAX_IMAGE_PIXELS``,
``ImageFile.LOAD_TRUNCATED_IMAGES``): the app and the tests share one process
with other modules that may rely on PIL's defaults.
"""

from __future__ import annotations

import io
import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import IO, Union

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import MissingFileError, UserError

__all__ = [
    "FORMAT_INFO",
    "FRAMES_INFO",
    "ImageError",
    "MAX_ASPECT_RATIO",
    "MAX_PIXELS",
    "MAX_SIDE",
    "MIN_SIDE",
    "SUPPORTED_UPLOAD_TYPES",
    "ImageSource",
    "MAX_BANDS",
    "load_image",
    "sample_image_names",
    "load_sample",
]


class ImageError(UserError):
    """The one error type for any image we refuse; str(err) is a clear, user-facing sentence."""


# Decompression-bomb guard: a few-KB PNG can declare 20000x20000 pixels and
# would then need gigabytes once decoded. 40 MP is bigger than any real photo a
# user would attribute (a 36 MP full-frame camera shot still fits) while keeping
# the decoded RGB buffer (~120 MB) well inside the machine's memory.
MAX_PIXELS: int = 40_000_000
# Pixels alone do not bound the memory: a 100000 × 1 strip holds few pixels, but the network's
# preprocessing scales its short side up to 256 px, which makes it 25,600,000 × 256 (gigabytes, a
# MemoryError). So both sides and their ratio are bounded too, read from the header before decoding.
# 20,000 px is wider than any camera's sensor (a 36 MP full-frame shot is 7360 px); 20 : 1 leaves room
# for a wide panorama (a 360° one is about 6 : 1) and keeps the upscaled copy under 5,120 × 256 pixels.
MAX_SIDE: int = 20_000
MAX_ASPECT_RATIO: int = 20
# The smallest side an image a network reads may have. Networks read 224 px or so: a 1 × 1 image would be upscaled
# 224 times and its explanation would be of the upscaling, not of a picture. 16 px is the smallest side that still
# holds a pattern (a 16 × 16 icon, the patch size of ViT-B/16: one patch), and every preprocessing here crops at least
# that much (`card_format.CROP_RANGE` starts at 16), so no smaller image is ever seen at its own resolution.
MIN_SIDE: int = 16

# File extensions offered to the upload widget (without dots, as Streamlit wants).
SUPPORTED_UPLOAD_TYPES: tuple[str, ...] = ("png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff", "gif")
#: File extensions of images held as arrays of bands (`load_input`): NumPy's .npy and (multi-band) TIFF.
ARRAY_UPLOAD_TYPES: tuple[str, ...] = ("npy", "tif", "tiff")
#: The most bands an array image may have: multispectral tiles have 4 to 13 (Sentinel-2); more is no image here.
MAX_BANDS: int = 64
#: The most values (pixels × bands) an array image may hold: as many as the largest RGB photo (`MAX_PIXELS` × 3),
#: so a 13-band tile may have about 9 megapixels (its float32 copy stays under 500 MB).
MAX_VALUES: int = 3 * MAX_PIXELS

# The PIL decoders we let run on untrusted input. Restricting them keeps exotic
# plugins out of reach (EPS, for instance, shells out to Ghostscript). The JPEG
# decoder also opens multi-picture JPEGs (MPO), which many phones write; DIB is
# BMP's header-less sibling that PIL may report for .bmp files. GIF: the first
# frame of an animation is used (see `frame_count`).
_PIL_FORMATS: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "BMP", "DIB", "TIFF", "GIF")

_SUPPORTED_HUMAN = "PNG, JPEG, WebP, BMP, TIFF, GIF"

#: Key in a loaded image's `info`: how many frames the file held (an animated GIF or WebP, or a
#: multi-page TIFF, has several; only the first is used).
FRAMES_INFO = "iba_frames"
#: Key in a loaded image's `info`: the file's format as PIL names it ("PNG", "GIF", "MPO", …).
FORMAT_INFO = "iba_format"

# Modes PIL can turn into RGB directly without losing information we care about.
_DIRECT_TO_RGB = {"1", "L", "P", "RGB", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}
# Modes that carry an alpha channel we must composite rather than drop.
_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}

ImageSource = Union[str, os.PathLike[str], bytes, bytearray, memoryview, IO[bytes], Image.Image]


def load_image(source: ImageSource, *, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Return an RGB PIL image with EXIF orientation applied (fully loaded, detached from the file).

    ``source`` may be a filesystem path, raw bytes, a binary file-like object
    (``BytesIO``, an open file, a Streamlit ``UploadedFile``) or a PIL image
    (which is left untouched; a converted copy is returned).

    Raises :class:`ImageError` for anything we refuse: empty input, a missing
    file, data that is not a supported image, a truncated or corrupt file, an
    image with no pixels, one with more than ``max_pixels`` pixels, a side over
    ``MAX_SIDE`` or sides further apart than ``MAX_ASPECT_RATIO`` : 1 (all read
    from the header, before any pixel is decoded). PIL's own
    process-wide bomb limit (``Image.MAX_IMAGE_PIXELS``) still applies on top,
    so raising ``max_pixels`` beyond it has no effect.
    """
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels <= 0:
        raise ValueError(f"max_pixels must be a positive integer, got {max_pixels!r}")

    if isinstance(source, Image.Image):
        return _from_pil(source, max_pixels=max_pixels)
    raw = path_or_bytes(source, "load_image")
    if isinstance(raw, str):
        return _from_path(raw, max_pixels=max_pixels)
    return _decode(io.BytesIO(raw), max_pixels=max_pixels)


def path_or_bytes(source, caller: str) -> str | bytes:
    """A path (str) or the non-empty bytes of a source that is neither a PIL image nor an array."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
    elif hasattr(source, "getvalue"):
        # Streamlit's UploadedFile and BytesIO: getvalue() returns the whole
        # buffer regardless of where an earlier read() left the position.
        data = bytes(source.getvalue())
    elif hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, (bytes, bytearray)):
            raise ImageError("The upload could not be read as binary data; please upload an image file.")
        data = bytes(data)
    else:
        raise TypeError(
            f"{caller}() expects a path, bytes, a binary file-like object or a PIL image, "
            f"got {type(source).__name__}"
        )
    if not data:
        raise ImageError("The file is empty (0 bytes); please choose an image file.")
    return data


def photo_size(path: str, max_pixels: int) -> tuple[int, int]:
    """(width, height) of an image file PIL reads, from its header."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with open_image(path, max_pixels=max_pixels) as img:
            check_size(img.size, max_pixels=max_pixels)
            return img.size


def check_file(path: str) -> None:
    """A path names an existing, non-empty file (the loader's own sentences)."""
    if not os.path.exists(path):
        raise ImageError(f"Image file not found: {path!r}. Check the path and try again.")
    if not os.path.isfile(path):
        raise ImageError(f"{path!r} is not a file; please give the path of an image file.")
    if os.path.getsize(path) == 0:
        raise ImageError(f"The file {path!r} is empty (0 bytes); please choose an image file.")


def _from_path(path: str, *, max_pixels: int) -> Image.Image:
    check_file(path)
    try:
        return _decode(path, max_pixels=max_pixels)
    except PermissionError as exc:  # pragma: no cover - depends on the filesystem
        raise ImageError(f"Permission denied reading {path!r}.") from exc


def _decode(fp: str | io.BytesIO, *, max_pixels: int) -> Image.Image:
    """Open, size-check, fully decode and normalise one encoded image."""
    # PIL only *warns* (DecompressionBombWarning) between MAX_IMAGE_PIXELS and
    # twice that; we turn the warning into an error locally so a bomb can never
    # slip through as a mere log line. The filter is restored on exit. (The
    # warnings filter list is process-wide, so under threads this is
    # belt-and-braces: our own size check right after Image.open is what
    # enforces max_pixels.)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        img = open_image(fp, max_pixels=max_pixels)
        with img:
            # Check the declared size BEFORE decoding pixels: this is what makes
            # the bomb guard cheap.
            check_size(img.size, max_pixels=max_pixels)
            frames, fmt = frame_count(img), img.format
            try:
                # Force the full decode now, while the file is open, so a
                # truncated file fails here (LOAD_TRUNCATED_IMAGES stays False)
                # instead of yielding a half-grey image later.
                img.load()
            except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                raise ImageError(_too_large_message(_effective_limit(max_pixels))) from exc
            except (OSError, SyntaxError, ValueError, EOFError, MemoryError) as exc:
                raise ImageError(
                    "The image file is truncated or corrupt and could not be fully decoded; "
                    "please re-export or re-upload it."
                ) from exc
            # Everything produced below is a new image, so nothing refers back
            # to the file once the `with` closes it.
            out = _normalise(img)
            out.info[FRAMES_INFO], out.info[FORMAT_INFO] = frames, fmt
            return out


def open_image(fp: str | io.BytesIO, *, max_pixels: int) -> Image.Image:
    """Image.open (lazy: the header only) among the allowed formats; every failure as an ImageError.

    Call it with DecompressionBombWarning turned into an error (see `_decode`).
    """
    try:
        return Image.open(fp, formats=_PIL_FORMATS)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ImageError(_too_large_message(_effective_limit(max_pixels))) from exc
    except UnidentifiedImageError as exc:
        raise ImageError(f"The file is not a readable image (supported: {_SUPPORTED_HUMAN}).") from exc
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        # A recognised header followed by garbage can fail already here.
        raise ImageError(
            "The image file is damaged or incomplete and could not be read; please re-export or re-upload it."
        ) from exc


def frame_count(img: Image.Image) -> int:
    """Frames in an opened image file (1 for a still image); the decoder stays on the first frame."""
    try:
        return max(int(getattr(img, "n_frames", 1)), 1)
    except (OSError, ValueError, EOFError):  # a damaged later frame: the first one still counts
        return 1


def _from_pil(img: Image.Image, *, max_pixels: int) -> Image.Image:
    check_size(img.size, max_pixels=max_pixels)
    try:
        img.load()  # lazily opened images still need a full (checked) decode
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageError(
            "The image is truncated or corrupt and could not be fully decoded; "
            "please re-export or re-upload it."
        ) from exc
    out = _normalise(img)
    # Never hand back the caller's own object: they may keep mutating it.
    return out.copy() if out is img else out


def check_size(size: tuple[int, int], *, max_pixels: int) -> None:
    """Refuse a declared size before any pixel is decoded: empty, too many pixels, too long a side or ratio."""
    width, height = size
    if width <= 0 or height <= 0:
        raise ImageError(f"The image has no pixels ({width}x{height}); please choose a non-empty image.")
    pixels = width * height
    if pixels > max_pixels:
        raise ImageError(_too_large_message(max_pixels, width, height))
    short, long = sorted((width, height))
    if long > MAX_ASPECT_RATIO * short:  # first: scaling such a strip down would not help
        ratio = long / short
        ratio_text = f"{ratio:,.0f}" if ratio >= 100 else f"{ratio:.2f}".rstrip("0").rstrip(".")
        shape = "wide as it is tall" if width > height else "tall as it is wide"
        raise ImageError(f"The image is {width} × {height} pixels, {ratio_text} times as {shape}: images may be "
                         f"at most {MAX_ASPECT_RATIO} times as long as they are wide, so please crop it and try "
                         "again.")
    if long > MAX_SIDE:
        raise ImageError(f"The image is {width} × {height} pixels: images may be at most {MAX_SIDE:,} pixels on "
                         "a side, so please scale it down and try again.")


def _effective_limit(max_pixels: int) -> int:
    """Our limit, or PIL's process-wide one where that is lower (PIL refuses above it too)."""
    pil = Image.MAX_IMAGE_PIXELS
    return min(max_pixels, int(pil)) if pil else max_pixels


def _too_large_message(max_pixels: int, width: int | None = None, height: int | None = None) -> str:
    """One sentence for a decompression bomb or a merely huge photo."""
    size = f" ({width} × {height} = {width * height:,} pixels)" if width and height else ""
    return (f"The image is too large{size}: images may have at most {max_pixels:,} pixels, "
            "so please scale it down and upload it again.")


def _normalise(img: Image.Image) -> Image.Image:
    """Upright 8-bit RGB copy of a fully loaded image."""
    try:
        upright = ImageOps.exif_transpose(img)
    except Exception:  # noqa: BLE001 - EXIF is best-effort metadata
        # A malformed EXIF block should not cost the user their photo; the
        # pixels are fine, only the orientation hint is unreadable.
        upright = img
    if upright is None:  # pragma: no cover - only with in_place=True
        upright = img
    try:
        return _to_rgb(upright)
    except (ValueError, OSError, TypeError) as exc:
        raise ImageError(
            f"The image uses a colour mode ({img.mode}) that cannot be converted to RGB; "
            "please save it as an 8-bit RGB PNG or JPEG."
        ) from exc


def _to_rgb(img: Image.Image) -> Image.Image:
    mode = img.mode
    if mode.startswith("I") or mode == "F":
        return Image.fromarray(_gray_to_uint8(np.asarray(img), mode), mode="L").convert("RGB")

    # Palette/gray/RGB images can carry a transparent colour in info["transparency"]
    # (PNG tRNS, GIF); treat it like a real alpha channel.
    has_alpha = mode in _ALPHA_MODES or (mode in {"P", "L", "RGB", "1"} and "transparency" in img.info)
    if has_alpha:
        rgba = img.convert("RGBA")
        # Composite on white: dropping alpha would turn fully transparent
        # pixels into whatever colour they happen to store (usually black),
        # which models and users both read as content.
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")

    if mode == "RGB":
        return img.copy()
    if mode in _DIRECT_TO_RGB:
        return img.convert("RGB")
    # Anything else (rare TIFF modes): let PIL try, the caller maps failures to ImageError.
    return img.convert("RGB")


def _gray_to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """Scale high-bit-depth gray to 0-255 (rather than clipping, which whitens everything)."""
    if mode.startswith("I;16") or arr.dtype in (np.uint16, np.dtype(">u2"), np.dtype("<u2")):
        # 16-bit: full range is 0..65535, and 65535 / 257 == 255 exactly.
        return np.rint(arr.astype(np.float64) / 257.0).clip(0, 255).astype(np.uint8)

    values = np.nan_to_num(arr.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if values.size == 0:
        return np.zeros(arr.shape, dtype=np.uint8)
    lo, hi = float(values.min()), float(values.max())

    if mode == "F" and lo >= 0.0 and hi <= 1.0:
        # The usual float convention: 0.0 black, 1.0 white.
        scaled = values * 255.0
    elif mode.startswith("I") and lo >= 0 and hi <= 65535:
        # 32-bit "I" mode in practice holds 16-bit data (older PIL opens 16-bit
        # PNG/TIFF as "I"), so keep the 16-bit scale: brightness stays
        # comparable across files instead of being stretched per image.
        scaled = values / 257.0
    elif hi > lo:
        # Arbitrary range (negative or > 16-bit ints, HDR floats): stretch min..max.
        scaled = (values - lo) * (255.0 / (hi - lo))
    else:
        # Constant image outside the known ranges: nothing to show but one flat level.
        scaled = np.zeros_like(values)
    return np.rint(scaled).clip(0, 255).astype(np.uint8)


# --------------------------------------------------------------------------------------
# Sample images
# --------------------------------------------------------------------------------------

# Colour photos that scikit-image ships inside its wheel, so they load without a
# network download (eagle, lily, skin, ... go through pooch and fail offline).
# Gray/binary images and synthetic graphics (colorwheel, logo) are left out:
# attribution is meant for colour photos. ``cat`` is skipped as an alias of
# chelsea. Each value is the skimage.data function name plus, for functions that
# return several arrays, which one to take.
_SAMPLES: dict[str, tuple[str, int | None]] = {
    "chelsea": ("chelsea", None),  # cat, 451x300
    "coffee": ("coffee", None),  # cup of coffee, 600x400
    "astronaut": ("astronaut", None),  # portrait, 512x512
    "rocket": ("rocket", None),  # rocket on launch pad, 640x427
    "motorcycle": ("stereo_motorcycle", 0),  # left view of a stereo pair, 741x500
    "hubble_deep_field": ("hubble_deep_field", None),  # galaxies, 1000x872
    "immunohistochemistry": ("immunohistochemistry", None),  # stained tissue, 512x512
    "retina": ("retina", None),  # fundus photo, 1411x1411
}


def sample_image_names() -> list[str]:
    """Names accepted by :func:`load_sample`, in display order."""
    return list(_SAMPLES)


def load_sample(name: str) -> Image.Image:
    """Return the bundled sample photo ``name`` (from ``skimage.data``) as an RGB PIL image.

    Raises :class:`ImageError` for an unknown name (the message lists the valid
    ones) or when scikit-image is not installed.
    """
    if name not in _SAMPLES:
        raise ImageError(f"Unknown sample image {name!r}; choose one of: {', '.join(_SAMPLES)}.")
    return load_image(Image.fromarray(_sample_array(name).copy()))  # a copy: callers may change their image


@lru_cache(maxsize=None)
def _sample_array(name: str) -> np.ndarray:
    """A sample photo's pixels, decoded once per process: statistics draw every sample photo on each estimate
    (`image_sources.offline_photos`), and decoding them took seconds of a new network's first run."""
    try:
        # Imported lazily: scikit-image is heavy and only needed for samples.
        import skimage.data
    except ImportError as exc:
        raise ImageError(
            "Sample images need scikit-image, which is not installed (pip install scikit-image)."
        ) from exc
    func_name, index = _SAMPLES[name]
    try:
        arr = getattr(skimage.data, func_name)()
    except Exception as exc:  # noqa: BLE001 - skimage raises assorted errors
        # A scikit-image version that no longer bundles this file falls back to
        # a pooch download, which fails offline (missing pooch, network error).
        raise ImageError(f"The sample image {name!r} could not be loaded ({exc}).") from exc
    if index is not None:
        arr = arr[index]
    arr = np.ascontiguousarray(arr)
    arr.setflags(write=False)
    return arr


#: File endings treated as images when a folder is searched.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".jfif", ".npy"})


def find_images(folder: str | os.PathLike) -> list[Path]:
    """All image files below `folder`, recursively, in a stable order."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise MissingFileError(f"Image folder not found: {root}")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
