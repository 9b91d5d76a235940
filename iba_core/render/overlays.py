"""PIL images of a map over the photo, for the pages and downloads, with no Streamlit.

The heatmap blended over the image (the network's 224 × 224 crop, or the whole photo at its own
resolution) on a given colour scale, with a legend that states it; the "few bits" view (regions below a
threshold greyed and outlined, with the bits they still pass), object boxes drawn on the crop (with each
method's map maximum for the pointing game), and PNG bytes of any of them.
"""
from __future__ import annotations

import io
import math
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

from .colours import BITS_LABEL, colour_legend, colour_lut, hex_rgb, method_colour
from .arrays import as_map

#: Colour of the outline drawn around "not needed" regions and boxes (cyan reads well on inferno and photos).
OUTLINE_RGB = (0, 229, 255)


def _heatmap_like(image: Image.Image, heatmap: np.ndarray) -> np.ndarray:
    """The heatmap resized to the image (bilinear), as float32 (H, W)."""
    h = as_map(heatmap)
    if h.shape != (image.height, image.width):
        resized = Image.fromarray(h, mode="F").resize(image.size, Image.Resampling.BILINEAR)
        h = np.asarray(resized, dtype=np.float32)
    return h


def colorize(heatmap: np.ndarray, cmap: str = "inferno", vmax: float | None = None) -> np.ndarray:
    """(H, W, 3) uint8 colours for a map normalised to [0, vmax] (default: its max)."""
    import matplotlib

    h = as_map(heatmap)
    top = float(h.max()) if vmax is None else float(vmax)
    norm = np.clip(h / top, 0.0, 1.0) if top > 0 else np.zeros_like(h)
    rgba = matplotlib.colormaps[cmap](norm)
    return (rgba[..., :3] * 255).round().astype(np.uint8)


def _top_of(heatmap: np.ndarray, top: float | None) -> float:
    """The scale's top: `top`, or the map's own maximum when None (a map on its own, not part of a run)."""
    if top is None:
        h = as_map(heatmap)
        return float(h.max()) if h.size else 0.0
    return float(top)


#: The narrowest picture a legend is drawn under: "≥ 107 bits / pixel" and a round tick need about this much at the
#: legend's smallest font (a network's 224 px crop is wider already).
LEGEND_MIN_WIDTH = 200


def with_legend(picture: Image.Image, heatmap: np.ndarray, top: float, cmap: str = "inferno",
                label: str = BITS_LABEL) -> Image.Image:
    """`picture` with a colour legend below it, as wide as it: 0 – `top` in `label` ("≥ top" where the map has
    values above the scale). The picture itself keeps its pixels; one narrower than LEGEND_MIN_WIDTH (a 96 px tile)
    is enlarged by a whole factor, pixels kept as blocks, so the legend's text fits beside its scale."""
    h = as_map(heatmap)
    clipped = bool(h.size) and float(h.max()) > top * (1 + 1e-6)
    if 0 < picture.width < LEGEND_MIN_WIDTH:
        factor = -(-LEGEND_MIN_WIDTH // picture.width)
        picture = picture.resize((picture.width * factor, picture.height * factor), Image.Resampling.NEAREST)
    legend = colour_legend(picture.width, top, cmap, label=label, clipped=clipped)
    out = Image.new("RGB", (picture.width, picture.height + legend.height), (255, 255, 255))
    out.paste(picture.convert("RGB"), (0, 0))
    out.paste(legend, (0, picture.height))
    return out


def overlay_image(
    cropped: Image.Image, heatmap: np.ndarray, opacity: float = 0.6, cmap: str = "inferno", *,
    top: float | None = None, legend: bool = False, label: str = BITS_LABEL, weighted: bool = False,
) -> Image.Image:
    """The heatmap, colour-mapped on 0 – `top` (default: its own maximum), alpha-blended over the image.

    A run's views pass the run's scale as `top` (`colours.run_scale`), so a map with few bits looks dark
    rather than stretched to full brightness. legend=True adds the colour legend below the image
    (`with_legend`), its scale named `label` (bits per pixel unless the map is in other units); without it the
    picture is image-sized. weighted=True scales the opacity by the value (none at 0, `opacity` at `top`), so
    the photo shows as it is where the map is zero (a concept map over the crops where the concept sits).
    """
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must be in [0, 1], got {opacity}.")
    base = np.asarray(cropped.convert("RGB"), dtype=np.float32)
    scale_top = _top_of(heatmap, top)
    values = _heatmap_like(cropped, heatmap)
    colours = colorize(values, cmap, vmax=scale_top).astype(np.float32)
    if weighted:
        share = np.clip(values / scale_top, 0.0, 1.0) if scale_top > 0 else np.zeros_like(values)
        opacity = opacity * share[..., None]
    blended = (1.0 - opacity) * base + opacity * colours
    out = Image.fromarray(blended.round().clip(0, 255).astype(np.uint8), mode="RGB")
    return with_legend(out, heatmap, max(scale_top, 1e-6), cmap, label=label) if legend else out


def centre_crop_box(size: tuple[int, int], resize: int, crop: int) -> tuple[int, int, int, int]:
    """Where the network's crop lies in the original image: (left, top, right, bottom) in its pixels.

    Mirrors the preprocessing (`Preprocess.crop`): the short side is resized to `resize` (the long side
    to int(resize · long / short), as torchvision does), then a `crop` × `crop` square is cut from the
    centre. The box is that square mapped back through the resize, rounded to whole pixels.
    """
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"The image has no pixels ({width} × {height}).")
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = resize, int(resize * long / short)
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    left, top = round((new_w - crop) / 2.0), round((new_h - crop) / 2.0)
    sx, sy = width / new_w, height / new_h
    box = (round(left * sx), round(top * sy), round((left + crop) * sx), round((top + crop) * sy))
    x0, y0 = max(box[0], 0), max(box[1], 0)
    return x0, y0, max(min(box[2], width), x0 + 1), max(min(box[3], height), y0 + 1)


