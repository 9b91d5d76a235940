"""Figures, images and downloads (iba_core.plots, iba_core.report)."""
from __future__ import annotations

import io
import json

import numpy as np
import plotly.graph_objects as go
import pytest
from PIL import Image

from iba_core import plots
from iba_core.grid import GridCell
from iba_core.per_sample import AttributionResult, BottleneckSettings, StepInfo
from iba_core.report import heatmap_npy_bytes, run_report


def blob(size: int = 224, centre: tuple[int, int] = (80, 150)) -> np.ndarray:
    """A Gaussian bump of bits: many bits at `centre` (row, col), ~0 far away."""
    yy, xx = np.mgrid[:size, :size]
    return (2.0 * np.exp(-((yy - centre[0]) ** 2 + (xx - centre[1]) ** 2) / (2 * 20.0**2))).astype(np.float32)


def photo(size: int = 224) -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8), mode="RGB")


def history(steps: int = 4) -> list[StepInfo]:
    return [
        StepInfo(step=i, steps=steps, lambda_mean=np.full((28, 28), 0.5), bits_per_pixel=blob(),
                 ce=1.0 / i, info=100.0 / i, beta_info=0.2 / i, p_target=0.5 + 0.1 * i)
        for i in range(1, steps + 1)
    ]


def result() -> AttributionResult:
    heat = blob()
    return AttributionResult(
        heatmap=heat, feature_bits=np.ones((28, 28)), lambda_mean=np.full((28, 28), 0.5),
        total_bits=float(heat.sum()), target=285, p_without=0.35, p_with=np.float32(0.6), history=history(),
        seconds=1.5, settings=BottleneckSettings(beta_k=10.0, steps=4), feature_shape=(40, 28, 28),
    )


# ---- plotly figures ---------------------------------------------------------------------------


def test_heatmap_figure_has_bits_colorbar_and_image_axes() -> None:
    fig = plots.heatmap_figure(blob(), "Bits per pixel")
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
    assert plots.heatmap_figure(blob(), "t", zmax=5.0).data[0].zmax == 5.0
    zero = plots.heatmap_figure(np.zeros((4, 4)), "all zero").data[0]
    assert zero.zmax > zero.zmin  # a flat map still gets a valid colour scale
    nan = np.full((3, 3), np.nan)
    assert np.isfinite(np.asarray(plots.heatmap_figure(nan, "nan").data[0].z)).all()
    with pytest.raises(ValueError):
        plots.heatmap_figure(np.zeros((2, 2, 2)), "3-D")


def test_lambda_figure_is_on_zero_one_scale() -> None:
    trace = plots.lambda_figure(np.full((28, 28), 0.3)).data[0]
    assert (trace.zmin, trace.zmax) == (0.0, 1.0)
    assert "λ" in trace.colorbar.title.text


def test_curves_figure_has_three_named_traces_and_probability_axis() -> None:
    fig = plots.curves_figure(history(4))
    names = [t.name for t in fig.data]
    assert names == ["L_CE", "β·L_I", "p(target)"]
    assert list(fig.data[2].y) == pytest.approx([0.6, 0.7, 0.8, 0.9])
    assert fig.data[2].yaxis == "y2" and tuple(fig.layout.yaxis2.range) == (0, 1.02)
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    assert plots.curves_figure([]).data[0].x == ()  # before the first step: an empty chart, no crash


def test_grid_figure_places_cells_in_two_rows() -> None:
    cells = [GridCell("beta", f"β·k = {b:g}", b, "block3_2", blob(), 0.9, 100.0) for b in (0.1, 1, 10, 100, 1000)]
    cells += [GridCell("layer", name, 10.0, name, blob(), 0.5, 50.0) for name in ("stem", "head")]
    fig = plots.grid_figure(cells)
    assert len(fig.data) == 7
    assert fig.data[0].xaxis == "x" and fig.data[5].xaxis == "x6"  # second row starts in column 1
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("β·k = 0.1") and "p = 0.90" in titles[0] and "100 bits" in titles[0]
    assert "stem" in titles[5]
    assert fig.layout.yaxis.title.text == "layer block3_2" and fig.layout.yaxis6.title.text == "β·k = 10"
    assert np.asarray(fig.data[0].z).shape == (112, 112)  # downsampled for the browser
    assert plots.grid_figure(cells[:1]).data[0].type == "heatmap"  # a partly filled grid draws too


