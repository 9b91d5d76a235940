"""Pictures of a Per-Sample run step by step, with no Streamlit: the live view, the replay and the GIF.

Each step of the optimisation (`iba_core.per_sample.StepInfo`) is drawn as plain PIL images: the bits
per pixel and the bottleneck's λ, each with a labelled colour bar, the loss curves up to that step, and
the drain (`drain_image`: the total bits per step, one dot per step). The same drawings serve the page's live view (images update in place, with no blank frame in
between, unlike a chart that is mounted anew), its replay slider and the downloadable GIF, so all
three look alike.

Colours, scales and colour bars come from `colours`: by default each step's map on its own top
(`colours.step_scale`, written on its colour bar), the totals per step as the drain's line beside it.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
from PIL import Image, ImageDraw

from .arrays import as_map
from .text import SIMILARITY_HEAD, format_target_score, target_score_name
from .colours import (
    BITS_CMAP, BITS_LABEL, LAMBDA_CMAP, LAMBDA_LABEL, TEXT_RGB, WHITE_RGB, ColourScale, colour_bar, colour_map,
    round_ticks, run_scale, step_scale, text_font, text_size, tick_text,
)

if TYPE_CHECKING:  # type hints only: drawing needs no torch
    from ..results import AttributionResult, StepInfo

#: Side of a map in the pictures, in pixels (the heatmap's own resolution).
MAP_SIDE = 224
#: The GIF's map side and text size: at least what the page's replay shows on a 1280–1920 px wide screen
#: (two maps of about 300–480 px side by side), so the download is not smaller than the view it saves.
GIF_SIDE, GIF_FONT = 360, 19
#: GIF timing: each step long enough to read its line (0.7 s), and the final frame held (3 s) before it loops.
FRAME_MS, FINAL_FRAME_MS = 700, 3000
#: The title of the GIF's last frame (the result itself).
FINAL_TITLE = "Final map"

_MUTED = (110, 112, 125)
_GRID = (225, 227, 232)
#: Curve colours (Plotly's first three, as on the other charts).
_CE_RGB, _INFO_RGB, _P_RGB = (99, 110, 250), (239, 85, 59), (0, 160, 120)



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
    title_font = text_font(font_size + 1, bold=True)
    title_h = font_size + 10
    out = Image.new("RGB", (side + 8 + bar.width, title_h + side), WHITE_RGB)
    # off the left edge: the app rounds a picture's corners, which nicked the title's first letter
    ImageDraw.Draw(out).text((4, 1), title, fill=TEXT_RGB, font=title_font)
    out.paste(picture, (0, title_h))
    out.paste(bar, (side + 8, title_h))
    return out


def bits_panel(bits: np.ndarray, top: float, *, title: str = "Bits per pixel", side: int = MAP_SIDE,
               font_size: int = 13) -> Image.Image:
    """A bits map on the inferno scale 0 – `top`, its colour bar labelled bits / pixel."""
    return map_panel(bits, top=top, cmap=BITS_CMAP, label=BITS_LABEL, title=title, side=side, font_size=font_size)


def padded_to(picture: Image.Image, width: int) -> Image.Image:
    """`picture` on a white canvas `width` px wide (left-aligned): panels of one width shrink alike in columns
    of one width, so the bits map and λ are shown at one size."""
    if picture.width >= width:
        return picture
    out = Image.new("RGB", (width, picture.height), WHITE_RGB)
    out.paste(picture, (0, 0))
    return out


def lambda_panel(lambda_mean: np.ndarray, *, title: str = "λ (mean over channels)", side: int = MAP_SIDE,
                 font_size: int = 13) -> Image.Image:
    """λ on the viridis scale 0 – 1: 1 lets a feature through, 0 replaces it by noise."""
    return map_panel(lambda_mean, top=1.0, cmap=LAMBDA_CMAP, label=LAMBDA_LABEL, title=title, side=side,
                     font_size=font_size)


# ---- one step ----------------------------------------------------------------------------------


def step_bits(info: "StepInfo") -> float:
    """Total bits through the bottleneck at this step: the sum of its heatmap, plus the bits without a place on
    the image (a ViT's class token). At the last step: the result's total_bits."""
    return float(np.asarray(info.bits_per_pixel, dtype=np.float64).sum()) + float(getattr(info, "unlocated_bits", 0.0))


def step_text(info: "StepInfo", *, total_bits: float | None = None, head: str = "softmax") -> str:
    """'Step 3 / 10 · 12,345 bits · p(target) = 42.0 % on its batch': what each frame and the replay say.

    The bits are those of the step's map (`total_bits` when given: the result's own number at the last step,
    so the page shows one figure); p(target) is the mean over the step's noisy batch, before its update.
    """
    bits = step_bits(info) if total_bits is None else total_bits
    p = format_target_score(info.p_target, head)  # head: "similarity" for a CLIP model (a cosine)
    return f"Step {info.step} / {info.steps} · {bits:,.0f} bits · {target_score_name(head)} = {p} on its batch"


def final_text(result: "AttributionResult") -> str:
    """'Final map · 7,535 bits · p(target) with the bottleneck = 94.0 %': the GIF's last frame, from the result."""
    head = getattr(result, "head", "softmax")
    p = format_target_score(result.p_with, head)
    return f"{FINAL_TITLE} · {result.total_bits:,.0f} bits · {target_score_name(head)} with the bottleneck = {p}"


