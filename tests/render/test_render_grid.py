"""iba_core.render.grid: the comparison grid PNG and the colour range of a map."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.render.grid import cell_png, colour_limits, grid_png, limits_text
from render_helpers import amap


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
