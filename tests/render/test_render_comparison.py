"""iba_core.render.comparison: the comparison grid PNG and the colour range of a map."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.render.comparison import (
    cell_png,
    colour_limits,
    grid_canvas,
    grid_png,
    image_cell_png,
    limits_text,
    map_limits,
    shared_limits,
    wrap_title,
)
from render_helpers import amap, photo


def test_colour_limits():
    signed = amap("gradient", [[-1.0, 0.5], [2.0, 0.0]], True)
    low, high = colour_limits(signed)
    assert low == -high and high > 0
    bits = amap("iba_10", [[0.0, 0.2], [3.0, 1.0]], False, "bits/pixel")
    assert colour_limits(bits) == (0.0, 3.0)  # true range for maps with a unit
    assert colour_limits(amap("grad_cam", np.zeros((2, 2)), False)) == (0.0, 1.0)  # flat maps still draw
    assert colour_limits(amap("x", np.full((2, 2), np.nan), True)) == (-1.0, 1.0)


def test_grid_png_is_a_valid_png():
    rng = np.random.default_rng(0)
    maps = [
        amap("gradient", rng.normal(size=(32, 32)), True),
        amap("saliency", rng.random((32, 32)), False),
        amap("iba_10", rng.random((32, 32)) * 2, False, "bits/pixel", seconds=75.0),
    ]
    image = Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8))
    data = grid_png(maps, image, title="test")
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    png = Image.open(io.BytesIO(data))
    png.load()
    assert png.format == "PNG" and png.size[0] > 300 and png.size[1] > 100
    # many maps wrap into rows; no image is fine too
    assert Image.open(io.BytesIO(grid_png(maps * 4))).size[1] > png.size[1]
    with pytest.raises(ValueError):
        grid_png([])


def test_cell_png_is_one_cell():
    one = Image.open(io.BytesIO(cell_png(amap("saliency", np.random.default_rng(1).random((32, 32)), False))))
    assert one.format == "PNG" and abs(one.size[0] - one.size[1]) < one.size[0] * 0.3  # about square


def test_limits_text():
    values = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    assert limits_text(amap("s", values, True)).startswith("-")
    assert limits_text(amap("i", values + 1, False, "bits/pixel")).endswith("bits/pixel")
    assert limits_text(amap("i", values + 1, False, "bits/pixel")) == "0 … 2 bits/pixel"
    assert "zero everywhere" in limits_text(amap("z", values * 0, False))  # a blank CAM says so, not "0 … 0"


def test_render_names_load_on_first_use():
    import subprocess
    import sys

    code = ("import sys, iba_core.render as r; r.grid_png; r.overlay_image; "
            "assert 'plotly' not in sys.modules, 'grid and overlays must not load Plotly'")
    subprocess.run([sys.executable, "-c", code], check=True)
    import iba_core.render as render

    with pytest.raises(AttributeError):
        render.no_such_name  # noqa: B018
    assert render.heatmap_figure.__module__ == "iba_core.render.figures"


# ---- one scale for bits, cells of one size, titles that fit ----------------------------------------------


def test_bits_maps_have_their_own_scale_unless_one_is_asked_for():
    many = amap("iba_1", [[0.0, 0.5], [4.0, 1.0]], False, "bits/pixel")
    few = amap("readout", [[0.0, 0.01], [0.02, 0.0]], False, "bits/pixel")
    signed = amap("gradient", [[-1.0, 0.5], [2.0, 0.0]], True)
    assert shared_limits([many, few, signed]) == {"bits/pixel": (0.0, 4.0)}
    shared = map_limits([many, few, signed], shared_scale=True)
    assert shared[0] == shared[1] == (0.0, 4.0) and shared[2] == colour_limits(signed)
    assert map_limits([many, few, signed]) == [colour_limits(m) for m in (many, few, signed)]  # the default
    assert map_limits([many, few, signed])[1] == pytest.approx((0.0, 0.02), rel=1e-6)
    assert limits_text(few, shared[1]) == "0 … 4 bits/pixel"


def _canvas_maps():
    rng = np.random.default_rng(2)
    readout = amap("readout", rng.random((32, 32)) * 0.01, False, "bits/pixel", seconds=0.3)
    readout.name = "Readout (trained_on_a_very_long_folder_name_without_spaces_and_more_epochs_than_you_think)"
    lrp = amap("lrp", rng.normal(size=(32, 32)), True)
    lrp.name = "LRP α=0, β=1, ε=5 with a name much longer than a cell can hold on one line, or on two"
    return [amap("iba_10", rng.random((32, 32)) * 2, False, "bits/pixel", seconds=75.0), readout, lrp,
            amap("saliency", rng.random((32, 32)), False)]


def _map_axes(fig):
    """The axes that hold a map or the input (colour bars excluded)."""
    return [ax for ax in fig.axes if ax.images and not hasattr(ax, "_colorbar")]


def test_grid_cells_have_one_size_and_the_bits_maps_one_range_on_request():
    maps = _canvas_maps()
    fig = grid_canvas(maps, photo(32), columns=3, title="chelsea · EfficientNet-Lite0 · Egyptian cat",
                      shared_scale=True)
    boxes = [ax.get_position() for ax in _map_axes(fig)]
    assert len(boxes) == 5
    assert len({(round(b.width, 6), round(b.height, 6)) for b in boxes}) == 1  # colour bar or not, one size
    clims = [ax.images[0].get_clim() for ax in _map_axes(fig)[1:]]
    assert clims[0] == clims[1] == (0.0, float(maps[0].values.max()))  # Per-Sample IBA and Readout: one range
    own = [ax.images[0].get_clim() for ax in _map_axes(grid_canvas(maps, None))]  # the default: each its own
    assert own[1] == colour_limits(maps[1]) != own[0]


def test_a_bits_colour_bar_states_its_top_in_its_unit():
    """Each bottleneck's colour bar ends on a label of its own top (0.0173, not the nearest round tick)."""
    maps = _canvas_maps()
    fig = grid_canvas(maps, None)
    bars = [ax for ax in fig.axes if hasattr(ax, "_colorbar")]
    assert len(bars) == 2  # Per-Sample IBA and the readout: the maps with a unit
    for bar, amap in zip(bars, maps[:2]):
        top = colour_limits(amap)[1]
        labels = [t.get_text() for t in bar.get_yticklabels()]
        assert labels[0] == "0" and labels[-1] == f"{top:.3g}", labels
        assert bar.get_ylabel() == "bits/pixel"