def _frame(text: str, bits: np.ndarray, lambda_mean: np.ndarray, top: float, side: int, font_size: int,
           lambda_title: str | None = None, drain: Image.Image | None = None,
           bits_width: int = 0) -> Image.Image:
    """The step's line on top, then its bits map (0 – `top`, padded to `bits_width`), the drain chart when given,
    and λ, side by side."""
    bits_pic = padded_to(bits_panel(bits, top, side=side, font_size=font_size), bits_width)
    titled = {"title": lambda_title} if lambda_title else {}  # CoIBA's shared mask says so
    lam = lambda_panel(lambda_mean, side=side, font_size=font_size, **titled)
    panels = [bits_pic, *([drain] if drain is not None else []), lam]
    head_font = text_font(font_size + 3, bold=True)
    head_h = font_size + 16
    gap, margin = 16, 8
    width = 2 * margin + sum(p.width for p in panels) + gap * (len(panels) - 1)
    out = Image.new("RGB", (width, head_h + max(p.height for p in panels) + margin), WHITE_RGB)
    ImageDraw.Draw(out).text((margin, 4), text, fill=TEXT_RGB, font=head_font)
    x = margin
    for panel in panels:
        out.paste(panel, (x, head_h))
        x += panel.width + gap
    return out


def step_frame(info: "StepInfo", top: float, *, side: int = MAP_SIDE, font_size: int = 13,
               head: str = "softmax", lambda_title: str | None = None, drain: Image.Image | None = None,
               bits_width: int = 0) -> Image.Image:
    """One GIF frame: the step's text on top, then bits (0 – `top`), the drain chart (`drain`, when given) and λ
    side by side (`lambda_title`: the λ picture's title where it is not the mean over channels, e.g. CoIBA's
    shared mask)."""
    return _frame(step_text(info, head=head), info.bits_per_pixel, info.lambda_mean, top, side, font_size,
                  lambda_title, drain, bits_width)


def final_frame(result: "AttributionResult", top: float, *, side: int = MAP_SIDE, font_size: int = 13,
                lambda_title: str | None = None, drain: Image.Image | None = None,
                bits_width: int = 0) -> Image.Image:
    """The GIF's last frame: the result's heatmap and λ, its total bits and p(target) with the bottleneck."""
    return _frame(final_text(result), result.heatmap, result.lambda_mean, top, side, font_size, lambda_title, drain,
                  bits_width)


def frame_tops(result: "AttributionResult", scale: ColourScale | None = None) -> list[float]:
    """The top of each GIF frame's bits scale (each step's, then the final map's): on the run's one fixed scale
    when `scale` is one ("run", "set"), else each step on its own largest value (`colours.step_scale`) and the
    final map on `scale` (default: `run_scale(result)`, the final map's largest value)."""
    scale = scale or run_scale(result)
    return [*(step_scale(h.bits_per_pixel, scale).top for h in result.history), scale.top]


def run_frames(result: "AttributionResult", scale: ColourScale | None = None, *, side: int = GIF_SIDE,
               font_size: int = GIF_FONT, lambda_title: str | None = None) -> list[Image.Image]:
    """One frame per step, then the final frame, each on its top (`frame_tops`), each with the drain (the total
    bits of the steps so far) beside its bits map, so the drain shows while each map keeps its full range."""
    tops = frame_tops(result, scale)
    head = getattr(result, "head", "softmax")  # a CLIP model's frames say "similarity"
    history, steps = result.history, len(result.history)
    # the bits panels of one width (their colour bars' labels differ): the drain and λ stay put from frame to frame
    bits_width = max(bits_panel(np.zeros((1, 1)), top, side=side, font_size=font_size).width for top in tops)
    probe = bits_panel(np.zeros((1, 1)), tops[-1], side=side, font_size=font_size)

    def drain(upto: int, mark: int | None = None) -> Image.Image:
        return drain_image(history[:upto], total_steps=steps, mark=mark, width=int(side * 0.9), height=probe.height,
                           font_size=font_size - 2)

    frames = [step_frame(h, top, side=side, font_size=font_size, head=head, lambda_title=lambda_title,
                         drain=drain(i + 1), bits_width=bits_width)
              for i, (h, top) in enumerate(zip(history, tops))]
    return [*frames, final_frame(result, tops[-1], side=side, font_size=font_size, lambda_title=lambda_title,
                                 drain=drain(steps, mark=steps), bits_width=bits_width)]


