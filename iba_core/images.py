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
    "MultiBandImage",
    "check_display_bands",
    "load_image",
    "load_input",
    "photo_or_path",
    "upload_types",
    "read_image_size",
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
# that much (`cards.CROP_RANGE` starts at 16), so no smaller image is ever seen at its own resolution.
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
    raw = _path_or_bytes(source, "load_image")
    if isinstance(raw, str):
        return _from_path(raw, max_pixels=max_pixels)
    return _decode(io.BytesIO(raw), max_pixels=max_pixels)


def _path_or_bytes(source, caller: str) -> str | bytes:
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


def read_image_size(source: str | os.PathLike, *, max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(width, height) of an image file, read from its header alone (no pixel decoded).

    Raises :class:`ImageError` for everything :func:`load_image` refuses before decoding: a missing or
    empty file, data that is not a supported image, and a size beyond the limits. A file whose pixels are
    damaged passes here and is refused by :func:`load_image`. A .npy file, or a TIFF of bands that PIL cannot
    read, is measured (and checked) from its header as :func:`load_input` reads it.
    """
    path = os.fspath(source)
    _check_file(path)
    kind = _sniff(path)
    if kind == "npy":
        height, width, _ = _read_npy(path, max_pixels, header_only=True)
        return width, height
    try:
        return _photo_size(path, max_pixels)
    except ImageError:
        if kind != "tiff":
            raise
        height, width, _ = _read_tiff(path, max_pixels, header_only=True)
        return width, height


def _photo_size(path: str, max_pixels: int) -> tuple[int, int]:
    """(width, height) of an image file PIL reads, from its header."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with _open(path, max_pixels=max_pixels) as img:
            _check_size(img.size, max_pixels=max_pixels)
            return img.size


def _check_file(path: str) -> None:
    """A path names an existing, non-empty file (the loader's own sentences)."""
    if not os.path.exists(path):
        raise ImageError(f"Image file not found: {path!r}. Check the path and try again.")
    if not os.path.isfile(path):
        raise ImageError(f"{path!r} is not a file; please give the path of an image file.")
    if os.path.getsize(path) == 0:
        raise ImageError(f"The file {path!r} is empty (0 bytes); please choose an image file.")


def _from_path(path: str, *, max_pixels: int) -> Image.Image:
    _check_file(path)
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
        img = _open(fp, max_pixels=max_pixels)
        with img:
            # Check the declared size BEFORE decoding pixels: this is what makes
            # the bomb guard cheap.
            _check_size(img.size, max_pixels=max_pixels)
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


def _open(fp: str | io.BytesIO, *, max_pixels: int) -> Image.Image:
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
    _check_size(img.size, max_pixels=max_pixels)
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


def _check_size(size: tuple[int, int], *, max_pixels: int) -> None:
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
# Inputs of any channel count: grayscale and multi-band images
# --------------------------------------------------------------------------------------

#: The display stretch of a band: its values between these percentiles span 0…255 (the outer 2 % on each side
#: clip), so one bright pixel (a glint, a saturated sensor) does not leave the rest of a band dark.
DISPLAY_PERCENTILES: tuple[float, float] = (2.0, 98.0)
_NPY_MAGIC = b"\x93NUMPY"
_TIFF_MAGICS = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic TIFF and BigTIFF, either byte order
#: PIL modes of one gray channel (with or without transparency; "I;16…" too); any other mode holds colour.
_GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "F"})


def channels_text(channels: int) -> str:
    """How a message names a channel count: "3-channel (RGB)", "1-channel (grayscale)", "4-band"."""
    if channels == 3:
        return "3-channel (RGB)"
    if channels == 1:
        return "1-channel (grayscale)"
    return f"{channels}-band"


def upload_types(channels: int) -> tuple[str, ...]:
    """The file extensions an upload for a network of `channels` input channels may have (without dots):
    photos and .npy for gray and RGB networks, .npy and TIFF for multi-band ones."""
    return ARRAY_UPLOAD_TYPES if channels > 3 else SUPPORTED_UPLOAD_TYPES + ("npy",)


def check_display_bands(bands, channels: int) -> tuple[int, int, int] | None:
    """`bands` (the three band numbers, counted from 0, shown as red, green and blue) as a tuple if each lies in
    0 … channels − 1; None stays None (the first three bands). An ImageError naming the range otherwise."""
    if bands is None:
        return None
    fine = (isinstance(bands, (list, tuple)) and len(bands) == 3
            and all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) and 0 <= b < channels for b in bands))
    if not fine:
        text = repr(bands if isinstance(bands, (list, tuple, int)) else str(bands))[:40]
        raise ImageError(f"display_bands must be three band numbers (red, green, blue) from 0 to {channels - 1}, "
                         f"counted from 0, not {text}.")
    return tuple(int(b) for b in bands)  # type: ignore[return-value]