def test_grid_titles_fit_their_cells():
    maps = _canvas_maps()
    fig = grid_canvas(maps, photo(32), columns=3, title="a long title " * 12)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    axes = _map_axes(fig)
    pitch = axes[1].get_window_extent(renderer).x0 - axes[0].get_window_extent(renderer).x0  # one cell + gap
    for ax in axes:
        title = ax.title.get_window_extent(renderer)
        box = ax.get_window_extent(renderer)
        # Within the cell's column (the map plus its colour-bar strip) and above the map, inside the figure.
        assert box.x0 - 1 <= title.x0 and title.x1 <= box.x0 + pitch, ax.title.get_text()
        assert title.y0 >= box.y1 - 1 and title.y1 <= height
        assert ax.title.get_text().count("\n") <= 2  # name on at most two lines, then the time
    texts = [t for t in fig.texts if t.get_text()]
    assert len(texts) == 1
    heading = texts[0].get_window_extent(renderer)
    assert 0 <= heading.x0 and heading.x1 <= width and heading.y1 <= height
    assert heading.y0 >= max(ax.title.get_window_extent(renderer).y1 for ax in axes[:3])  # above the first row
    assert "…" in axes[3].title.get_text()  # the LRP name is too long for two lines: shortened


def test_wrap_title():
    assert wrap_title("Saliency", 2.4) == "Saliency"
    lines = wrap_title("Per-Sample IBA β=10/k " * 6, 2.4).split("\n")
    assert len(lines) == 2 and lines[-1].endswith("…")


def test_cell_pngs_have_one_size():
    rng = np.random.default_rng(3)
    sizes = {Image.open(io.BytesIO(data)).size for data in (
        cell_png(amap("saliency", rng.random((32, 32)), False)),
        cell_png(amap("iba_10", rng.random((32, 32)), False, "bits/pixel"), (0.0, 5.0)),
        cell_png(amap("gradient", rng.normal(size=(32, 32)), True)),
        image_cell_png(photo(224)),
    )}
    assert len(sizes) == 1
