"""β × layer page, driven through Streamlit's AppTest."""
from __future__ import annotations

import base64
import json

import numpy as np

from page_helpers import assert_clean, timed_run

from iba_core.app.state import GridRun
from iba_core.per_sample import LOST_CLASS_MESSAGE, bottleneck_lost_class
from iba_core.render.figures import LOST_CLASS_MARK


def z(trace: dict) -> np.ndarray:
    """A heatmap trace's values from Plotly's JSON (a typed array {dtype, bdata, shape}, or plain lists)."""
    value = trace["z"]
    if isinstance(value, dict):
        shape = [int(n) for n in str(value["shape"]).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).reshape(shape)
    return np.asarray(value, dtype=float)


def grid_spec(at) -> dict:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key}["bl_grid"]


def test_grid_fills_with_ten_cells(open_page, lock_waits) -> None:
    at = open_page("beta_layer")
    assert at.selectbox(key="bl_layer_efficientnet_lite0").value == "block3_2"
    # Fewer, smaller steps keep the ten runs quick (5 steps are enough for β·k = 1000 to lose the class).
    at.number_input(key="bl_steps").set_value(5)
    at.number_input(key="bl_batch").set_value(2)
    at, seconds = timed_run(at.button(key="bl_run_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    entry = at.session_state["bl_grids"][at.session_state["bl_last"]]
    assert isinstance(entry, GridRun)  # results are kept as dataclasses, not dicts
    assert lock_waits and all(lock_waits)  # the network taken through the waiting helper
    cells = entry.cells
    assert len(cells) == 10
    assert [c.row for c in cells] == ["beta"] * 5 + ["layer"] * 5
    assert [c.beta_k for c in cells[:5]] == [0.1, 1.0, 10.0, 100.0, 1000.0]
    assert "block3_2" in [c.layer for c in cells[5:]]
    for c in cells:
        assert c.heatmap.shape == (224, 224) and np.isfinite(c.heatmap).all()
        assert 0.0 <= c.p_with <= 1.0
        assert c.lost_class == bottleneck_lost_class(c.p_without, c.p_with)
    # More penalty, fewer bits: the β row's totals fall from β·k = 0.1 to 1000.
    assert cells[0].total_bits > cells[4].total_bits

    grid = grid_spec(at)
    traces = grid["data"]
    assert sum(trace["type"] == "heatmap" for trace in traces) == 10
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert "p = " in titles[0] and "bits" in titles[0]
    # Bits are absolute: one colour scale per row, 0 … the row's largest bits per pixel, with a colour bar.
    assert [t["coloraxis"] for t in traces] == ["coloraxis"] * 5 + ["coloraxis2"] * 5
    for axis, row in (("coloraxis", traces[:5]), ("coloraxis2", traces[5:])):
        scale = grid["layout"][axis]
        assert scale["cmin"] == 0 and scale["cmax"] == max(float(z(t).max()) for t in row)
        assert scale["colorbar"]["title"]["text"] == "bits / pixel"
        assert "zmax" not in row[0]
    mean = [float(z(t).mean()) for t in traces[:5]]
    assert mean[4] < max(mean)  # the β·k = 1000 map is no longer the brightest of its row

    # β·k = 1000 discards the class (paper §4.1): its title says so and a warning lists it.
    assert cells[4].lost_class
    assert LOST_CLASS_MARK in titles[4]
    assert not any(LOST_CLASS_MARK in t for t, c in zip(titles, cells) if not c.lost_class)
    warnings = " ".join(w.value for w in at.warning)
    assert LOST_CLASS_MESSAGE in warnings and "β·k = 1000 at block3_2" in warnings
    assert seconds < 120, f"the grid took {seconds:.0f} s"

    # Per-map scales on request, without recomputing the grid.
    assert at.checkbox(key="bl_per_map").value is False
    at.checkbox(key="bl_per_map").check().run()
    assert_clean(at)
    assert at.session_state["bl_grids"][at.session_state["bl_last"]].cells is cells
    traces = grid_spec(at)["data"]
    assert all("coloraxis" not in t and t["zmax"] == max(float(z(t).max()), 1e-6) for t in traces)
    assert "its own colour scale" in " ".join(c.value for c in at.caption)


def test_same_grid_again_is_served_from_the_session(open_page) -> None:
    at = open_page("beta_layer")
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    first = at.session_state["bl_grids"][at.session_state["bl_last"]].cells

    at, seconds = timed_run(at.button(key="bl_run_button").click())
    assert_clean(at)
    again = at.session_state["bl_grids"][at.session_state["bl_last"]].cells
    assert again is first
    assert len(at.session_state["bl_grids"]) == 1


def test_image_choice_carries_over_from_the_per_sample_page(open_page) -> None:
    at = open_page("per_sample")
    at.selectbox(key="sample_name").set_value("coffee").run()
    assert_clean(at)
    at = open_page("beta_layer")
    assert at.selectbox(key="sample_name").value == "coffee"
    assert any("espresso" in c for im in at.image for c in im.captions)
