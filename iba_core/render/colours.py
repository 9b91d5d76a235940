"""Colours, colour scales and their legends, with no Streamlit: one home for every picture's scale.

- the colour maps and labels of the bits maps (inferno, "bits / pixel") and of λ (viridis);
- `ColourScale`: the scales of a run's bits maps (`run_scale`, `step_scale`, `live_scale`). By default (basis
  "final") each step's map runs from 0 to its own largest value, written at the top of its colour bar, so the
  drain stays visible while the bits fall from ~4 to ~0.7 bits / pixel (the totals per step are the drain chart's
  line); the last step's scale is then the final map's, which the final map and the overlays use. On request every
  map of a run shares one scale: the run's largest value over all its steps, or a top the user sets;
- `colour_lut` / `colour_map`: a map as RGB on such a scale; `plotly_colorscale`: the same colours for Plotly;
- round ticks and their labels (`scale_labels`), a vertical `colour_bar` beside a map and a horizontal
  `colour_legend` under a picture; the font their text is written in.

`animation`, `overlays` and `figures` draw with these, so a map, its replay, its overlay and its chart agree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .arrays import as_map

if TYPE_CHECKING:  # type hints only: drawing needs no torch
    from ..results import AttributionResult, StepInfo

#: Colour-bar label of every bits map (the unit of the heatmap).
BITS_LABEL = "bits / pixel"
LAMBDA_LABEL = "λ"
BITS_CMAP, LAMBDA_CMAP = "inferno", "viridis"
#: Text and background of the legends (Streamlit's text colour on white).
TEXT_RGB = (49, 51, 63)
WHITE_RGB = (255, 255, 255)


# ---- colour scale ------------------------------------------------------------------------------
#: One colour per method in every chart and picture of the same methods, so a method's curve, its legend entry and
#: its mark on a picture agree: Plotly's default qualitative palette, then D3's, then four of Google's (G10), so
#: each of the registered methods (22) has a colour of its own.
METHOD_COLOURS = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A",
                  "#19D3F3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52",
                  "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD",
                  "#8C564B", "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF",
                  "#990099", "#316395", "#B82E2E", "#66AA00")


def method_colour(i: int) -> str:
    """The `i`-th colour of the method palette (hex), repeating after its last."""
    return METHOD_COLOURS[i % len(METHOD_COLOURS)]


def method_colours(keys: Iterable[str], registered: Sequence[str]) -> dict[str, str]:
    """{method key: colour}, each key's colour fixed by its place in `registered` (the method registry's order,
    `iba_core.methods.method_keys()`), not by its place among `keys`: a method keeps its colour whichever others
    are chosen with it. Keys not registered take the colours after the registered ones, in their order."""
    place = {key: i for i, key in enumerate(registered)}
    out: dict[str, str] = {}
    extra = len(place)
    for key in keys:
        if key not in place:
            place[key], extra = extra, extra + 1
        out[key] = method_colour(place[key])
    return out


def hex_rgb(colour: str) -> tuple[int, int, int]:
    """'#EF553B' → (239, 85, 59), for drawing a chart's colour on a PIL picture."""
    text = colour.lstrip("#")
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


#: Below this a scale's top is treated as this (a map of zeros still gets a scale of non-zero width).
_MIN_TOP = 1e-6


