"""PIL images of a map over the photo, for the pages and downloads, with no Streamlit.

The heatmap blended over the image, the "not needed" view (regions below a threshold greyed and
outlined), object boxes drawn on the crop, and PNG bytes of any of them.
"""
from __future__ import annotations

import io
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

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


def overlay_image(
    cropped: Image.Image, heatmap: np.ndarray, opacity: float = 0.6, cmap: str = "inferno"
) -> Image.Image:
    """The heatmap (normalised to its max, colour-mapped) alpha-blended over the image, image-sized."""
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must be in [0, 1], got {opacity}.")
    base = np.asarray(cropped.convert("RGB"), dtype=np.float32)
    colours = colorize(_heatmap_like(cropped, heatmap), cmap).astype(np.float32)
    blended = (1.0 - opacity) * base + opacity * colours
    return Image.fromarray(blended.round().clip(0, 255).astype(np.uint8), mode="RGB")


def not_needed_mask(heatmap: np.ndarray, threshold_bits: float) -> np.ndarray:
    """True where a pixel carries fewer than `threshold_bits` bits: the "not needed" regions."""
    return as_map(heatmap) < threshold_bits


def not_needed_fraction(heatmap: np.ndarray, threshold_bits: float) -> float:
    """Share of the image (0–1) below the threshold."""
    mask = not_needed_mask(heatmap, threshold_bits)
    return float(mask.mean()) if mask.size else 0.0


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
    """The image with regions below `threshold_bits` greyed out and outlined.

    The paper's guarantee: a region scored ~0 bits passes no information through the bottleneck, so
    the network's prediction (with the bottleneck in place) does not need it.
    """
    rgb = np.asarray(cropped.convert("RGB"), dtype=np.float32)
    mask = not_needed_mask(_heatmap_like(cropped, heatmap), threshold_bits)
    grey = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    # Faded grey: still recognisable, clearly "switched off" next to the coloured needed regions.
    faded = 0.35 * grey[..., None] + 0.65 * 200.0
    out = np.where(mask[..., None], faded, rgb)
    out[_boundary(mask, width=2)] = OUTLINE_RGB
    return Image.fromarray(out.round().clip(0, 255).astype(np.uint8), mode="RGB")


def png_bytes(image: Image.Image) -> bytes:
    """PNG-encoded bytes of a PIL image (for download buttons and files)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def draw_boxes(image: Image.Image, boxes: Sequence[tuple[float, float, float, float]],
               colour: tuple[int, int, int] = OUTLINE_RGB, width: int = 2) -> Image.Image:
    """A copy of `image` with each box (x0, y0, x1, y1, in its pixels) outlined."""
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out)
    for x0, y0, x1, y1 in boxes:
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=colour, width=width)
    return out