#: Brightness of the photo outside the network's crop in the full-resolution overlay (1 = unchanged);
#: that part is also shown in grey, and the crop's border is outlined.
OUTSIDE_BRIGHTNESS = 0.45


def full_resolution_overlay(
    original: Image.Image, heatmap: np.ndarray, box: tuple[int, int, int, int], opacity: float = 0.6,
    cmap: str = "inferno", outside: float = OUTSIDE_BRIGHTNESS, *, top: float | None = None, legend: bool = False,
) -> Image.Image:
    """The heatmap over the whole original photo, at the photo's own size (legend=True: with the colour legend
    below it, as wide as the photo).

    The heatmap covers the network's crop: it is resized (bilinear) onto `box` (see `centre_crop_box`)
    and blended there like `overlay_image` (on 0 – `top`, default its max; same colours). The network never
    saw the rest of the photo, so it has no bits: it is kept, in grey and dimmed to `outside` brightness,
    and the crop's border is outlined (`OUTLINE_RGB`, about 1/300 of the short side thick).
    """
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must be in [0, 1], got {opacity}.")
    photo = original.convert("RGB")
    x0, y0, x1, y1 = box
    if not (0 <= x0 < x1 <= photo.width and 0 <= y0 < y1 <= photo.height):
        raise ValueError(f"The crop box {box} lies outside the {photo.width} × {photo.height} image.")
    h = as_map(heatmap)
    scale_top = _top_of(h, top)
    # Colour levels 0–255 (+0.5: PIL's float → 8-bit conversion truncates), resized in float, then looked
    # up in the colour map: all in PIL, cheap even for a 40-megapixel photo.
    levels = (np.minimum(h * (255.0 / scale_top), 255.0) if scale_top > 0 else np.zeros_like(h)) + 0.5
    index = Image.fromarray(levels.astype(np.float32), mode="F").resize(
        (x1 - x0, y1 - y0), Image.Resampling.BILINEAR).convert("L")
    lut = colour_lut(cmap)
    colours = Image.merge("RGB", [index.point(lut[:, c].tolist()) for c in range(3)])
    inside = Image.blend(photo.crop(box), colours, opacity)
    out = ImageEnhance.Brightness(photo.convert("L")).enhance(outside).convert("RGB")
    out.paste(inside, (x0, y0))
    width = max(1, round(min(photo.size) / 300))
    ImageDraw.Draw(out).rectangle([x0 - width, y0 - width, x1 + width - 1, y1 + width - 1], outline=OUTLINE_RGB,
                                  width=width)
    return with_legend(out, h, max(scale_top, 1e-6), cmap) if legend else out


def not_needed_mask(heatmap: np.ndarray, threshold_bits: float) -> np.ndarray:
    """True where a pixel carries fewer than `threshold_bits` bits: the "few bits" regions."""
    return as_map(heatmap) < threshold_bits


def not_needed_fraction(heatmap: np.ndarray, threshold_bits: float) -> float:
    """Share of the image (0–1) below the threshold."""
    mask = not_needed_mask(heatmap, threshold_bits)
    return float(mask.mean()) if mask.size else 0.0


