"""The marks of the planted-mark self-test: a short text, a solid patch, a frame around the crop, or a user's PNG
(with its alpha), each placed at the *crop's* coordinates and drawn where the network's preprocessing puts that crop.

Where the mark is drawn. Both copies of an image (clean and marked) are saved at the network's resize geometry: the
photo resized as the network resizes it (`Preprocess.resized`: short side to `resize`, its long side kept), the mark
drawn on that at the crop's offset (`metrics.bbox.crop_geometry`). The network's own preprocessing then leaves the
copy's size as it is and takes an exact centre crop, so the mark lands on the crop pixel for pixel and the clean
copy's crop equals the original photo's. Planting on the original photo instead, at the inverse of the geometry, was
measured and dropped: the resize spreads the mark's edges by 1 crop pixel when it shrinks the photo (200 × 150 and
640 × 480 photos), by 2 px at ×2.1 and by up to 7 px at ×8.5 when it enlarges a small one, and blurs a text mark
into the photo's own resolution. Saved at the resize geometry, the pixels that change on the crop are exactly the
recorded box (0 px of spread; tests/selftest/test_marks.py checks it on two geometries and every kind). The copies
are this network's: another network with another resize would resample them again.

The box (`Placed.box`, x0, y0, x1, y1 on the crop, ends exclusive) is the bounding box of the pixels the mark's alpha
covers; `Placed.region` is those pixels. The self-test's measures score the box (`Placed.scored`; a `border`'s box is
the whole crop, so its frame's pixels). Alpha below `FAINT_ALPHA` (after --opacity) is dropped, as it moves no
colour by more than two of 255 levels: a pixel inside the region that keeps its 8-bit value (the photo already had
the mark's colour there) still counts as covered.

A text mark is refused where its letters would be under `MIN_TEXT_PX` high on the crop (saying how long a text fits
at that size), and where the default font lacks one of its characters (they would be drawn as a box or not at all).
"""
from __future__ import annotations

import functools
import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from ..errors import UserError

#: The built-in kinds; anything else given as a mark is read as a PNG file (`PNG`).
KINDS = ("text", "patch", "border")
PNG = "png"
#: --where's words: the mark's place as (x, y), 0 flush with the crop's left / top edge, 1 with its right / bottom.
PLACES = {"top-left": (0.0, 0.0), "top": (0.5, 0.0), "top-right": (1.0, 0.0), "left": (0.0, 0.5),
          "centre": (0.5, 0.5), "center": (0.5, 0.5), "right": (1.0, 0.5), "bottom-left": (0.0, 1.0),
          "bottom": (0.5, 1.0), "bottom-right": (1.0, 1.0)}
DEFAULT_PLACE = "bottom-right"
#: --size's default per kind: the mark's longer side as a share of the crop side (a border: the frame's width).
DEFAULT_SIZE = {"text": 0.4, "patch": 0.125, "border": 0.05, PNG: 0.25}
DEFAULT_TEXT = "© sample"
DEFAULT_COLOUR = (255, 0, 0)
#: The faintest opacity: a mark fainter than this would not change an 8-bit pixel.
MIN_OPACITY = 0.01
#: Alpha under this (after opacity) is no mark: it moves a colour by at most 2 of 255 levels.
FAINT_ALPHA = 1.0 / 128
#: A mark PNG's limits: bytes, and pixels a side (read from the header, before decoding).
MAX_PNG_BYTES = 8 * 1024 * 1024
MAX_PNG_SIDE = 4096
#: The pixel height text is drawn at before it is scaled to its size (nearest neighbour: it stays two-tone).
TEXT_PX = 40
#: A text mark's letters are at least this many pixels high on the crop: smaller, nothing of them can be read.
MIN_TEXT_PX = 4


