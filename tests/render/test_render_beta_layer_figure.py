"""iba_core.render.figures.grid_figure: bits are absolute (one colour scale per row), lost classes marked."""
from __future__ import annotations

import numpy as np

from iba_core.beta_layer import GridCell
from iba_core.render import figures
from render_helpers import blob


def cells() -> list[GridCell]:
    """A β row whose bits fall with β (β·k = 1000 lost the class), and a layer row of two cells."""
    row = [GridCell("beta", f"β·k = {b:g}", b, "block3_2", blob() / b, 0.9 if b < 1000 else 0.001, 1000.0 / b,
                    0.6, b >= 1000) for b in (0.1, 1, 10, 100, 1000)]
    return row + [GridCell("layer", name, 10.0, name, blob() * f, 0.5, 50.0 * f, 0.6)
                  for name, f in (("stem", 3.0), ("head", 0.5))]


def test_each_row_shares_one_colour_scale_in_bits_per_pixel() -> None:
    fig = figures.grid_figure(cells())
    beta, layer = fig.data[:5], fig.data[5:]
    assert {t.coloraxis for t in beta} == {"coloraxis"} and {t.coloraxis for t in layer} == {"coloraxis2"}
    for axis, traces in ((fig.layout.coloraxis, beta), (fig.layout.coloraxis2, layer)):
        assert axis.cmin == 0.0
        assert axis.cmax == max(float(np.max(t.z)) for t in traces)  # the row's brightest pixel tops the scale
        assert axis.colorbar.title.text == figures.BITS_UNIT == "bits / pixel"
    # Colour bars sit beside their rows, the β row's above the layer row's.
    assert fig.layout.coloraxis.colorbar.y > fig.layout.coloraxis2.colorbar.y
    # Bits are absolute: the β·k = 1000 map lets the fewest bits through, so it is the darkest, not the brightest.
    brightness = [float(np.mean(t.z)) / fig.layout.coloraxis.cmax for t in beta]
    assert int(np.argmin(brightness)) == 4 and int(np.argmax(brightness)) == 0
    titles = [a.text for a in fig.layout.annotations]
    assert "scale 0" not in " ".join(titles)


def test_per_map_scales_on_request() -> None:
    fig = figures.grid_figure(cells(), shared_scale=False)
    assert all(t.coloraxis is None and t.zmin == 0.0 for t in fig.data)
    assert [t.zmax for t in fig.data] == [float(np.max(t.z)) for t in fig.data]  # each its own maximum
    assert fig.layout.coloraxis.cmax is None
    titles = [a.text for a in fig.layout.annotations]
    assert all(f"scale 0 … {t.zmax:.3g} bits/px" in title for t, title in zip(fig.data, titles))


def test_lost_class_is_marked_in_its_cell_title_only() -> None:
    titles = [a.text for a in figures.grid_figure(cells()).layout.annotations]
    marked = [i for i, t in enumerate(titles) if figures.LOST_CLASS_MARK in t]
    assert marked == [4] and titles[4].startswith("β·k = 1000")


def test_a_partly_filled_grid_scales_what_is_there() -> None:
    first = cells()[:2]
    fig = figures.grid_figure(first)
    assert fig.layout.coloraxis.cmax == max(float(np.max(t.z)) for t in fig.data)
    assert "coloraxis2" not in fig.to_plotly_json()["layout"]  # no layer cell yet: no scale for that row
    assert figures.grid_figure([]).data == ()