# ---- images -----------------------------------------------------------------------------------


def test_overlay_image_size_and_blend() -> None:
    img = photo()
    heat = blob()
    out = plots.overlay_image(img, heat, opacity=0.6)
    assert out.size == img.size and out.mode == "RGB"
    assert np.array_equal(np.asarray(plots.overlay_image(img, heat, opacity=0.0)), np.asarray(img))
    full = np.asarray(plots.overlay_image(img, heat, opacity=1.0)).astype(int)
    # With full opacity, the hottest pixel is the colour map's top (inferno: pale yellow), a cold one near black.
    assert full[80, 150].sum() > 600 and full[0, 0].sum() < 60
    with pytest.raises(ValueError):
        plots.overlay_image(img, heat, opacity=1.5)


def test_overlay_resizes_a_smaller_heatmap_to_the_image() -> None:
    img = photo(224).resize((300, 200))
    out = plots.overlay_image(img, blob(28, (10, 18)), opacity=0.5)
    assert out.size == (300, 200)


def test_not_needed_outline_greys_and_outlines_low_bit_regions() -> None:
    img = Image.new("RGB", (224, 224), (200, 30, 30))
    heat = blob()
    out = np.asarray(plots.not_needed_outline(img, heat, threshold_bits=0.05)).astype(int)
    assert out.shape == (224, 224, 3)
    assert tuple(out[80, 150]) == (200, 30, 30)  # needed region untouched
    r, g, b = out[5, 5]
    assert abs(r - g) < 3 and abs(g - b) < 3  # not needed: grey
    assert (np.all(out == plots.OUTLINE_RGB, axis=-1)).sum() > 50  # an outline was drawn
    frac = plots.not_needed_fraction(heat, 0.05)
    assert 0.5 < frac < 1.0
    assert plots.not_needed_fraction(heat, 10.0) == 1.0 and plots.not_needed_fraction(heat, 0.0) == 0.0


def test_png_bytes_round_trip() -> None:
    img = photo(32)
    data = plots.png_bytes(img)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), np.asarray(img))


# ---- report ------------------------------------------------------------------------------------


def test_run_report_is_json_and_complete() -> None:
    res = result()
    report = run_report(res.settings, res, "efficientnet_lite0", "block3_2", "chelsea", "Egyptian cat",
                        stats_description="32 samples")
    text = json.dumps(report, allow_nan=False)  # numpy scalars and NaN would fail here
    back = json.loads(text)
    assert back["target"] == {"index": 285, "name": "Egyptian cat"}
    assert back["settings"]["beta_k"] == 10.0 and back["settings"]["steps"] == 4
    assert back["results"]["total_bits"] == pytest.approx(res.total_bits)
    assert back["results"]["p_target_with_bottleneck"] == pytest.approx(0.6)
    assert back["results"]["heatmap_shape"] == [224, 224]
    assert len(back["history"]) == 4 and back["statistics"] == "32 samples"
    assert not any(isinstance(v, list) and len(v) > 100 for v in back["results"].values())  # no arrays


def test_run_report_replaces_nan_by_null() -> None:
    res = result()
    res.p_with = float("nan")
    report = run_report(res.settings, res, "m", "l", "i", "c")
    assert report["results"]["p_target_with_bottleneck"] is None
    json.dumps(report, allow_nan=False)


def test_heatmap_npy_round_trip() -> None:
    heat = blob().astype(np.float64)
    back = np.load(io.BytesIO(heatmap_npy_bytes(heat)), allow_pickle=False)
    assert back.dtype == np.float32 and back.shape == (224, 224)
    assert np.allclose(back, heat, atol=1e-6)