def _stretch(plane: np.ndarray) -> np.ndarray:
    """One band as uint8: DISPLAY_PERCENTILES' values mapped to 0 and 255, clipped beyond (a flat band: black)."""
    lo, hi = (float(v) for v in np.percentile(plane, DISPLAY_PERCENTILES))
    if not hi > lo:
        return np.zeros(plane.shape, dtype=np.uint8)
    return np.rint((plane - lo) * (255.0 / (hi - lo))).clip(0, 255).astype(np.uint8)


class MultiBandImage:
    """An image of any number of bands, as float32 (height, width, bands), for networks whose input is not RGB
    (a .npy file or a multi-band TIFF; see `load_input`).

    It stands in for a PIL image where code only looks at the picture: `.size` (width, height), `.width`,
    `.height`, `.info`, `.convert("RGB")` and `np.asarray(image)` give the display composite (`composite`), so
    overlays and figures draw it unchanged. The network's tensor is made from `.data` (`spec.Preprocess`).
    """

    def __init__(self, data: np.ndarray, display_bands=None, info: dict | None = None):
        data = np.asarray(data, dtype=np.float32)
        if data.ndim != 3 or 0 in data.shape:
            raise ValueError(f"A MultiBandImage holds a non-empty (height, width, bands) array, not {data.shape}.")
        self.data = data
        self.display_bands = check_display_bands(display_bands, data.shape[2])
        self.info: dict = dict(info or {})
        self._composite: np.ndarray | None = None

    @property
    def bands(self) -> int:
        return int(self.data.shape[2])

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as PIL gives it."""
        return int(self.data.shape[1]), int(self.data.shape[0])

    @property
    def width(self) -> int:
        return int(self.data.shape[1])

    @property
    def height(self) -> int:
        return int(self.data.shape[0])

    @property
    def mode(self) -> str:
        return f"{self.bands} bands"

    def shown_bands(self) -> tuple[int, ...]:
        """The bands the composite shows as red, green, blue (`display_bands`, else the first three), or the one
        band shown in gray for an image of fewer than three bands."""
        if self.display_bands is not None:
            return self.display_bands
        return (0, 1, 2) if self.bands >= 3 else (0,)

    def composite(self) -> np.ndarray:
        """The picture shown: (height, width, 3) uint8, each shown band stretched (DISPLAY_PERCENTILES) to 0…255;
        a single band in gray. Made once (read-only)."""
        if self._composite is None:
            planes = [_stretch(self.data[..., b]) for b in self.shown_bands()]
            out = np.stack(planes * 3 if len(planes) == 1 else planes, axis=-1)
            out.flags.writeable = False
            self._composite = out
        return self._composite

    def caption(self) -> str:
        """Which bands the picture shows, as a clause for a caption, e.g. "bands 4, 3, 2 of 13, numbered from 1,
        shown as red, green, blue, each stretched between its 2nd and 98th percentile"."""
        low, high = (f"{p:g}" for p in DISPLAY_PERCENTILES)
        stretch = f"stretched between its {_ordinal(low)} and {_ordinal(high)} percentile"
        shown = self.shown_bands()
        if len(shown) == 1:
            return f"band 1 of {self.bands} shown in gray, {stretch}"
        numbers = ", ".join(str(b + 1) for b in shown)
        return f"bands {numbers} of {self.bands}, numbered from 1, shown as red, green, blue, each {stretch}"

    def convert(self, mode: str = "RGB") -> Image.Image:
        """The composite as a PIL image ("RGB", or "L" for its gray)."""
        if mode not in ("RGB", "L"):
            raise ValueError(f"A MultiBandImage converts to RGB or L only, not {mode!r}.")
        rgb = Image.fromarray(np.array(self.composite()), mode="RGB")
        return rgb if mode == "RGB" else rgb.convert("L")

    def copy(self) -> "MultiBandImage":
        return MultiBandImage(self.data.copy(), self.display_bands, self.info)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.array(self.composite())  # a writable copy: callers may draw on it
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"MultiBandImage({self.height} × {self.width} × {self.bands}, display bands {self.shown_bands()})"


