"""Pictures of a Per-Sample run step by step, with no Streamlit: the live view, the replay and the GIF.

Each step of the optimisation (`iba_core.per_sample.StepInfo`) is drawn as plain PIL images: the bits
per pixel and the bottleneck's λ, each with a labelled colour bar, and the loss curves up to that
step. The same drawings serve the page's live view (images update in place, with no blank frame in
between, unlike a chart that is mounted anew), its replay slider and the downloadable GIF, so all
three look alike.

Bits maps of one run share one colour scale (`ColourScale`): by default the first step's maximum, so
the viewer sees the bits drain away as the bottleneck closes; or a fixed value; or, when asked, each
step on its own maximum.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .arrays import as_map

if TYPE_CHECKING:  # type hints only: drawing needs no torch
    from ..per_sample import StepInfo

#: Colour-bar label of every bits map (the unit of the heatmap).
BITS_LABEL = "bits / pixel"
LAMBDA_LABEL = "λ"
BITS_CMAP, LAMBDA_CMAP = "inferno", "viridis"
#: Side of a map in the pictures, in pixels (the heatmap's own resolution).
MAP_SIDE = 224
#: GIF timing: each step, and the last step held longer.
FRAME_MS, LAST_FRAME_MS = 600, 2000

_TEXT = (49, 51, 63)
_MUTED = (110, 112, 125)
_GRID = (225, 227, 232)
_WHITE = (255, 255, 255)
#: Curve colours (Plotly's first three, as on the other charts).
_CE_RGB, _INFO_RGB, _P_RGB = (99, 110, 250), (239, 85, 59), (0, 160, 120)


# ---- colour scale ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ColourScale:
    """The colour scale of a run's bits maps.

    auto=False (default): one scale for every step, topped at `top` bits / pixel, or at the first
    step's maximum when `top` is None. auto=True: each step on its own maximum (shapes stay visible,
    amounts are not comparable between steps).
    """

    auto: bool = False
    top: float | None = None

    def top_for(self, first: np.ndarray, current: np.ndarray) -> float:
        """The top of the scale (bits / pixel) for the map `current` of a run whose first map is `first`."""
        if self.auto:
            return _positive_max(current)
        if self.top is not None and self.top > 0:
            return float(self.top)
        return _positive_max(first)

    def describe(self, first: np.ndarray | None = None) -> str:
        """A short phrase for captions: how the maps are scaled."""
        if self.auto:
            return "each step scaled to its own maximum"
        if self.top is not None and self.top > 0:
            return f"one scale for all steps, 0 – {self.top:.3g} {BITS_LABEL} (set by you)"
        top = f" ({_positive_max(first):.3g} {BITS_LABEL})" if first is not None else ""
        return f"one scale for all steps, 0 – the first step's maximum{top}"


def _positive_max(values: np.ndarray) -> float:
    arr = as_map(values)
    top = float(arr.max()) if arr.size else 0.0
    return top if top > 0 else 1e-6


# ---- drawing helpers ---------------------------------------------------------------------------


@lru_cache(maxsize=16)
def _font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans (ships with matplotlib; has λ, β and ·), else PIL's own font."""
    try:
        import matplotlib

        name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
        return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size)
    except (ImportError, OSError):  # pragma: no cover - matplotlib is a dependency
        return ImageFont.load_default(size)


@lru_cache(maxsize=8)
def _lut(cmap: str) -> np.ndarray:
    """(256, 3) uint8 colours of a matplotlib colour map."""
    import matplotlib

    return (matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)


def colour_map(values: np.ndarray, top: float, cmap: str, bottom: float = 0.0) -> Image.Image:
    """The map as an RGB image: `bottom` → the colour map's first colour, `top` and above → its last."""
    arr = as_map(values)
    span = top - bottom if top > bottom else 1e-6
    idx = np.clip((arr - bottom) / span * 255.0, 0, 255).round().astype(np.uint8)
    return Image.fromarray(_lut(cmap)[idx], mode="RGB")


