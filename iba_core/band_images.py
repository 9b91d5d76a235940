"""Inputs of any channel count: gray and multi-band images (NumPy .npy, multi-band TIFF) for networks of other
than three bands, a photo made to fit such a network, and the size of any image file read from its header.

Photos (three bands, every format PIL decodes) are `images.py`'s; this module reads the arrays of bands and hands
photos to it, so every input still goes through one set of checks and one `ImageError`.
"""
from __future__ import annotations

import io
import os
import warnings

import numpy as np
from PIL import Image

from .images import (
    ARRAY_UPLOAD_TYPES,
    FORMAT_INFO,
    MAX_BANDS,
    MAX_PIXELS,
    MAX_VALUES,
    MIN_SIDE,
    SUPPORTED_UPLOAD_TYPES,
    ImageError,
    ImageSource,
    check_file,
    check_size,
    load_image,
    open_image,
    path_or_bytes,
    photo_size,
)


def read_image_size(source: str | os.PathLike, *, max_pixels: int = MAX_PIXELS) -> tuple[int, int]:
    """(width, height) of an image file, read from its header alone (no pixel decoded).

    Raises :class:`ImageError` for everything :func:`load_image` refuses before decoding: a missing or
    empty file, data that is not a supported image, and a size beyond the limits. A file whose pixels are
    damaged passes here and is refused by :func:`load_image`. A .npy file, or a TIFF of bands that PIL cannot
    read, is measured (and checked) from its header as :func:`load_input` reads it.
    """
    path = os.fspath(source)
    check_file(path)
    kind = _sniff(path)
    if kind == "npy":
        height, width, _ = _read_npy(path, max_pixels, header_only=True)
        return width, height
    try:
        return photo_size(path, max_pixels)
    except ImageError:
        if kind != "tiff":
            raise
        height, width, _ = _read_tiff(path, max_pixels, header_only=True)
        return width, height



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
    raw = path_or_bytes(source, "load_input")
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
    raw = path_or_bytes(source, "read_bands")
    if isinstance(raw, str):
        check_file(raw)
    kind = _sniff(raw)
    if kind == "npy":
        return _read_npy(raw, max_pixels)
    if kind == "tiff":
        return _read_tiff(raw, max_pixels)
    raise ImageError("The file is neither a NumPy .npy file nor a TIFF, so it holds no bands to read.")


def _sniff(raw: str | bytes) -> str:
    """"npy", "tiff" or "photo" (anything else: PIL decides) from a file's first bytes."""
    if isinstance(raw, str):
        check_file(raw)
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
        with open_image(raw if isinstance(raw, str) else io.BytesIO(raw), max_pixels=max_pixels) as img:
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
    check_size((width, height), max_pixels=max_pixels)
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