def _ordinal(number: str) -> str:
    suffix = {"1": "st", "2": "nd", "3": "rd"}.get(number[-1], "th")
    return number + ("th" if number[-2:] in ("11", "12", "13") else suffix)


def load_input(source: ImageSource | np.ndarray | MultiBandImage, channels: int = 3,
               display_bands=None, *, max_pixels: int = MAX_PIXELS) -> Image.Image | MultiBandImage:
    """The image a network of `channels` input channels reads (`_read_input`), refused when a side is shorter than
    `MIN_SIDE` (it would be upscaled many times and the explanation would be of the upscaling)."""
    image = _read_input(source, channels, display_bands, max_pixels=max_pixels)
    check_min_side(image.size)
    return image


def check_min_side(size: tuple[int, int]) -> None:
    """One sentence for an image (width, height) with a side shorter than `MIN_SIDE` px."""
    width, height = size
    if min(width, height) < MIN_SIDE:
        raise ImageError(f"The image is {width} × {height} pixels: a network would see it upscaled many times over, "
                         f"so images must be at least {MIN_SIDE} pixels on each side; please choose a larger image.")


def _read_input(source: ImageSource | np.ndarray | MultiBandImage, channels: int = 3,
                display_bands=None, *, max_pixels: int = MAX_PIXELS) -> Image.Image | MultiBandImage:
    """The image a network of `channels` input channels reads, from a file, bytes, a PIL image or an array.

    - 3 (RGB): `load_image`'s RGB image; a .npy file, or a TIFF that PIL cannot read (float bands), of 3 bands
      as a MultiBandImage;
    - 1 (grayscale: X-ray, CT, microscopy): the image in gray (PIL mode "L"); a 1-band .npy or TIFF as a
      MultiBandImage;
    - more (multispectral): a .npy file (height, width, bands) or a multi-band TIFF as a MultiBandImage, whose
      composite shows `display_bands` (default: the first three).

    Arrays are read by their header first (`read_bands`): the same size limits as photos, at most MAX_BANDS bands
    and MAX_VALUES values; integers are scaled to 0…1 by their type's maximum (uint8 / 255, uint16 / 65535),
    floats taken as they are; NaN and ±inf are refused. A file whose channel count does not fit the network's
    is one ImageError naming both; so is every refusal of `load_image`.
    """
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_BANDS:
        raise ValueError(f"channels must be a whole number from 1 to {MAX_BANDS}, got {channels!r}")
    display_bands = check_display_bands(display_bands, channels)
    if isinstance(source, MultiBandImage):
        return _fitted(source.data, channels, display_bands or source.display_bands, source.info)
    if isinstance(source, np.ndarray):
        _check_array_header(source.shape, source.dtype, "array", max_pixels)
        return _fitted(_as_float(source, "The array"), channels, display_bands, {})
    if isinstance(source, Image.Image):
        if channels > 3:
            raise _mismatch(photo_channels(source.mode), channels)
        return _photo_for(load_image(source, max_pixels=max_pixels), channels)
    raw = _path_or_bytes(source, "load_input")
    kind = _sniff(raw)
    if kind == "npy" or (kind == "tiff" and channels not in (1, 3)):
        return _fitted(read_bands(raw, max_pixels=max_pixels), channels, display_bands, {FORMAT_INFO: kind.upper()})
    if channels not in (1, 3):  # a photo for a multi-band network: say what it holds
        raise _mismatch(_photo_channels(raw, max_pixels), channels)
    try:
        photo = load_image(raw, max_pixels=max_pixels)
    except ImageError:
        if kind != "tiff":
            raise
        # Float bands, or more bands than PIL decodes: tifffile reads them, or says what the file holds.
        return _fitted(read_bands(raw, max_pixels=max_pixels), channels, display_bands, {FORMAT_INFO: "TIFF"})
    return _photo_for(photo, channels)


def photo_or_path(path: str | os.PathLike) -> Image.Image | str:
    """A photo file fully decoded now (`load_image`), before the network that reads it is known; a .npy or TIFF
    file's path as it is (its bands are read once the network's channels are known: `load_input` takes either).
    Lets a command refuse a damaged or too small photo before it loads a network."""
    path = os.fspath(path)
    if _sniff(path) in ("npy", "tiff"):
        return path
    photo = load_image(path)
    check_min_side(photo.size)  # as `load_input` will: said before the network loads
    return photo