@dataclass(frozen=True)
class ColourScale:
    """The colour scale of a run's bits maps: 0 – `top` bits / pixel.

    source says where the top comes from: "final" (the final map's largest value: a finished run's default; its
    steps each on their own, `step_scale`), "step" (one step's own largest value), "run" (the run's largest value
    over all its steps and the final map), "set" (a value the user gave), "so far" (the live view on the run's
    scale: the largest value of the steps so far).
    """

    top: float
    source: str = "run"

    def describe(self) -> str:
        """A short phrase for captions: the scale and where its top comes from."""
        span = f"0 – {tick_text(self.top)} {BITS_LABEL}"
        if self.source == "set":
            return f"one scale for the whole run, {span} (set by you)"
        if self.source == "so far":
            return f"{span}, the largest value so far (it grows only when a step exceeds it)"
        if self.source == "step":
            return f"{span}, this step's largest value"
        if self.source == "final":
            return (f"each step's map from 0 to its own largest value (written at the top of its colour bar), so "
                    f"the draining map stays readable; the totals per step are the drain chart's line. The final "
                    f"map: {span}, its largest value")
        return f"one scale for the whole run, {span}: the run's largest value over all steps and the final map"

    def clips(self, values: np.ndarray) -> bool:
        """Whether `values` has pixels above the top (drawn in the top colour; the colour bar says "≥")."""
        arr = np.asarray(values)
        return bool(arr.size) and float(np.nanmax(arr)) > self.top * (1 + 1e-6)


def largest_bits(maps: Iterable[np.ndarray]) -> float:
    """The largest value over `maps` (bits / pixel), at least a tiny positive number."""
    tops = [float(np.nanmax(arr)) for arr in (as_map(m) for m in maps) if arr.size]
    return max([*tops, _MIN_TOP])


def _scale(maps: Iterable[np.ndarray], fixed: float | None, source: str) -> ColourScale:
    if fixed is not None and math.isfinite(fixed) and fixed > 0:
        return ColourScale(float(fixed), "set")
    return ColourScale(largest_bits(maps), source)


#: What a finished run's scale tops at, unless the user types a top: "final" (default, issue #28: the final map's
#: largest value, so the result — which peaks far below step 1's 4–5 bits/px — uses the whole colour range and
#: reads at a glance; earlier steps above it are drawn in the top colour, "≥") or "run" (the largest value over
#: all steps and the final map: the maps themselves show the drain, and the result looks dark).
SCALE_BASES = ("final", "run")


def run_scale(result: "AttributionResult", fixed: float | None = None, basis: str = "final") -> ColourScale:
    """The one scale of a finished run, for the replay, the GIF, the final map and the overlays: `fixed` when
    the user gave a positive top, else by `basis` (SCALE_BASES): the largest bits per pixel of the final map
    ("final", the default), or over every step and the final map ("run")."""
    if basis not in SCALE_BASES:
        raise ValueError(f"basis must be one of {', '.join(SCALE_BASES)}, not {basis!r}.")
    if basis == "final":
        return _scale([result.heatmap], fixed, "final")
    return _scale([*(h.bits_per_pixel for h in result.history), result.heatmap], fixed, "run")


def step_scale(bits: np.ndarray, scale: ColourScale | None = None) -> ColourScale:
    """The scale one step's bits map is drawn on within a run on `scale`: a run on one fixed scale ("run", "set",
    "so far") draws every step on it; by default ("final", or no scale) each step runs from 0 to its own largest
    value (source "step"), so the last step's scale is the final map's.

    Why not one scale for the steps: the bits drain from ~4.3 to ~0.7 bits / pixel in a few steps, so on step
    1's top the later maps are nearly black, and on the final map's top the first ones are flat squares in the
    top colour. On its own top a map is still absolute (0 is dark, the top is written on its colour bar), and no
    pixel clips."""
    if scale is not None and scale.source not in ("final", "step"):
        return scale
    return ColourScale(largest_bits([bits]), "step")


def live_scale(history: Sequence["StepInfo"], fixed: float | None = None) -> ColourScale:
    """The live view's scale after the steps in `history`: `fixed`, else the largest value so far. It only
    grows, and after the last step it is the run's scale (the last step's map is the final map)."""
    return _scale([h.bits_per_pixel for h in history], fixed, "so far")


# ---- colours, ticks and text ---------------------------------------------------------------------------


@lru_cache(maxsize=16)
def text_font(size: int, bold: bool = False) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans (ships with matplotlib; has λ, β and ·), else PIL's own font."""
    try:
        import matplotlib

        name = "DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"
        return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / name), size)
    except (ImportError, OSError):  # pragma: no cover - matplotlib is a dependency
        return ImageFont.load_default(size)