def _one_size(frames: list[Image.Image]) -> list[Image.Image]:
    """The frames on white canvases of the largest frame's size. Pillow stores a GIF frame as the part that
    changed and leaves the rest of the previous one standing: a narrower frame would leave the old frame's right
    edge (its λ colour bar label) beside its own, so every frame covers the whole canvas."""
    width, height = max(f.width for f in frames), max(f.height for f in frames)
    out = []
    for frame in frames:
        if frame.size != (width, height):
            canvas = Image.new("RGB", (width, height), WHITE_RGB)
            canvas.paste(frame, (0, 0))
            frame = canvas
        out.append(frame)
    return out


def animation_gif(result: "AttributionResult", scale: ColourScale | None = None, *, side: int = GIF_SIDE,
                  font_size: int = GIF_FONT, frame_ms: int = FRAME_MS, final_ms: int = FINAL_FRAME_MS,
                  lambda_title: str | None = None) -> bytes:
    """An animated GIF of the run (looping): one frame per step, each labelled with the step, its bits and
    p(target), `frame_ms` each; then the final map, named so, held `final_ms`. Each frame's bits map on its top
    (`frame_tops`: by default the step's own largest value, written on its colour bar), the drain beside it.
    ValueError for a run without steps."""
    if not result.history:
        raise ValueError("The run has no steps to animate.")
    frames = _one_size(run_frames(result, scale, side=side, font_size=font_size, lambda_title=lambda_title))
    # One palette for all frames: the colours stay put from frame to frame.
    strip = Image.new("RGB", (frames[0].width, frames[0].height * len(frames)))
    for i, frame in enumerate(frames):
        strip.paste(frame, (0, i * frame.height))
    palette = strip.quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    indexed = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    durations = [frame_ms] * (len(frames) - 1) + [final_ms]
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
    p_low: float = 0.0  # the right axis runs from here to 1 (−1 for a similarity, a cosine)

    def x_of(self, step: float) -> float:
        return self.left + (step - 0.5) / self.steps * (self.right - self.left)

    def y_loss(self, v: float) -> float:
        return self.bottom_y - v / self.loss_top * (self.bottom_y - self.top_y)

    def y_p(self, v: float) -> float:
        return self.bottom_y - (v - self.p_low) / (1.0 - self.p_low) * (self.bottom_y - self.top_y)


def _fit_term(info: "StepInfo", head: str) -> float:
    """The loss's fitting term as the chart draws it: L_CE, or for a similarity head 1 − cos (−cos, the term
    itself, shifted by 1 so that it is never negative: the same gradient, on the nats axis from 0)."""
    return info.ce + 1.0 if head == SIMILARITY_HEAD else info.ce


def _curves_plot(draw: ImageDraw.ImageDraw, history: Sequence["StepInfo"], total_steps: int | None, width: int,
                 height: int, font, font_size: int, head: str = "softmax") -> _CurvesPlot:
    """The chart's layout: round loss ticks, and room on the left for their labels, above for the legend."""
    steps = max(total_steps or (history[-1].steps if history else 1), 1)
    legend_h = font_size + 10
    loss_top = max([max(_fit_term(h, head), h.beta_info) for h in history] + [1e-6])
    loss_ticks = round_ticks(loss_top * 1.05, 0.0, 4)
    loss_top = max(loss_ticks[-1], loss_top) if loss_ticks else loss_top
    label_w = max([text_size(draw, tick_text(t), font)[0] for t in loss_ticks] + [text_size(draw, "nats", font)[0]])
    return _CurvesPlot(left=label_w + 12, right=width - 40, top_y=legend_h + 6, bottom_y=height - (font_size + 22),
                       height=height, legend_h=legend_h, steps=steps, loss_top=loss_top, loss_ticks=tuple(loss_ticks),
                       p_low=-1.0 if head == SIMILARITY_HEAD else 0.0)