def read_bands(source: str | os.PathLike | bytes, *, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """(height, width, bands) float32 from a .npy file or a TIFF (by its first bytes), checked as `load_input`
    says: sizes from the header before the data is read; never unpickled (`allow_pickle=False`)."""
    raw = _path_or_bytes(source, "read_bands")
    if isinstance(raw, str):
        _check_file(raw)
    kind = _sniff(raw)
    if kind == "npy":
        return _read_npy(raw, max_pixels)
    if kind == "tiff":
        return _read_tiff(raw, max_pixels)
    raise ImageError("The file is neither a NumPy .npy file nor a TIFF, so it holds no bands to read.")


def _sniff(raw: str | bytes) -> str:
    """"npy", "tiff" or "photo" (anything else: PIL decides) from a file's first bytes."""
    if isinstance(raw, str):
        _check_file(raw)
        with open(raw, "rb") as f:
            head = f.read(8)
    else:
        head = raw[:8]
    if head.startswith(_NPY_MAGIC):
        return "npy"
    return "tiff" if head[:4] in _TIFF_MAGICS else "photo"


def _photo_for(photo: Image.Image, channels: int) -> Image.Image:
    """`load_image`'s RGB image as the network takes it: itself, or in gray (its info kept) for one channel."""
    if channels == 3:
        return photo
    gray = photo.convert("L")
    gray.info.update(photo.info)
    return gray


def _photo_channels(raw: str | bytes, max_pixels: int) -> int:
    """1 for a gray photo, 3 for any other (colour, palette; transparency is no band), from its header."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with _open(raw if isinstance(raw, str) else io.BytesIO(raw), max_pixels=max_pixels) as img:
            return photo_channels(img.mode)


def photo_channels(mode: str) -> int:
    """The channels a PIL image of `mode` holds for a network: 1 for gray (with or without transparency), 3 for
    colour or a palette (transparency is no channel)."""
    return 1 if mode in _GRAY_MODES or mode.startswith("I;") else 3


def _mismatch(found: int, channels: int, hint: str = "") -> ImageError:
    """One sentence naming the file's channel count and the network's (and, for multi-band networks, what to
    give)."""
    fix = (f"; give its {channels} bands as a .npy file (height × width × {channels}) or a multi-band TIFF"
           if channels > 3 and not hint else hint)
    return ImageError(f"The file holds a {channels_text(found)} image, but the network takes "
                      f"{channels_text(channels)} images{fix}.")


def _fitted(data: np.ndarray, channels: int, display_bands, info: dict) -> MultiBandImage:
    """The bands as a MultiBandImage when their count is the network's; else `_mismatch`."""
    height, width, bands = data.shape
    if bands != channels:
        hint = (f"; its first axis has {channels}: save it as height × width × bands (numpy.moveaxis(a, 0, -1))"
                if height == channels else "")
        raise _mismatch(bands, channels, hint)
    return MultiBandImage(data, display_bands, info)


def _check_array_header(shape: tuple[int, ...], dtype: np.dtype, what: str, max_pixels: int) -> None:
    """Refuse an array from its header alone: objects (a pickle), non-numbers, not 3-D, empty, too many bands or
    values, or a size `load_image` refuses."""
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ImageError(f"The {what} holds Python objects (a pickle), which are never loaded here; save a numeric "
                         "array (integers or floats) with numpy.save.")
    if dtype.fields is not None or dtype.kind not in "uif":
        raise ImageError(f"The {what} holds {dtype} values; an image's bands must be integers or floats.")
    if len(shape) != 3:
        dims = " × ".join(str(n) for n in shape) or "a single value"
        raise ImageError(f"The {what} holds a {len(shape)}-D array ({dims}); an image is 3-D, height × width × "
                         "bands (one band: height × width × 1).")
    height, width, bands = (int(n) for n in shape)
    if 0 in (height, width, bands):
        raise ImageError(f"The {what} has no pixels ({height} × {width} × {bands}); please choose a non-empty image.")
    if bands > MAX_BANDS:
        raise ImageError(f"The {what} has {bands:,} bands ({height} × {width} × {bands}); images may have at most "
                         f"{MAX_BANDS}, with the bands on the last axis (height × width × bands).")
    _check_size((width, height), max_pixels=max_pixels)
    if height * width * bands > MAX_VALUES:
        raise ImageError(f"The image is too large ({height} × {width} × {bands} = {height * width * bands:,} "
                         f"values): images may hold at most {MAX_VALUES:,}, so please scale it down.")


def _as_float(data: np.ndarray, what: str) -> np.ndarray:
    """float32 bands: integers divided by their type's maximum, floats as they are; NaN and ±inf refused."""
    if data.dtype.kind in "ui":
        out = data.astype(np.float32)
        out /= np.float32(np.iinfo(data.dtype).max)
    else:
        with np.errstate(over="ignore"):  # beyond float32's range: infinite, refused below
            out = np.array(data, dtype=np.float32)
    if not np.isfinite(out).all():  # (a float64 beyond float32's range turns infinite here and is refused too)
        raise ImageError(f"{what} holds NaN or infinite values; replace them (e.g. with numpy.nan_to_num) and try "
                         "again.")
    return np.ascontiguousarray(out)


def _read_npy(raw: str | bytes, max_pixels: int, header_only: bool = False):
    """The bands of a .npy file: its header checked (`_check_array_header`) before the data is read (header_only:
    only its (height, width, bands))."""
    with (open(raw, "rb") if isinstance(raw, str) else io.BytesIO(raw)) as fp:
        try:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fp)
            elif version == (2, 0):
                shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fp)
            else:
                raise ValueError(f"format version {version}")
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise ImageError("The .npy file's header is damaged or of an unknown format version; save the array "
                             "again with numpy.save.") from exc
        _check_array_header(shape, dtype, ".npy file", max_pixels)
        if header_only:
            return tuple(int(n) for n in shape)
        fp.seek(0)
        try:
            data = np.load(fp, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ImageError("The .npy file is truncated or damaged: it holds fewer values than its header "
                             "says; save the array again with numpy.save.") from exc
    return _as_float(data, "The .npy file")


def _read_tiff(raw: str | bytes, max_pixels: int, header_only: bool = False):
    """The bands of a TIFF's first image (tifffile): bands on the samples axis (contiguous or planar), or one band
    per page of a stack of single-band pages; sizes checked before the pixels are read (header_only: only its
    (height, width, bands))."""
    try:
        import tifffile  # lazily: only multi-band files need it
    except ImportError as exc:  # pragma: no cover - tifffile is in requirements.txt
        raise ImageError("Multi-band TIFF files need the tifffile package (pip install tifffile).") from exc
    try:
        with tifffile.TiffFile(raw if isinstance(raw, str) else io.BytesIO(raw)) as tif:
            series = tif.series[0]
            shape, axes, dtype = tuple(int(n) for n in series.shape), str(series.axes), np.dtype(series.dtype)
            order, hwc = _tiff_bands_axis(shape, axes)
            _check_array_header(hwc, dtype, "TIFF file", max_pixels)
            if header_only:
                return hwc
            data = series.asarray()
    except ImageError:
        raise
    except Exception as exc:  # noqa: BLE001 - tifffile raises assorted errors for damaged or exotic files
        raise ImageError("The TIFF file is damaged or uses a compression that cannot be decoded here; please "
                         "save it again uncompressed (or zlib-compressed).") from exc
    data = np.transpose(data.reshape([shape[i] for i in order]), (1, 2, 0)) if len(order) == 3 else data.reshape(hwc)
    return _as_float(data, "The TIFF file")


def _tiff_bands_axis(shape: tuple[int, ...], axes: str) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    """(axis order that puts bands first then height, width, or () when already height × width × bands;
    (height, width, bands)) of a tifffile series; an ImageError for anything but one image of bands."""
    kept = [i for i, (n, a) in enumerate(zip(shape, axes)) if n != 1 or a in "YX"]
    names = "".join(axes[i] for i in kept)
    if names == "YX":
        return (), (shape[kept[0]], shape[kept[1]], 1)
    if len(kept) == 3 and "YX" in names:
        y, x = kept[names.index("Y")], kept[names.index("X")]
        band = next(i for i in kept if i not in (y, x))
        if names.endswith("YX"):  # bands first: planar samples, or one single-band page per band
            return (band, y, x), (shape[y], shape[x], shape[band])
        return (), (shape[y], shape[x], shape[band])  # height × width × samples (contiguous)
    dims = " × ".join(str(n) for n in shape)
    raise ImageError(f"The TIFF file holds a stack of images ({dims}, axes {axes}); it must hold one image of "
                     "height × width × bands.")


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
    return load_image(Image.fromarray(np.ascontiguousarray(arr)))


#: File endings treated as images when a folder is searched.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".jfif", ".npy"})


def find_images(folder: str | os.PathLike) -> list[Path]:
    """All image files below `folder`, recursively, in a stable order."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise MissingFileError(f"Image folder not found: {root}")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