def bits_below(heatmap: np.ndarray, threshold_bits: float) -> float:
    """Bits the regions below the threshold still pass: the heatmap summed over them (≥ 0).

    Only a region with exactly zero bits is covered by the paper's guarantee; this number says how
    far the greyed regions are from that.
    """
    h = as_map(heatmap)
    return float(h[h < threshold_bits].astype(np.float64).sum())


def part_of_total_text(part: float, total: float) -> tuple[str, str]:
    """A part of a total in bits and the total, written with the same decimals ("120.4", "120.4"): rounded
    apart, 120.4 of 120.45 read "120.4 bits of the 120", a part larger than its whole. One decimal below 1,000
    bits, none above; the part is never written larger than the total."""
    decimals = 1 if abs(total) < 1000 else 0
    part = min(part, total) if total >= 0 else part  # float sums over a subset may overshoot by an ulp
    return f"{part:,.{decimals}f}", f"{total:,.{decimals}f}"


#: A greyed part passing at most this share of the total bits is "few, but not zero"; above it the sentence says
#: the threshold is too high to show the regions the network takes little from.
FEW_SHARE = 0.1


def few_bits_text(share: float, passed: float, total: float, threshold: float) -> str:
    """The sentence under the few-bits picture: how much of the crop lies below `threshold` bits per pixel and the
    bits those regions still pass (the paper guarantees nothing for them: only zero bits means unused)."""
    unit = "bit" if threshold == 1 else "bits"
    if share <= 0:  # nothing to grey, and no "few" bits to speak of
        return (f"No part of the crop is below {threshold:g} {unit} / pixel: every region passes more. A higher "
                "threshold shows the regions the network takes the least from.")
    part, whole = part_of_total_text(passed, total)  # one rounding: a part never reads above its whole
    if passed <= FEW_SHARE * total:
        few = "few, but not zero."
    else:  # greying most of the bits is a threshold set too high, not regions the network does without
        few = (f"{passed / max(total, 1e-12):.0%} of them: at this threshold the greyed regions are not the ones the "
               "network takes little from; a lower threshold shows those.")
    return (f"Greyed and outlined: {share:.0%} of the crop, below {threshold:g} {unit} / pixel. Together these "
            f"regions still pass **{part} bits** of the {whole} — {few}")


def _boundary(mask: np.ndarray, width: int = 1) -> np.ndarray:
    """Pixels of `mask` that touch a pixel outside it (4-neighbourhood), thickened to `width`."""
    edge = np.zeros_like(mask)
    for _ in range(width):
        inner = mask & ~edge
        padded = np.pad(inner, 1, mode="edge")
        eroded = inner & padded[:-2, 1:-1] & padded[2:, 1:-1] & padded[1:-1, :-2] & padded[1:-1, 2:]
        edge |= inner & ~eroded
    return edge


def not_needed_outline(cropped: Image.Image, heatmap: np.ndarray, threshold_bits: float) -> Image.Image:
    """The image with regions below `threshold_bits` greyed out and outlined: the "few bits" view.

    The paper's guarantee covers only regions with zero bits: they pass no information through the
    noisy bottleneck, so the prediction made through the bottleneck does not need them. Regions with a
    few bits are not covered; `bits_below` says how many bits the greyed regions still pass.
    """
    rgb = np.asarray(cropped.convert("RGB"), dtype=np.float32)
    mask = not_needed_mask(_heatmap_like(cropped, heatmap), threshold_bits)
    grey = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    # Faded grey: still recognisable, clearly "switched off" next to the coloured needed regions.
    faded = 0.35 * grey[..., None] + 0.65 * 200.0
    out = np.where(mask[..., None], faded, rgb)
    out[_boundary(mask, width=2)] = OUTLINE_RGB
    return Image.fromarray(out.round().clip(0, 255).astype(np.uint8), mode="RGB")


def outline_region(picture: Image.Image, mask: np.ndarray, colour: tuple[int, int, int] = OUTLINE_RGB,
                   width: int = 2) -> Image.Image:
    """A copy of `picture` with the edge of `mask` ((H, W) bool, True inside; resized to the picture, nearest)
    drawn in `colour`, `width` pixels thick: a region shown over a map without hiding the map's colours."""
    inside = np.asarray(Image.fromarray(np.asarray(mask, dtype=bool)).resize(picture.size, Image.Resampling.NEAREST))
    out = np.array(picture.convert("RGB"))
    out[_boundary(inside, width=width)] = colour
    return Image.fromarray(out, mode="RGB")