def _draw_curve_axes(draw: ImageDraw.ImageDraw, plot: _CurvesPlot, font, font_size: int) -> None:
    """Grid lines and labels of the loss axis (left), the p axis (right) and the step axis (below)."""
    for t in plot.loss_ticks:
        y = plot.y_loss(t)
        draw.line([(plot.left, y), (plot.right, y)], fill=_GRID)
        text = tick_text(t)
        tw, th = text_size(draw, text, font)
        draw.text((plot.left - 6 - tw, y - th / 2 - 2), text, fill=_MUTED, font=font)
    for p in (plot.p_low, (plot.p_low + 1.0) / 2, 1.0):
        draw.text((plot.right + 6, plot.y_p(p) - font_size / 2 - 2), f"{p:g}", fill=_P_RGB, font=font)
    draw.line([(plot.left, plot.bottom_y), (plot.right, plot.bottom_y)], fill=_MUTED)
    every = max(1, math.ceil(plot.steps / 10))
    for s in range(1, plot.steps + 1):
        if s % every and s != 1:
            continue
        x = plot.x_of(s)
        draw.line([(x, plot.bottom_y), (x, plot.bottom_y + 3)], fill=_MUTED)
        tw, _ = text_size(draw, str(s), font)
        draw.text((x - tw / 2, plot.bottom_y + 5), str(s), fill=_MUTED, font=font)
    tw, _ = text_size(draw, "step", font)
    draw.text((plot.left + (plot.right - plot.left) / 2 - tw / 2, plot.height - font_size - 4), "step", fill=_MUTED,
              font=font)
    draw.text((2, plot.bottom_y + 5), "nats", fill=_MUTED, font=font)


def _curve_series(history: Sequence["StepInfo"], plot: _CurvesPlot,
                  head: str = "softmax") -> list[tuple[str, tuple, list]]:
    """(name, colour, [(x, y) in pixels]) of the three curves, in the legend's order (a similarity head's: 1 − cos
    and the similarity, `_fit_term`)."""
    fit = "1 − cos" if head == SIMILARITY_HEAD else "L_CE"
    series = [(fit, _CE_RGB, [(h.step, plot.y_loss(_fit_term(h, head))) for h in history]),
              ("β·L_I", _INFO_RGB, [(h.step, plot.y_loss(h.beta_info)) for h in history]),
              (target_score_name(head), _P_RGB, [(h.step, plot.y_p(h.p_target)) for h in history])]
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
        if name in ("p(target)", "similarity"):
            _draw_dotted(draw, xy, colour)
        else:
            draw.line(xy, fill=colour, width=2)
    for x, y in xy:
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=colour)


def _draw_legend(draw: ImageDraw.ImageDraw, series: list, plot: _CurvesPlot, font, font_size: int,
                 width: int) -> None:
    """The curves' names on top, each after a short line in its colour, and where p is read."""
    x, mid = plot.left, plot.legend_h / 2
    for name, colour, _ in series:
        draw.line([(x, mid + 1), (x + 16, mid + 1)], fill=colour, width=3)
        draw.text((x + 20, mid - font_size / 2 - 1), name, fill=TEXT_RGB, font=font)
        x += 20 + text_size(draw, name, font)[0] + 16
    # Where p is read, in as many words as fit (the p axis is also drawn in p's colour).
    for note in ("(p on the right axis)", "(p: right axis)") if series[-1][0] == "p(target)" else ("(right axis)",):
        if x + text_size(draw, note, font)[0] <= width - 2:
            draw.text((x, mid - font_size / 2 - 1), note, fill=_MUTED, font=font)
            break


def curves_image(history: Sequence["StepInfo"], *, total_steps: int | None = None, mark: int | None = None,
                 width: int = 520, height: int = 190, font_size: int = 12, head: str = "softmax") -> Image.Image:
    """L_CE and β·L_I (nats, left axis) and p(target) (0–1, right axis) over the steps so far; for a similarity
    head (a CLIP model) 1 − cos in place of L_CE and the similarity on a −1…1 right axis.

    total_steps fixes the x axis (default: the last step's T), so a live view does not rescale;
    mark draws a vertical line at that step (the replay's current step).
    """
    font = text_font(font_size)
    out = Image.new("RGB", (width, height), WHITE_RGB)
    draw = ImageDraw.Draw(out)
    plot = _curves_plot(draw, history, total_steps, width, height, font, font_size, head)
    _draw_curve_axes(draw, plot, font, font_size)
    if mark is not None and 1 <= mark <= plot.steps:
        x = plot.x_of(mark)
        draw.line([(x, plot.top_y), (x, plot.bottom_y)], fill=(150, 150, 160), width=2)
    series = _curve_series(history, plot, head)
    for name, colour, xy in series:
        _draw_curve(draw, name, colour, xy)
    _draw_legend(draw, series, plot, font, font_size, width)
    return out


