"""β × layer page, driven through Streamlit's AppTest."""
from __future__ import annotations

import json

import numpy as np

from page_helpers import assert_clean, timed_run


def test_grid_fills_with_ten_cells(open_page) -> None:
    at = open_page("beta_layer")
    assert at.selectbox(key="bl_layer_efficientnet_lite0").value == "block3_2"
    # Fewer, smaller steps keep the ten runs quick; the page logic is the same.
    at.number_input(key="bl_steps").set_value(3)
    at.number_input(key="bl_batch").set_value(4)
    at, seconds = timed_run(at.button(key="bl_run_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    entry = at.session_state["bl_grids"][at.session_state["bl_last"]]
    cells = entry["cells"]
    assert len(cells) == 10
    assert [c.row for c in cells] == ["beta"] * 5 + ["layer"] * 5
    assert [c.beta_k for c in cells[:5]] == [0.1, 1.0, 10.0, 100.0, 1000.0]
    assert "block3_2" in [c.layer for c in cells[5:]]
    for c in cells:
        assert c.heatmap.shape == (224, 224) and np.isfinite(c.heatmap).all()
        assert 0.0 <= c.p_with <= 1.0
    # More penalty, fewer bits: the β row's totals fall from β·k = 0.1 to 1000.
    assert cells[0].total_bits > cells[4].total_bits

    charts = {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key}
    grid = charts["bl_grid"]
    assert sum(trace["type"] == "heatmap" for trace in grid["data"]) == 10
    titles = " ".join(a["text"] for a in grid["layout"]["annotations"])
    assert "p = " in titles and "bits" in titles
    assert seconds < 120, f"the grid took {seconds:.0f} s"


def test_same_grid_again_is_served_from_the_session(open_page) -> None:
    at = open_page("beta_layer")
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    first = at.session_state["bl_grids"][at.session_state["bl_last"]]["cells"]

    at, seconds = timed_run(at.button(key="bl_run_button").click())
    assert_clean(at)
    again = at.session_state["bl_grids"][at.session_state["bl_last"]]["cells"]
    assert again is first
    assert len(at.session_state["bl_grids"]) == 1


def test_image_choice_carries_over_from_the_per_sample_page(open_page) -> None:
    at = open_page("per_sample")
    at.selectbox(key="sample_name").set_value("coffee").run()
    assert_clean(at)
    at = open_page("beta_layer")
    assert at.selectbox(key="sample_name").value == "coffee"
    assert any("espresso" in c for im in at.image for c in im.captions)