@lru_cache(maxsize=8)
def colour_lut(cmap: str) -> np.ndarray:
    """(256, 3) uint8 colours of a matplotlib colour map."""
    import matplotlib

    return (matplotlib.colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)


def colour_map(values: np.ndarray, top: float, cmap: str, bottom: float = 0.0) -> Image.Image:
    """The map as an RGB image: `bottom` → the colour map's first colour, `top` and above → its last."""
    arr = as_map(values)
    span = top - bottom if top > bottom else 1e-6
    idx = np.clip((arr - bottom) / span * 255.0, 0, 255).round().astype(np.uint8)
    return Image.fromarray(colour_lut(cmap)[idx], mode="RGB")


def text_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return right - left, bottom - top


def round_ticks(top: float, bottom: float = 0.0, n: int = 4) -> list[float]:
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


def tick_text(value: float) -> str:
    """Tick labels: 0, 0.25, 1.5, 40, 2,000 (exponent notation only below 0.001)."""
    if value == 0:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def scale_labels(top: float, bottom: float = 0.0, *, min_gap: float = 0.16, clipped: bool = False,
                 n: int = 4) -> list[tuple[float, str]]:
    """(value, label) of a colour bar's labels, bottom to top: round ticks, and the top itself, always labelled
    ("≥ top" when `clipped`: the map has values above it).

    A round tick closer to the top or to the tick below it than `min_gap` (a fraction of the bar's length) is
    left out, so no two labels collide (61.8 gets 0, 20, 40, 61.8: not "60" under "61.8").
    """
    span = top - bottom
    top_text = ("≥ " if clipped else "") + tick_text(top)
    if span <= 0:
        return [(bottom, tick_text(bottom))]
    labels: list[tuple[float, str]] = []
    for value in round_ticks(top, bottom, n):
        if (top - value) / span < max(min_gap, 1e-9):
            continue  # the top's own label is there (or would sit on it)
        if labels and (value - labels[-1][0]) / span < min_gap:
            continue
        labels.append((value, tick_text(value)))
    return [*labels, (top, top_text)]