# ---- the drain: total bits per step ----------------------------------------------------------------


#: Title of the drain chart, beside the bits map in the live view and the replay.
DRAIN_TITLE = "Total bits per step"
#: The drain chart's y axis: total bits (never per pixel).
DRAIN_AXIS = "total bits"


def drain_points(history: Sequence["StepInfo"]) -> list[tuple[int, float]]:
    """(step, total bits at that step: `step_bits`) for each step so far: the points of the drain chart."""
    return [(h.step, step_bits(h)) for h in history]


def _short_count(value: float) -> str:
    """Axis labels of a count: 0, 800, 2.5k, 150k, 1.2M."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def drain_image(history: Sequence["StepInfo"], *, total_steps: int | None = None, mark: int | None = None,
                width: int = 330, height: int = 250, font_size: int = 14) -> Image.Image:
    """The drain as a small line chart: total bits through the bottleneck at each step so far, one dot per step.

    A picture, like the maps, so the live view swaps it in place each step (a Plotly chart is mounted anew: it
    blanked for 0.2–0.25 s per step in Chromium). total_steps fixes the x axis (default: the last step's T);
    the y axis runs from 0 to the largest total so far, which the first steps set. mark rings that step and
    draws a line there (the replay's current step).
    """
    font, title_font = text_font(font_size), text_font(font_size + 1, bold=True)
    out = Image.new("RGB", (width, height), WHITE_RGB)
    draw = ImageDraw.Draw(out)
    draw.text((4, 1), DRAIN_TITLE, fill=TEXT_RGB, font=title_font)  # off the edge: the app rounds corners
    points = drain_points(history)
    steps = max(total_steps or (history[-1].steps if history else 1), 1)
    top = max([b for _, b in points] + [1.0])
    ticks = round_ticks(top, 0.0, 3)
    top = max(ticks[-1], top) * 1.05
    label_w = max(text_size(draw, _short_count(t), font)[0] for t in ticks)
    # the axis says its own unit, so a neighbour's colour-bar label ("bits / pixel") is not read as this axis's
    axis_w, axis_h = text_size(draw, DRAIN_AXIS, font)
    axis = Image.new("RGB", (axis_w + 4, axis_h + 6), WHITE_RGB)
    ImageDraw.Draw(axis).text((2, 0), DRAIN_AXIS, fill=_MUTED, font=font)
    axis = axis.rotate(90, expand=True)
    left, right = axis.width + label_w + 14, width - 12
    top_y, bottom_y = font_size + 18, height - (2 * font_size + 12)

    def x_of(step: float) -> float:
        return left + (step - 0.5) / steps * (right - left)

    def y_of(bits: float) -> float:
        return bottom_y - bits / top * (bottom_y - top_y)

    for t in ticks:
        y = y_of(t)
        draw.line([(left, y), (right, y)], fill=_GRID)
        tw, th = text_size(draw, _short_count(t), font)
        draw.text((left - 6 - tw, y - th / 2 - 2), _short_count(t), fill=_MUTED, font=font)
    draw.line([(left, bottom_y), (right, bottom_y)], fill=_MUTED)
    out.paste(axis, (2, int((top_y + bottom_y) / 2 - axis.height / 2)))
    every = max(1, math.ceil(steps / 5))
    for s in range(1, steps + 1):
        if s % every and not (s == 1 and every > 2):  # step 1 labelled where "2" would not crowd it
            continue
        tw, _ = text_size(draw, str(s), font)
        draw.line([(x_of(s), bottom_y), (x_of(s), bottom_y + 3)], fill=_MUTED)
        draw.text((x_of(s) - tw / 2, bottom_y + 5), str(s), fill=_MUTED, font=font)
    tw, _ = text_size(draw, "step", font)
    draw.text(((left + right) / 2 - tw / 2, height - font_size - 5), "step", fill=_MUTED, font=font)
    if mark is not None and 1 <= mark <= steps:
        draw.line([(x_of(mark), top_y), (x_of(mark), bottom_y)], fill=(150, 150, 160), width=2)
    xy = [(x_of(s), y_of(b)) for s, b in points]
    if len(xy) > 1:
        draw.line(xy, fill=_INFO_RGB, width=2)
    for x, y in xy:
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=_INFO_RGB)
    marked = [(x_of(s), y_of(b)) for s, b in points if s == mark]
    for x, y in marked:
        draw.ellipse([x - 7, y - 7, x + 7, y + 7], outline=TEXT_RGB, width=2)
    return out
