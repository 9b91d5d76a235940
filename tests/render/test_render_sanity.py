"""iba_core.render.sanity: the sanity check's strip as a PNG."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.app.evaluation import SanityStrip
from iba_core.metrics.sanity import normalise_heatmap
from iba_core.render.figures import PRESENTATION_ZOOM
from iba_core.render.sanity import sanity_strip_figure, sanity_strip_png, sanity_strip_width


def test_sanity_strip_png_has_one_panel_per_map() -> None:
    rng = np.random.default_rng(0)
    maps = [rng.random((32, 32)) for _ in range(4)]
    strip = SanityStrip("Saliency", maps[0], ["logits", "block7", "block6"], maps[1:], [0.9, 0.5, 0.1])
    png = Image.open(io.BytesIO(sanity_strip_png(strip, normalise_heatmap)))
    short = SanityStrip("Saliency", maps[0], ["logits"], maps[1:2], [0.9])
    short_png = Image.open(io.BytesIO(sanity_strip_png(short, normalise_heatmap)))
    assert png.format == "PNG" and png.size[0] > short_png.size[0] * 1.5 and png.size[1] == short_png.size[1]


def test_sanity_strip_png_draws_every_map_through_the_callers_normalisation() -> None:
    rng = np.random.default_rng(1)
    maps = [rng.random((16, 16)) for _ in range(3)]
    seen: list[np.ndarray] = []

    def normalise(h: np.ndarray) -> np.ndarray:
        seen.append(h)
        return normalise_heatmap(h)

    sanity_strip_png(SanityStrip("Saliency", maps[0], ["logits", "block7"], maps[1:], [0.9, 0.5]), normalise)
    assert len(seen) == 3 and all(a is b for a, b in zip(seen, maps))


MIN_TITLE_PX = 13  # the least that reads comfortably on screen
#: The page's column at 1280 × 800 with the sidebar open: a strip wider than this would be shrunk to fit.
NARROW_COLUMN_PX = 820


@pytest.mark.parametrize("levels", [1, 4, 9])
@pytest.mark.parametrize("zoom", [1.0, PRESENTATION_ZOOM])
def test_sanity_strip_titles_are_readable_at_their_display_size(levels: int, zoom: float) -> None:
    """Shown at `sanity_strip_width` CSS px, every title's font measures ≥ 13 px; titles of a row stand apart
    and inside the picture, and the strip fits a 1280 × 800 window's column (more levels wrap onto rows)."""
    rng = np.random.default_rng(2)
    maps = [rng.random((24, 24)) for _ in range(levels + 1)]
    names = ["logits", "features.denseblock4.denselayer16.conv2", *(f"block{i}" for i in range(levels, 0, -1))]
    strip = SanityStrip("Saliency", maps[0], names[:levels], maps[1:], list(np.linspace(0.9, 0.1, levels)))
    png = Image.open(io.BytesIO(sanity_strip_png(strip, normalise_heatmap, zoom=zoom)))
    shown = sanity_strip_width(strip, zoom)
    assert zoom > 1 or shown <= NARROW_COLUMN_PX
    scale = shown / png.size[0]  # CSS px per PNG px
    fig = sanity_strip_figure(strip, normalise_heatmap, zoom=zoom)
    assert fig.get_size_inches()[0] * fig.dpi == pytest.approx(png.size[0], abs=1)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    titles = [ax.title for ax in fig.axes]
    assert len(titles) == levels + 1
    boxes = []
    for title in titles:
        px = title.get_fontsize() * fig.dpi / 72 * scale  # points → PNG px → CSS px
        assert px >= MIN_TITLE_PX, (title.get_text(), px)
        box = title.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= png.size[0] and box.y1 <= png.size[1], (title.get_text(), box)
        boxes.append(box)
    for a, b in zip(boxes, boxes[1:]):
        if abs(a.y0 - b.y0) < 1:  # same row
            assert a.x1 <= b.x0, "titles overlap"


def test_the_ssim_curve_reads_at_13_px_or_more() -> None:
    from types import SimpleNamespace

    from iba_core.render.figures import ssim_figure

    fig = ssim_figure(SimpleNamespace(method="Saliency", levels=["logits", "block7"], ssim=[0.8, 0.3]))
    assert fig.layout.font.size >= MIN_TITLE_PX  # ticks and axis titles inherit it (Plotly draws in CSS px)