def _text_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right - left, bottom - top


def _ticks(top: float, bottom: float = 0.0, n: int = 4) -> list[float]:
    """Round tick values from bottom to top (both ends included when they are round themselves)."""
    span = top - bottom
    if span <= 0:
        return [bottom]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(bottom / step) * step
    ticks = [first + i * step for i in range(int((top - first) / step + 1e-9) + 1)]
    return [t for t in ticks if bottom - 1e-12 <= t <= top + 1e-12]


def _tick_text(value: float) -> str:
    """Tick labels: 0, 0.25, 1.5, 40, 2,000 (no exponent notation)."""
    if value == 0:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _p_text(p: float) -> str:
    """p(target) with two decimals, or two significant digits when smaller than 0.01."""
    return f"{p:.2f}" if p >= 0.01 or p == 0 else f"{p:.2g}"


def colour_bar(height: int, top: float, cmap: str, label: str, *, bottom: float = 0.0, font_size: int = 13,
               clipped: bool = False) -> Image.Image:
    """A vertical colour bar `height` px tall with round ticks and `label` written along it.

    clipped=True writes "≥" before the top value: the map has pixels above the scale.
    """
    bar_w, tick_len, pad = 12, 4, 4
    font = _font(font_size)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    ticks = _ticks(top, bottom)
    labels = [_tick_text(t) for t in ticks]
    top_text = ("≥ " if clipped else "") + _tick_text(top)
    text_w = max(_text_size(probe, t, font)[0] for t in [*labels, top_text])
    label_w, label_h = _text_size(probe, label, font)
    width = bar_w + tick_len + pad + text_w + pad + (label_h if len(label) > 1 else label_w + 4) + pad
    out = Image.new("RGB", (width, height), _WHITE)
    gradient = _lut(cmap)[np.linspace(255, 0, height).round().astype(int)]
    out.paste(Image.fromarray(np.repeat(gradient[:, None, :], bar_w, axis=1), mode="RGB"), (0, 0))
    draw = ImageDraw.Draw(out)
    span = top - bottom if top > bottom else 1.0
    for value, text in zip(ticks, labels):
        y = round((1.0 - (value - bottom) / span) * (height - 1))
        draw.line([(bar_w, y), (bar_w + tick_len, y)], fill=_TEXT)
        th = _text_size(draw, text, font)[1]
        draw.text((bar_w + tick_len + pad, min(max(y - th // 2 - 2, 0), height - th - 3)), text, fill=_TEXT, font=font)
    if not ticks or abs(ticks[-1] - top) > 1e-9 * max(abs(top), 1):  # always say where the scale ends
        draw.text((bar_w + tick_len + pad, 0), top_text, fill=_TEXT, font=font)
    elif clipped:
        draw.rectangle([bar_w + tick_len + 1, 0, width - label_h - pad - 1, font_size + 3], fill=_WHITE)
        draw.text((bar_w + tick_len + pad, 0), top_text, fill=_TEXT, font=font)
    # The label, rotated to read bottom-up along the bar (a single symbol such as λ stays upright).
    tag = Image.new("RGB", (label_w + 4, label_h + 6), _WHITE)
    ImageDraw.Draw(tag).text((2, 0), label, fill=_TEXT, font=font)
    if len(label) > 1:
        tag = tag.rotate(90, expand=True)
    out.paste(tag, (width - tag.width - 1, max((height - tag.height) // 2, 0)))
    return out


def map_panel(values: np.ndarray, *, top: float, cmap: str, label: str, title: str, side: int = MAP_SIDE,
              bottom: float = 0.0, font_size: int = 13) -> Image.Image:
    """Title, the map (`side` × `side` px) and its colour bar (labelled `label`) as one picture."""
    arr = as_map(values)
    picture = colour_map(arr, top, cmap, bottom)
    # Feature maps are coarse: show their cells as blocks; input-sized maps are resampled smoothly.
    resample = Image.Resampling.NEAREST if max(arr.shape) < side / 2 else Image.Resampling.BILINEAR
    picture = picture.resize((side, side), resample)
    bar = colour_bar(side, top, cmap, label, bottom=bottom, font_size=font_size,
                     clipped=bool(arr.size) and float(arr.max()) > top * (1 + 1e-6))
    title_font = _font(font_size + 1, bold=True)
    title_h = font_size + 10
    out = Image.new("RGB", (side + 8 + bar.width, title_h + side), _WHITE)
    ImageDraw.Draw(out).text((0, 1), title, fill=_TEXT, font=title_font)
    out.paste(picture, (0, title_h))
    out.paste(bar, (side + 8, title_h))
    return out


def bits_panel(bits: np.ndarray, top: float, *, title: str = "Bits per pixel", side: int = MAP_SIDE,
               font_size: int = 13) -> Image.Image:
    """A bits map on the inferno scale 0 – `top`, its colour bar labelled bits / pixel."""
    return map_panel(bits, top=top, cmap=BITS_CMAP, label=BITS_LABEL, title=title, side=side, font_size=font_size)


def lambda_panel(lambda_mean: np.ndarray, *, title: str = "λ (mean over channels)", side: int = MAP_SIDE,
                 font_size: int = 13) -> Image.Image:
    """λ on the viridis scale 0 – 1: 1 lets a feature through, 0 replaces it by noise."""
    return map_panel(lambda_mean, top=1.0, cmap=LAMBDA_CMAP, label=LAMBDA_LABEL, title=title, side=side,
                     font_size=font_size)


# ---- one step ----------------------------------------------------------------------------------


def step_bits(info: "StepInfo") -> float:
    """Total bits through the bottleneck at this step (the sum of its heatmap)."""
    return float(np.asarray(info.bits_per_pixel, dtype=np.float64).sum())


def step_text(info: "StepInfo") -> str:
    """'Step 3 / 10 · 12,345 bits · p(target) = 0.42': what each frame and the replay say."""
    return f"Step {info.step} / {info.steps} · {step_bits(info):,.0f} bits · p(target) = {_p_text(info.p_target)}"


def step_frame(info: "StepInfo", top: float, *, side: int = MAP_SIDE, font_size: int = 13) -> Image.Image:
    """One GIF frame: the step's text on top, then bits (0 – `top`) and λ side by side."""
    bits = bits_panel(info.bits_per_pixel, top, side=side, font_size=font_size)
    lam = lambda_panel(info.lambda_mean, side=side, font_size=font_size)
    head_font = _font(font_size + 3, bold=True)
    head_h = font_size + 16
    gap, margin = 16, 8
    width = margin + bits.width + gap + lam.width + margin
    out = Image.new("RGB", (width, head_h + max(bits.height, lam.height) + margin), _WHITE)
    ImageDraw.Draw(out).text((margin, 4), step_text(info), fill=_TEXT, font=head_font)
    out.paste(bits, (margin, head_h))
    out.paste(lam, (margin + bits.width + gap, head_h))
    return out


def run_frames(history: Sequence["StepInfo"], scale: ColourScale = ColourScale(), *,
               side: int = MAP_SIDE) -> list[Image.Image]:
    """One frame per step, all on `scale` (default: the first step's maximum)."""
    if not history:
        return []
    first = history[0].bits_per_pixel
    return [step_frame(h, scale.top_for(first, h.bits_per_pixel), side=side) for h in history]


def animation_gif(history: Sequence["StepInfo"], scale: ColourScale = ColourScale(), *, side: int = MAP_SIDE,
                  frame_ms: int = FRAME_MS, last_frame_ms: int = LAST_FRAME_MS) -> bytes:
    """An animated GIF of the run, one frame per step (looping), each frame labelled with the step,
    the bits and p(target). ValueError for a run without steps."""
    frames = run_frames(history, scale, side=side)
    if not frames:
        raise ValueError("The run has no steps to animate.")
    # One palette for all frames: the colours stay put from frame to frame.
    strip = Image.new("RGB", (frames[0].width, frames[0].height * len(frames)))
    for i, frame in enumerate(frames):
        strip.paste(frame, (0, i * frame.height))
    palette = strip.quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    indexed = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    durations = [frame_ms] * (len(frames) - 1) + [last_frame_ms]
    buf = io.BytesIO()
    indexed[0].save(buf, format="GIF", save_all=True, append_images=indexed[1:], duration=durations, loop=0,
                    disposal=1, optimize=False)
    return buf.getvalue()


# ---- curves ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CurvesPlot:
    """Where the curves chart draws: the plot area in pixels and the scales of its three axes."""

    left: float
    right: float
    top_y: float
    bottom_y: float
    height: int  # of the whole picture (the x axis' title sits at its bottom)
    legend_h: float
    steps: int  # the x axis runs from step 1 to here
    loss_top: float  # nats at the top of the left axis
    loss_ticks: tuple[float, ...]

    def x_of(self, step: float) -> float:
        return self.left + (step - 0.5) / self.steps * (self.right - self.left)

    def y_loss(self, v: float) -> float:
        return self.bottom_y - v / self.loss_top * (self.bottom_y - self.top_y)

    def y_p(self, v: float) -> float:
        return self.bottom_y - v * (self.bottom_y - self.top_y)


def _curves_plot(draw: ImageDraw.ImageDraw, history: Sequence["StepInfo"], total_steps: int | None, width: int,
                 height: int, font, font_size: int) -> _CurvesPlot:
    """The chart's layout: round loss ticks, and room on the left for their labels, above for the legend."""
    steps = max(total_steps or (history[-1].steps if history else 1), 1)
    legend_h = font_size + 10
    loss_top = max([max(h.ce, h.beta_info) for h in history] + [1e-6])
    loss_ticks = _ticks(loss_top * 1.05, 0.0, 4)
    loss_top = max(loss_ticks[-1], loss_top) if loss_ticks else loss_top
    label_w = max([_text_size(draw, _tick_text(t), font)[0] for t in loss_ticks] + [_text_size(draw, "nats", font)[0]])
    return _CurvesPlot(left=label_w + 12, right=width - 40, top_y=legend_h + 6, bottom_y=height - (font_size + 22),
                       height=height, legend_h=legend_h, steps=steps, loss_top=loss_top, loss_ticks=tuple(loss_ticks))


def _draw_curve_axes(draw: ImageDraw.ImageDraw, plot: _CurvesPlot, font, font_size: int) -> None:
    """Grid lines and labels of the loss axis (left), the p axis (right) and the step axis (below)."""
    for t in plot.loss_ticks:
        y = plot.y_loss(t)
        draw.line([(plot.left, y), (plot.right, y)], fill=_GRID)
        text = _tick_text(t)
        tw, th = _text_size(draw, text, font)
        draw.text((plot.left - 6 - tw, y - th / 2 - 2), text, fill=_MUTED, font=font)
    for p in (0.0, 0.5, 1.0):
        draw.text((plot.right + 6, plot.y_p(p) - font_size / 2 - 2), f"{p:g}", fill=_P_RGB, font=font)
    draw.line([(plot.left, plot.bottom_y), (plot.right, plot.bottom_y)], fill=_MUTED)
    every = max(1, math.ceil(plot.steps / 10))
    for s in range(1, plot.steps + 1):
        if s % every and s != 1:
            continue
        x = plot.x_of(s)
        draw.line([(x, plot.bottom_y), (x, plot.bottom_y + 3)], fill=_MUTED)
        tw, _ = _text_size(draw, str(s), font)
        draw.text((x - tw / 2, plot.bottom_y + 5), str(s), fill=_MUTED, font=font)
    tw, _ = _text_size(draw, "step", font)
    draw.text((plot.left + (plot.right - plot.left) / 2 - tw / 2, plot.height - font_size - 4), "step", fill=_MUTED,
              font=font)
    draw.text((2, plot.bottom_y + 5), "nats", fill=_MUTED, font=font)


def _curve_series(history: Sequence["StepInfo"], plot: _CurvesPlot) -> list[tuple[str, tuple, list]]:
    """(name, colour, [(x, y) in pixels]) of the three curves, in the legend's order."""
    series = [("L_CE", _CE_RGB, [(h.step, plot.y_loss(h.ce)) for h in history]),
              ("β·L_I", _INFO_RGB, [(h.step, plot.y_loss(h.beta_info)) for h in history]),
              ("p(target)", _P_RGB, [(h.step, plot.y_p(h.p_target)) for h in history])]
    return [(name, colour, [(plot.x_of(s), y) for s, y in points]) for name, colour, points in series]


def _draw_dotted(draw: ImageDraw.ImageDraw, xy: list, colour: tuple) -> None:
    """A dotted polyline: every other 6-pixel piece of each segment."""
    for (x0, y0), (x1, y1) in zip(xy, xy[1:]):
        n = max(int(math.hypot(x1 - x0, y1 - y0) / 6), 1)
        for i in range(0, n, 2):
            a, b = i / n, min((i + 1) / n, 1.0)
            draw.line([(x0 + a * (x1 - x0), y0 + a * (y1 - y0)), (x0 + b * (x1 - x0), y0 + b * (y1 - y0))],
                      fill=colour, width=2)


def _draw_curve(draw: ImageDraw.ImageDraw, name: str, colour: tuple, xy: list) -> None:
    """One curve with a dot at each step; p(target) dotted, as on the Plotly charts."""
    if len(xy) > 1:
        if name == "p(target)":
            _draw_dotted(draw, xy, colour)
        else:
            draw.line(xy, fill=colour, width=2)
    for x, y in xy:
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)


def _draw_legend(draw: ImageDraw.ImageDraw, series: list, plot: _CurvesPlot, font, font_size: int) -> None:
    """The curves' names on top, each after a short line in its colour, and where p is read."""
    x, mid = plot.left, plot.legend_h / 2
    for name, colour, _ in series:
        draw.line([(x, mid + 1), (x + 16, mid + 1)], fill=colour, width=3)
        draw.text((x + 20, mid - font_size / 2 - 1), name, fill=_TEXT, font=font)
        x += 20 + _text_size(draw, name, font)[0] + 16
    draw.text((x, mid - font_size / 2 - 1), "(p on the right axis)", fill=_MUTED, font=font)


def curves_image(history: Sequence["StepInfo"], *, total_steps: int | None = None, mark: int | None = None,
                 width: int = 520, height: int = 190, font_size: int = 12) -> Image.Image:
    """L_CE and β·L_I (nats, left axis) and p(target) (0–1, right axis) over the steps so far.

    total_steps fixes the x axis (default: the last step's T), so a live view does not rescale;
    mark draws a vertical line at that step (the replay's current step).
    """
    font = _font(font_size)
    out = Image.new("RGB", (width, height), _WHITE)
    draw = ImageDraw.Draw(out)
    plot = _curves_plot(draw, history, total_steps, width, height, font, font_size)
    _draw_curve_axes(draw, plot, font, font_size)
    if mark is not None and 1 <= mark <= plot.steps:
        x = plot.x_of(mark)
        draw.line([(x, plot.top_y), (x, plot.bottom_y)], fill=(150, 150, 160), width=2)
    series = _curve_series(history, plot)
    for name, colour, xy in series:
        _draw_curve(draw, name, colour, xy)
    _draw_legend(draw, series, plot, font, font_size)
    return out