@dataclass(frozen=True)
class Mark:
    """A mark as asked: its kind, place on the crop ((x, y) in 0–1), size (share of the crop side), opacity (0–1),
    colour (text, patch, border), text, and a PNG mark's file and contents."""

    kind: str
    where: tuple[float, float] = PLACES[DEFAULT_PLACE]
    size: float = DEFAULT_SIZE["patch"]
    opacity: float = 1.0
    colour: tuple[int, int, int] = DEFAULT_COLOUR
    text: str = DEFAULT_TEXT
    png: str | None = None
    png_bytes: bytes | None = field(default=None, repr=False, compare=False)

    def identity(self) -> dict:
        """The mark as JSON data: what makes it (a PNG by its name and its contents' SHA-256)."""
        out = {"kind": self.kind, "where": list(self.where), "size": self.size, "opacity": self.opacity}
        if self.kind == PNG:
            out.update(png=self.png, sha256=hashlib.sha256(self.png_bytes or b"").hexdigest())
        else:
            out["colour"] = list(self.colour)
        if self.kind == "text":
            out["text"] = self.text
        return out


def parse_where(text: str | tuple[float, float] | None) -> tuple[float, float]:
    """--where: a place's word (`PLACES`) or "x,y" in 0–1 of the crop; a UserError naming both forms otherwise."""
    if text is None:
        return PLACES[DEFAULT_PLACE]
    if isinstance(text, tuple):
        parts = list(text)
    elif text.strip().lower() in PLACES:
        return PLACES[text.strip().lower()]
    else:
        parts = text.split(",")
    try:
        x, y = (float(p) for p in parts)
    except ValueError:
        x = y = float("nan")
    if not (0 <= x <= 1 and 0 <= y <= 1):
        raise UserError(f"The mark's place {str(text)[:40]!r} is neither a place nor x,y between 0 and 1.",
                        cli_hint=f"Give one of {', '.join(p for p in PLACES if p != 'center')}, or x,y such as "
                        "0.9,0.1 (0,0 is the crop's top-left corner).")
    return x, y


def parse_colour(text: str | tuple[int, int, int] | None) -> tuple[int, int, int]:
    """A colour's name (PIL's: "red", "#ff0000") or "R,G,B"; a UserError otherwise."""
    from PIL import ImageColor

    if text is None:
        return DEFAULT_COLOUR
    if isinstance(text, tuple):
        return tuple(int(c) for c in text[:3])  # type: ignore[return-value]
    try:
        if "," in text:
            rgb = tuple(int(c) for c in text.split(","))
            if len(rgb) != 3 or not all(0 <= c <= 255 for c in rgb):
                raise ValueError
            return rgb  # type: ignore[return-value]
        return ImageColor.getrgb(text.strip())[:3]
    except ValueError:
        raise UserError(f"The colour {text[:40]!r} is neither a colour's name nor R,G,B from 0 to 255.") from None


def read_png(path: str | os.PathLike) -> bytes:
    """A mark PNG's bytes, checked: a UserError in the user's words for a file that is missing, not a PNG, too
    large (bytes or pixels), or holds no pixel (fully transparent)."""
    path = Path(path).expanduser()
    try:
        size = path.stat().st_size
        if size > MAX_PNG_BYTES:
            raise UserError(f"The mark {path.name} is too large ({size / 2**20:.1f} MiB; a mark may be at most "
                            f"{MAX_PNG_BYTES // 2**20} MiB).")
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"The mark {path.name} was not found; please check the path.") from None
    except IsADirectoryError:
        raise UserError(f"The mark {path.name} is a folder; give a PNG file.") from None
    except OSError as err:
        raise UserError(f"The mark {path.name} cannot be read ({err.strerror or err}).") from None
    _png_pixels(data, path.name)
    return data