def png_bytes(image: Image.Image, optimize: bool = True) -> bytes:
    """PNG-encoded bytes of a PIL image (for download buttons and files); optimize=False is much faster
    for big pictures (a full-resolution overlay) at a slightly larger file."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=optimize)
    return buf.getvalue()


def draw_boxes(image: Image.Image, boxes: Sequence[tuple[float, float, float, float]],
               colour: tuple[int, int, int] = OUTLINE_RGB, width: int = 2) -> Image.Image:
    """A copy of `image` with each box (x0, y0, x1, y1, in its pixels) outlined."""
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out)
    for x0, y0, x1, y1 in boxes:
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=colour, width=width)
    return out


#: Radius of the mark at a map's maximum, in pixels of the crop (the pointing game's tolerance is drawn apart).
PEAK_MARK_PX = 4


def pointing_picture(cropped: Image.Image, boxes: Sequence[tuple[float, float, float, float]],
                     peaks: Sequence[tuple[float, float]], tolerance: float,
                     colours: Sequence[str] | None = None) -> Image.Image:
    """The crop with the object boxes outlined and, per method in chart order, its map's maximum marked in the
    method's colour: a dot, and a circle of radius `tolerance` (a hit when the circle reaches a box).

    peaks: (row, column) of each method's maximum, pixel indices of the crop (marked at the pixel's centre);
    colours: each method's chart colour (hex), as the charts beside it draw it; by default by place. Maxima within a
    dot's width of each other have their dots set apart around the point (a line joins each to it), so every
    method's mark shows.
    """
    out = draw_boxes(cropped, boxes)
    draw = ImageDraw.Draw(out)
    r = PEAK_MARK_PX
    for i, (row, col) in enumerate(peaks):
        colour = hex_rgb(colours[i] if colours is not None else method_colour(i))
        x, y = col + 0.5, row + 0.5
        draw.ellipse([x - tolerance, y - tolerance, x + tolerance, y + tolerance], outline=colour, width=1)
        # Maxima on (or next to) each other would hide every dot but the last: each dot of such a group is moved
        # a little aside, each in its own direction, and joined to its point by a line of its colour.
        group = [j for j, (rj, cj) in enumerate(peaks) if math.hypot(rj - row, cj - col) < 2 * r + 2]
        if len(group) > 1:
            angle = 2 * math.pi * group.index(i) / len(group) - math.pi / 2
            dx, dy = (2 * r + 2) * math.cos(angle), (2 * r + 2) * math.sin(angle)
            draw.line([x, y, x + dx, y + dy], fill=colour, width=1)
            x, y = x + dx, y + dy
        draw.ellipse([x - r, y - r, x + r, y + r], fill=colour, outline=(255, 255, 255))
    return out


def token_strip(words: Sequence[tuple[str, float]], top: float | None = None, *, font_size: int = 18,
                width: int = 640, cmap: str = "inferno") -> Image.Image:
    """A prompt's words on the colours of their bits (M2IB's text side, `text_side.TokenBits.words`), each with its
    bits written under it, wrapped to `width` px, with the colour legend below (as wide as the words, at least 320
    px): 0 – `top` bits per token (default: the largest word's), the image map's colour map. A picture, not HTML:
    a prompt's text is drawn, never interpreted."""
    from .colours import text_font, text_size

    top = float(top if top is not None else max((b for _, b in words), default=0.0)) or 1.0
    lut = colour_lut(cmap)
    font, small = text_font(font_size), text_font(max(font_size - 5, 9))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    pad, gap, chip_h, number_h = 6, 6, font_size + 14, font_size
    line_h = chip_h + number_h
    boxes, x, y, right = [], gap, gap, 0
    for word, bits in words:
        number = f"{bits:.3g}"
        w = max(text_size(probe, word, font)[0], text_size(probe, number, small)[0]) + 2 * pad
        if x + w > width - gap and x > gap:
            x, y = gap, y + line_h + gap
        boxes.append((x, y, w, word, bits, number))
        x += w + gap
        right = max(right, x)
    legend = colour_legend(max(right, 320), top, cmap, label="bits / token")
    picture = Image.new("RGB", (max(right, legend.width), y + line_h + gap + legend.height), "white")
    draw = ImageDraw.Draw(picture)
    for x, y, w, word, bits, number in boxes:
        index = int(round(min(max(bits / top, 0.0), 1.0) * (len(lut) - 1)))
        colour = tuple(int(c) for c in lut[index][:3])
        draw.rectangle((x, y, x + w, y + chip_h), fill=colour)
        light = sum(colour) / 3 > 128  # dark text on a light colour, light on a dark one
        draw.text((x + pad, y + 5), word, fill=(0, 0, 0) if light else (255, 255, 255), font=font)
        draw.text((x + pad, y + chip_h + 2), number, fill=(60, 60, 60), font=small)
    picture.paste(legend, (0, picture.height - legend.height))
    return picture
