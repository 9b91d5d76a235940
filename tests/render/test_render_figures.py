"""iba_core.render.figures: the Plotly figures."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest

from iba_core.beta_layer import GridCell
from iba_core.render import figures
from render_helpers import blob


def test_heatmap_figure_has_bits_colorbar_and_image_axes() -> None:
    fig = figures.heatmap_figure(blob(), "Bits per pixel")
    assert isinstance(fig, go.Figure)
    trace = fig.data[0]
    assert trace.type == "heatmap"
    assert "bits" in trace.colorbar.title.text
    assert trace.zmin == 0 and trace.zmax == pytest.approx(float(blob().max()))
    assert fig.layout.yaxis.autorange == "reversed"  # row 0 at the top, like the image
    assert fig.layout.yaxis.scaleanchor == "x"  # square pixels
    assert fig.layout.title.text == "Bits per pixel"
    assert np.asarray(trace.z).shape == (224, 224)


def test_heatmap_figure_fixed_scale_and_degenerate_maps() -> None:
    assert figures.heatmap_figure(blob(), "t", zmax=5.0).data[0].zmax == 5.0
    zero = figures.heatmap_figure(np.zeros((4, 4)), "all zero").data[0]
    assert zero.zmax > zero.zmin  # a flat map still gets a valid colour scale
    nan = np.full((3, 3), np.nan)
    assert np.isfinite(np.asarray(figures.heatmap_figure(nan, "nan").data[0].z)).all()
    with pytest.raises(ValueError):
        figures.heatmap_figure(np.zeros((2, 2, 2)), "3-D")


def test_heatmap_figure_colour_bar_states_its_top_without_collisions() -> None:
    """The colour bar labels the top of the scale (the run's, when given); no round tick sits on top of it."""
    bar = figures.heatmap_figure(blob() * 30, "stem", zmax=61.8).data[0].colorbar
    assert list(bar.ticktext) == ["0", "20", "40", "61.8"] and list(bar.tickvals) == [0, 20, 40, 61.8]
    clipped = figures.heatmap_figure(blob(), "set by the user", zmax=0.5).data[0].colorbar
    assert clipped.ticktext[-1] == "≥ 0.5"  # the map has values above the scale


def test_grid_figure_places_cells_in_two_rows() -> None:
    cells = [GridCell("beta", f"β·k = {b:g}", b, "block3_2", blob(), 0.9, 100.0) for b in (0.1, 1, 10, 100, 1000)]
    cells += [GridCell("layer", name, 10.0, name, blob(), 0.5, 50.0) for name in ("stem", "head")]
    fig = figures.grid_figure(cells)
    assert len(fig.data) == 7
    assert fig.data[0].xaxis == "x" and fig.data[5].xaxis == "x6"  # second row starts in column 1
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("β·k = 0.1") and "p = 0.90" in titles[0] and "100 bits" in titles[0]
    assert "stem" in titles[5]
    assert fig.layout.yaxis.title.text == "layer block3_2" and fig.layout.yaxis6.title.text == "β·k = 10"
    assert np.asarray(fig.data[0].z).shape == (112, 112)  # downsampled for the browser
    assert figures.grid_figure(cells[:1]).data[0].type == "heatmap"  # a partly filled grid draws too


def test_degradation_figure_draws_morf_and_lerf_per_method() -> None:
    curve = SimpleNamespace(fraction=np.linspace(0, 1, 5),
                            scaled=lambda: (np.linspace(1, 0, 5), np.linspace(1, 0.5, 5)))
    fig = figures.degradation_figure({"saliency": curve, "grad_cam": curve}, {"saliency": "Saliency"})
    assert [t.name for t in fig.data] == ["Saliency · MoRF", "Saliency · LeRF", "grad_cam · MoRF", "grad_cam · LeRF"]
    assert fig.data[0].line.color == fig.data[1].line.color != fig.data[2].line.color
    assert fig.data[1].line.dash == "dash"


def test_ssim_figure_starts_at_one() -> None:
    strip = SimpleNamespace(method="Saliency", levels=["logits", "block7"], ssim=[0.8, 0.3])
    trace = figures.ssim_figure(strip).data[0]
    assert list(trace.x) == ["original", "logits", "block7"] and list(trace.y) == [1.0, 0.8, 0.3]
    assert trace.name == "Saliency"