def _png_pixels(data: bytes, name: str) -> Image.Image:
    """The PNG's pixels as RGBA (a PNG without alpha: opaque); a UserError for another format, a size over
    `MAX_PNG_SIDE`, a file that cannot be decoded, or one with no visible pixel."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            if img.format != "PNG":
                raise UserError(f"The mark {name} is not a PNG (it is {img.format or 'another format'}); give a PNG, "
                                "with transparency where the mark is not.")
            if max(img.size) > MAX_PNG_SIDE:
                raise UserError(f"The mark {name} is too large ({img.size[0]} × {img.size[1]} pixels; a mark may be "
                                f"at most {MAX_PNG_SIDE} pixels a side).")
            rgba = img.convert("RGBA")
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - PIL raises many kinds for a file it cannot decode
        raise UserError(f"The mark {name} is not a PNG that can be read ({type(err).__name__}).") from None
    if not np.asarray(rgba)[..., 3].any():
        raise UserError(f"The mark {name} has no pixels: it is transparent everywhere.")
    return rgba


def make_mark(kind_or_png: str | os.PathLike, where: str | tuple[float, float] | None = None,
              size: float | None = None, opacity: float = 1.0, colour: str | tuple[int, int, int] | None = None,
              text: str = DEFAULT_TEXT) -> Mark:
    """The `Mark` a user asks for (--mark text|patch|border|FILE.png, --where, --size, --opacity, --colour, --text),
    checked: a UserError in the user's words for a value out of range or a bad PNG."""
    kind = str(kind_or_png)
    png = png_bytes = None
    if kind not in KINDS:
        png, png_bytes, kind = kind, read_png(kind), PNG
    if kind == "border" and where is not None:
        raise UserError("A border runs round the whole crop, so a place does not apply to it.",
                        cli_hint="Leave out --where, or choose another mark.")
    size = DEFAULT_SIZE[kind] if size is None else float(size)
    if not 0 < size <= (0.5 if kind == "border" else 1):
        most = "0.5 (a frame that wide covers the crop)" if kind == "border" else "1 (the crop side)"
        raise UserError(f"The mark's size {size:g} is out of range: give a share of the crop side above 0 and at "
                        f"most {most}.", cli_hint="Give another --size.")
    opacity = float(opacity)
    if not MIN_OPACITY <= opacity <= 1:
        raise UserError(f"The mark's opacity {opacity:g} is out of range: give {MIN_OPACITY:g} to 1 (1: opaque).",
                        cli_hint="Give another --opacity.")
    if kind == "text" and not text.strip():
        raise UserError("A text mark needs some text.", cli_hint=f"Give --text, e.g. {DEFAULT_TEXT!r}.")
    lacking = missing_characters(text.strip()[:80]) if kind == "text" else []
    if lacking:
        raise UserError(f"The text mark's font has no {', '.join(repr(c) for c in lacking[:10])}, which would be "
                        "drawn as a box or not at all; give letters, digits and signs of the Latin alphabet.")
    return Mark(kind, parse_where(where), size, opacity, parse_colour(colour), text.strip()[:80], png, png_bytes)


# --------------------------------------------------------------------------------------------
# The mark drawn on a crop.


@dataclass(frozen=True)
class Placed:
    """A mark drawn on a crop of side `crop`: each pixel's colour (crop, crop, 3) uint8 and alpha (crop, crop) float
    in 0–1 (0 outside the mark), its box on the crop (x0, y0, x1, y1, ends exclusive) and the pixels it covers."""

    crop: int
    colour: np.ndarray
    alpha: np.ndarray
    box: tuple[int, int, int, int]
    #: A border: its box is the whole crop, so its measures score its frame's pixels.
    frame: bool = False

    @property
    def region(self) -> np.ndarray:
        """(crop, crop) bool: the pixels the mark covers."""
        return self.alpha > 0

    @property
    def share(self) -> float:
        """The covered pixels' share of the crop."""
        return float(self.region.mean())

    @property
    def scored(self) -> np.ndarray:
        """(crop, crop) bool: the pixels the self-test's measures score (`scores`): the mark's box, as issue #42
        defines them (a text's box, not its letters' pixels), or a border's frame (its box is the whole crop)."""
        return box_region(self.crop, self.box, self.region if self.frame else None)

    @property
    def scored_share(self) -> float:
        """The scored pixels' share of the crop: the localisation ratio's ceiling is its inverse (`scores`)."""
        return float(self.scored.mean())