def bar_labels(height: int, top: float, bottom: float, font, clipped: bool) -> list[tuple[int, int, str]]:
    """(y of the tick, y of the label's top edge, text) of each label of a vertical colour bar `height` px
    tall, bottom to top: round ticks where they fit, and the top at the bar's top. No two labels overlap."""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    line_h = text_size(probe, "0123456789", font)[1]
    # The top label hangs below the bar's top edge (it cannot sit centred on it): a round tick needs a label and a
    # half plus a margin of room below the top, or "30" touches "32.7".
    labels = scale_labels(top, bottom, min_gap=(1.5 * line_h + 8) / max(height, 1), clipped=clipped)
    span = top - bottom if top > bottom else 1.0
    out = []
    for value, text in labels:
        y = round((1.0 - (value - bottom) / span) * (height - 1))
        out.append((y, min(max(y - line_h // 2 - 2, 0), height - line_h - 3), text))
    return out


def colour_bar(height: int, top: float, cmap: str, label: str, *, bottom: float = 0.0, font_size: int = 13,
               clipped: bool = False) -> Image.Image:
    """A vertical colour bar `height` px tall with round ticks, its top value and `label` written along it.

    clipped=True writes "≥" before the top value: the map has pixels above the scale.
    """
    bar_w, tick_len, pad = 12, 4, 4
    font = text_font(font_size)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    labels = bar_labels(height, top, bottom, font, clipped)
    # Room for "≥ top" whether or not this map clips: a run's bars (and the frames of its GIF) keep one width,
    # so nothing beside them moves from step to step.
    text_w = max(text_size(probe, text, font)[0] for text in [*(t for _, _, t in labels), "≥ " + tick_text(top)])
    label_w, label_h = text_size(probe, label, font)
    width = bar_w + tick_len + pad + text_w + pad + (label_h if len(label) > 1 else label_w + 4) + pad
    out = Image.new("RGB", (width, height), WHITE_RGB)
    gradient = colour_lut(cmap)[np.linspace(255, 0, height).round().astype(int)]
    out.paste(Image.fromarray(np.repeat(gradient[:, None, :], bar_w, axis=1), mode="RGB"), (0, 0))
    draw = ImageDraw.Draw(out)
    for y, y_text, text in labels:
        draw.line([(bar_w, y), (bar_w + tick_len, y)], fill=TEXT_RGB)
        draw.text((bar_w + tick_len + pad, y_text), text, fill=TEXT_RGB, font=font)
    # The label, rotated to read bottom-up along the bar (a single symbol such as λ stays upright).
    tag = Image.new("RGB", (label_w + 4, label_h + 6), WHITE_RGB)
    ImageDraw.Draw(tag).text((2, 0), label, fill=TEXT_RGB, font=font)
    if len(label) > 1:
        tag = tag.rotate(90, expand=True)
    out.paste(tag, (width - tag.width - 1, max((height - tag.height) // 2, 0)))
    return out


def colour_legend(width: int, top: float, cmap: str = BITS_CMAP, *, label: str = BITS_LABEL,
                  clipped: bool = False, font_size: int | None = None) -> Image.Image:
    """A horizontal colour bar `width` px wide for under a picture: 0 at the left, the top (and `label`) at the
    right, round ticks between where they fit. The text grows with the width (a photo's legend stays legible).
    """
    size = font_size or int(min(max(round(width / 30), 12), 48))
    font = text_font(size)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    pad = max(size // 2, 4)
    bar_h, line_h = max(size, 8), text_size(probe, "0123456789", font)[1]
    x0, x1 = pad, max(width - pad, pad + 2)
    top_text = ("≥ " if clipped else "") + f"{tick_text(top)} {label}"
    label_w = max(text_size(probe, text, font)[0] for text in (top_text, "0,000"))
    labels = scale_labels(top, 0.0, min_gap=(label_w + size) / max(x1 - x0, 1), clipped=clipped)
    out = Image.new("RGB", (width, pad + bar_h + pad // 2 + line_h + pad), WHITE_RGB)
    gradient = colour_lut(cmap)[np.linspace(0, 255, x1 - x0).round().astype(int)]
    out.paste(Image.fromarray(np.repeat(gradient[None], bar_h, axis=0), mode="RGB"), (x0, pad))
    draw = ImageDraw.Draw(out)
    y_text = pad + bar_h + pad // 2 - 2
    for value, text in labels:
        x = x0 + round(value / top * (x1 - x0 - 1)) if top > 0 else x0
        draw.line([(x, pad + bar_h), (x, pad + bar_h + pad // 2)], fill=TEXT_RGB)
        if value == top:  # the top and the unit, ending just left of the bar's last tick (not run through by it)
            text = top_text
            draw.text((x1 - 4 - text_size(draw, text, font)[0], y_text), text, fill=TEXT_RGB, font=font)
        elif value == 0:
            draw.text((x0, y_text), text, fill=TEXT_RGB, font=font)
        else:
            draw.text((x - text_size(draw, text, font)[0] // 2, y_text), text, fill=TEXT_RGB, font=font)
    return out


def plotly_colorscale(cmap: str, n: int = 11) -> list[list]:
    """A Plotly colour scale sampled from a matplotlib colour map, as rgb() strings.

    Same colours as the PNG pictures; rgb() rather than hex because Streamlit's chart frontend
    rewrites some hex colours (inferno's #000004 turned lavender).
    """
    import matplotlib

    cm = matplotlib.colormaps[cmap]
    stops = np.linspace(0.0, 1.0, n)
    return [[float(t), "rgb({},{},{})".format(*(int(round(255 * c)) for c in cm(t)[:3]))] for t in stops]
