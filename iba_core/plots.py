"""Figures and images shared by the app pages and the command line.

Plotly figures for interactive views (heatmaps with a colour bar in bits, training curves, the
β × layer grid) and PIL images for downloads (overlay, "not needed" view). No Streamlit here.
"""
from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import plotly.graph_objects as go
from PIL import Image
from plotly.subplots import make_subplots

if TYPE_CHECKING:  # imported for type hints only: plots must not pull in torch-heavy modules
    from .grid import GridCell
    from .per_sample import StepInfo



def _colorscale(cmap: str, n: int = 11) -> list[list]:
    """A Plotly colour scale sampled from a matplotlib colour map, as rgb() strings.

    Same colours as the PNG overlays; rgb() rather than hex because Streamlit's chart frontend
    rewrites some hex colours (inferno's #000004 turned lavender).
    """
    import matplotlib

    cm = matplotlib.colormaps[cmap]
    stops = np.linspace(0.0, 1.0, n)
    return [[float(t), "rgb({},{},{})".format(*(int(round(255 * c)) for c in cm(t)[:3]))] for t in stops]


#: Sequential colour scale for information maps; dark = few bits, bright = many.
BITS_COLORSCALE = _colorscale("inferno")
LAMBDA_COLORSCALE = _colorscale("viridis")
BITS_UNIT = "bits / pixel"
#: Colour of the outline drawn around "not needed" regions (cyan reads well on inferno and photos).
OUTLINE_RGB = (0, 229, 255)

_FONT = dict(family='"Source Sans Pro", "Source Sans 3", "Helvetica Neue", Arial, sans-serif', size=12, color="#31333F")
#: A plain white look that does not depend on the host's chart theme (Streamlit's would recolour the maps).
_TEMPLATE = "plotly_white"


# ---- helpers -------------------------------------------------------------------------------


def _as_map(values: np.ndarray) -> np.ndarray:
    """A finite float32 2-D array (float32 keeps Plotly's binary payload small)."""
    arr = np.asarray(values, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"Expected a 2-D map, got shape {arr.shape}.")
    return np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)


def _image_axes(fig: go.Figure, row: int | None = None, col: int | None = None) -> None:
    """Square pixels, y pointing down like an image, no tick labels."""
    kw = {} if row is None else dict(row=row, col=col)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, constrain="domain", **kw)
    fig.update_yaxes(
        showticklabels=False, showgrid=False, zeroline=False, autorange="reversed",
        scaleanchor="x" if row is None else None, constrain="domain", **kw,
    )


def _map_figure(
    values: np.ndarray,
    title: str,
    colorbar_title: str,
    *,
    zmin: float = 0.0,
    zmax: float | None = None,
    colorscale: list | str = BITS_COLORSCALE,
    hover_unit: str = "",
    height: int = 360,
    downsample: int = 1,
) -> go.Figure:
    z = _downsample(values, downsample)
    if zmax is None:
        zmax = float(z.max()) if z.size and z.max() > zmin else zmin + 1e-6
    f = max(downsample, 1)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            # Pooled cells keep the original pixel coordinates, so hover positions stay comparable.
            x0=(f - 1) / 2, dx=f, y0=(f - 1) / 2, dy=f,
            zmin=zmin,
            zmax=zmax,
            colorscale=colorscale,
            colorbar=dict(title=dict(text=colorbar_title, side="right"), thickness=12, outlinewidth=0),
            hovertemplate=f"x=%{{x}}, y=%{{y}}<br>%{{z:.4g}} {hover_unit}<extra></extra>",
        )
    )
    _image_axes(fig)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=14)) if title else None,
        margin=dict(l=0, r=0, t=36 if title else 4, b=0),
        height=height,
        font=_FONT,
        template=_TEMPLATE,
    )
    return fig


# ---- heatmaps -----------------------------------------------------------------------------


def heatmap_figure(
    bits: np.ndarray, title: str, zmax: float | None = None, *, height: int = 360, downsample: int = 1
) -> go.Figure:
    """Bits-per-pixel map with a colour bar in bits; zmax fixes the top of the scale (default: max).

    downsample > 1 mean-pools the map (still bits per original pixel) for a lighter live view.
    """
    return _map_figure(bits, title, BITS_UNIT, zmax=zmax, hover_unit=BITS_UNIT, height=height, downsample=downsample)


def lambda_figure(lambda_mean: np.ndarray, title: str = "λ (mean over channels)", *, height: int = 360) -> go.Figure:
    """The bottleneck's mask λ per feature-map cell: 1 lets the feature through, 0 replaces it by noise."""
    return _map_figure(lambda_mean, title, "λ", zmin=0.0, zmax=1.0, colorscale=LAMBDA_COLORSCALE, height=height)