def box_region(crop: int, box: Sequence[int], frame: np.ndarray | None = None) -> np.ndarray:
    """(crop, crop) bool: the box (x0, y0, x1, y1, ends exclusive) filled, or `frame` (a border's pixels) as given."""
    if frame is not None:
        return np.asarray(frame, dtype=bool)
    x0, y0, x1, y1 = (int(v) for v in box)
    region = np.zeros((crop, crop), bool)
    region[y0:y1, x0:x1] = True
    return region


@functools.lru_cache(maxsize=1)
def _font():
    """PIL's default font at TEXT_PX (a subset of Aileron Regular)."""
    from PIL import ImageFont

    return ImageFont.load_default(size=TEXT_PX)


def _drawn(text: str) -> Image.Image:
    """The text in the default font, two-tone (no anti-aliasing), on a black canvas with a margin."""
    from PIL import ImageDraw

    canvas = Image.new("L", (TEXT_PX * (len(text) + 2), TEXT_PX * 2), 0)
    draw = ImageDraw.Draw(canvas)
    draw.fontmode = "1"  # two-tone glyphs: scaling by nearest neighbour keeps every covered pixel opaque
    draw.text((TEXT_PX // 2, TEXT_PX // 2), text, fill=255, font=_font())
    return canvas


def missing_characters(text: str) -> list[str]:
    """The characters of `text` the default font lacks: each drawn as the font's "no such glyph" (a private-use
    character's drawing), or as nothing though it is not a space."""
    nothing = _drawn("\ue000").tobytes()
    return [c for c in dict.fromkeys(text) if not c.isspace() and _drawn(c).tobytes() == nothing]


def _text_alpha(text: str) -> np.ndarray:
    """The text in PIL's default font, two-tone (no anti-aliasing), cut to its ink: (h, w) float 0 or 1."""
    canvas = _drawn(text)
    ink = canvas.getbbox()
    if ink is None:
        raise UserError(f"The text {text[:40]!r} draws nothing in the default font; give letters or digits.")
    return (np.asarray(canvas.crop(ink)) > 0).astype(np.float32)


def _text_layer(mark: Mark, side: int, crop: int) -> np.ndarray:
    """The text's alpha scaled so its longer side is `side` px; a UserError where its letters would be under
    MIN_TEXT_PX high, saying how long a text fits at this size."""
    alpha = _scaled(_text_alpha(mark.text), side)
    if alpha.shape[0] >= MIN_TEXT_PX:
        return alpha
    fits = next((n for n in range(len(mark.text) - 1, 0, -1) if mark.text[:n].strip()
                 and _scaled(_text_alpha(mark.text[:n]), side).shape[0] >= MIN_TEXT_PX), 0)
    room = (f"at the size {mark.size:g} a text of at most {fits} characters fits" if fits else
            f"at the size {mark.size:g} not even one character fits")
    raise UserError(f"The text {mark.text[:40]!r} would be {alpha.shape[0]} px high on the {crop}-px crop, too "
                    f"small to read (at least {MIN_TEXT_PX} px): {room}.",
                    cli_hint="Give a shorter --text or a larger --size.",
                    app_hint="Give a shorter text or a larger size.")


def _scaled(alpha: np.ndarray, side: int) -> np.ndarray:
    """A two-tone alpha scaled by nearest neighbour so its longer side is `side` pixels (at least 1 a side)."""
    h, w = alpha.shape
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return np.asarray(Image.fromarray((alpha * 255).astype(np.uint8)).resize(size, Image.NEAREST)) / 255.0


def _png_layer(mark: Mark, side: int) -> tuple[np.ndarray, np.ndarray]:
    """A PNG mark scaled so its longer side is `side` pixels: (colour (h, w, 3) uint8, alpha (h, w) float)."""
    rgba = _png_pixels(mark.png_bytes or b"", Path(mark.png or "mark.png").name)
    rgba = rgba.crop(rgba.getbbox())  # its transparent margin would shift the mark off its place
    w, h = rgba.size
    scale = side / max(w, h)
    rgba = rgba.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.LANCZOS)
    arr = np.asarray(rgba)
    return arr[..., :3], arr[..., 3].astype(np.float32) / 255.0


def place_mark(mark: Mark, crop: int) -> Placed:
    """The mark drawn on a (crop × crop) canvas at its place: colour, alpha (opacity applied, faint alpha dropped)
    and the box of what it covers."""
    side = max(1, round(mark.size * crop))
    colour = np.zeros((crop, crop, 3), np.uint8)
    alpha = np.zeros((crop, crop), np.float32)
    if mark.kind == "border":
        alpha[:] = 1
        alpha[side:crop - side, side:crop - side] = 0
        colour[:] = mark.colour
    else:
        if mark.kind == PNG:
            rgb, a = _png_layer(mark, side)
        else:
            a = np.ones((side, side), np.float32) if mark.kind == "patch" else _text_layer(mark, side, crop)
            rgb = np.broadcast_to(np.array(mark.colour, np.uint8), (*a.shape, 3))
        h, w = a.shape
        left, top = round(mark.where[0] * (crop - w)), round(mark.where[1] * (crop - h))
        alpha[top:top + h, left:left + w] = a
        colour[top:top + h, left:left + w] = rgb
    alpha *= mark.opacity
    alpha[alpha < FAINT_ALPHA] = 0
    rows, cols = np.nonzero(alpha)
    if not rows.size:
        raise UserError("The mark covers no pixel of the crop at this size and opacity; make it larger or "
                        "more opaque.")
    box = (int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1)
    return Placed(crop, colour, alpha, box, frame=mark.kind == "border")


# --------------------------------------------------------------------------------------------
# The copies: a photo at the network's resize geometry, with and without the mark.


def resize_geometry(photo: Image.Image, preprocess) -> tuple[Image.Image, tuple[int, int]]:
    """(the photo resized as the network resizes it, the offset (left, top) of the network's crop in it): the clean
    copy; the network's preprocessing of it keeps its size and takes exactly the crop it takes of the photo."""
    from ..metrics.bbox import crop_geometry

    resized = preprocess.resized(photo)
    width, height = resized.size
    crop = int(preprocess.crop_size)
    if min(width, height) < crop:
        raise UserError(f"The network resizes images to {preprocess.resize} px and crops {crop} px: a crop larger "
                        "than the resized image is padded, where no mark can be planted.")
    _, _, left, top = crop_geometry(width, height, int(preprocess.resize), crop)
    return resized, (left, top)


def plant(resized: Image.Image, offset: tuple[int, int], placed: Placed) -> Image.Image:
    """The marked copy: `resized` (a clean copy) with the mark blended in at the crop's offset."""
    left, top = offset
    c = placed.crop
    arr = np.asarray(resized).astype(np.float32)
    colour = placed.colour.astype(np.float32)
    if arr.ndim == 2:  # a gray network's copy: the mark's colour in gray, as PIL converts it
        colour = np.asarray(Image.fromarray(placed.colour).convert("L")).astype(np.float32)
        a = placed.alpha
    else:
        a = placed.alpha[..., None]
    window = arr[top:top + c, left:left + c]
    arr[top:top + c, left:left + c] = a * colour + (1 - a) * window
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), resized.mode)


__all__ = ["DEFAULT_PLACE", "DEFAULT_SIZE", "DEFAULT_TEXT", "FAINT_ALPHA", "KINDS", "MAX_PNG_BYTES", "MAX_PNG_SIDE",
           "MIN_TEXT_PX", "Mark", "PLACES", "PNG", "Placed", "box_region", "make_mark", "missing_characters",
           "parse_colour", "parse_where", "place_mark", "plant", "read_png", "resize_geometry"]