def curves_figure(history: Sequence["StepInfo"], title: str = "Optimisation", *, height: int = 360) -> go.Figure:
    """L_CE and β·L_I (nats, left axis) and p(target) (right axis, 0–1) over the steps."""
    steps = [h.step for h in history]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=steps, y=[h.ce for h in history], name="L_CE", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=steps, y=[h.beta_info for h in history], name="β·L_I", mode="lines+markers"))
    fig.add_trace(
        go.Scatter(
            x=steps, y=[h.p_target for h in history], name="p(target)", mode="lines+markers",
            line=dict(dash="dot"),
        ),
        secondary_y=True,
    )
    total = history[-1].steps if history else 1
    fig.update_xaxes(title_text="step", range=[0.5, max(total, 1) + 0.5], dtick=max(1, math.ceil(total / 10)))
    fig.update_yaxes(title_text="loss (nats)", rangemode="tozero", secondary_y=False)
    fig.update_yaxes(title_text="p(target)", range=[0, 1.02], tickvals=[0, 0.25, 0.5, 0.75, 1.0],
                     secondary_y=True, showgrid=False)
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=14)),
        margin=dict(l=10, r=10, t=60, b=10),
        height=height,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="left", x=0.0, font=dict(size=11)),
        font=_FONT,
        template=_TEMPLATE,
    )
    return fig


# ---- images -------------------------------------------------------------------------------


def _heatmap_like(image: Image.Image, heatmap: np.ndarray) -> np.ndarray:
    """The heatmap resized to the image (bilinear), as float32 (H, W)."""
    h = _as_map(heatmap)
    if h.shape != (image.height, image.width):
        resized = Image.fromarray(h, mode="F").resize(image.size, Image.Resampling.BILINEAR)
        h = np.asarray(resized, dtype=np.float32)
    return h


def colorize(heatmap: np.ndarray, cmap: str = "inferno", vmax: float | None = None) -> np.ndarray:
    """(H, W, 3) uint8 colours for a map normalised to [0, vmax] (default: its max)."""
    import matplotlib

    h = _as_map(heatmap)
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
    return _as_map(heatmap) < threshold_bits


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


# ---- β × layer grid ---------------------------------------------------------------------------


def _downsample(values: np.ndarray, factor: int) -> np.ndarray:
    """Mean-pool by `factor` (bits per pixel stay bits per original pixel); shrinks the payload."""
    h = _as_map(values)
    if factor <= 1:
        return h
    H, W = (h.shape[0] // factor) * factor, (h.shape[1] // factor) * factor
    return h[:H, :W].reshape(H // factor, factor, W // factor, factor).mean(axis=(1, 3))


def grid_figure(
    cells: Sequence["GridCell"],
    title: str = "",
    rows: Sequence[str] = ("beta", "layer"),
    downsample: int = 2,
    *,
    height: int | None = None,
) -> go.Figure:
    """One heatmap per cell, a row per cell.row; each map on its own scale (titles give p and bits).

    Cells not yet computed may be missing: their slot stays empty, so the figure can fill live.
    """
    by_row = {r: [c for c in cells if c.row == r] for r in rows}
    ncols = max([len(v) for v in by_row.values()] + [1])
    titles: list[str] = []
    for r in rows:
        row_cells = by_row[r]
        titles += [_cell_title(c) for c in row_cells] + [""] * (ncols - len(row_cells))
    fig = make_subplots(
        rows=len(rows), cols=ncols, subplot_titles=titles, horizontal_spacing=0.015, vertical_spacing=0.12
    )
    for i, r in enumerate(rows, start=1):
        for j, cell in enumerate(by_row[r], start=1):
            z = _downsample(cell.heatmap, downsample)
            fig.add_trace(
                go.Heatmap(
                    z=z, zmin=0.0, zmax=max(float(z.max()), 1e-6), colorscale=BITS_COLORSCALE,
                    showscale=False,
                    hovertemplate=f"{cell.label}<br>%{{z:.3g}} {BITS_UNIT}<extra></extra>",
                ),
                row=i, col=j,
            )
        for j in range(1, ncols + 1):
            _image_axes(fig, row=i, col=j)
        fig.update_yaxes(title_text=_row_title(by_row[r]), title_font=dict(size=12), row=i, col=1)
    # Square cells: anchor every y axis to its own x axis.
    for k in range(1, len(rows) * ncols + 1):
        suffix = "" if k == 1 else str(k)
        fig.layout[f"yaxis{suffix}"].scaleanchor = f"x{suffix}"
    fig.update_annotations(font=dict(size=11))
    fig.update_layout(
        title=dict(text=title, x=0.0, xanchor="left", font=dict(size=14)) if title else None,
        height=height or 230 * len(rows) + 60,
        margin=dict(l=10, r=10, t=60 if title else 40, b=10),
        font=_FONT,
        template=_TEMPLATE,
    )
    return fig


def _cell_title(cell: "GridCell") -> str:
    return f"{cell.label}<br>p = {cell.p_with:.2f} · {cell.total_bits:,.0f} bits"


def _row_title(row_cells: Sequence["GridCell"]) -> str:
    """What is held fixed along a row: the layer for the β row, β·k for the layer row."""
    if not row_cells:
        return ""
    first = row_cells[0]
    return f"layer {first.layer}" if first.row == "beta" else f"β·k = {first.beta_k:g}"
