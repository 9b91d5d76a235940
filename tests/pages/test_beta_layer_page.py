"""β × layer page, driven through Streamlit's AppTest."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from page_helpers import assert_clean, timed_run

from iba_core.app.state import GridRun
from iba_core.beta_layer import GRID_LOST_MESSAGE
ROOM_KEY = "bl_room"  # pages/beta_layer.py ROOM_KEY (a page is a script: not imported here)
from iba_core.per_sample import bottleneck_lost_class
from iba_core.render.figures import LOST_CLASS_MARK

APP = Path(__file__).resolve().parents[2] / "app.py"


def z(trace: dict) -> np.ndarray:
    """A heatmap trace's values from Plotly's JSON (a typed array {dtype, bdata, shape}, or plain lists)."""
    value = trace["z"]
    if isinstance(value, dict):
        shape = [int(n) for n in str(value["shape"]).split(",")]
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).reshape(shape)
    return np.asarray(value, dtype=float)


def luminance(colour: str) -> float:
    """0 (black) … 1 (white) of a "#rrggbb" or "rgb(r, g, b)" colour."""
    if colour.startswith("#"):
        rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    else:
        rgb = [float(v) for v in colour[colour.index("(") + 1:-1].split(",")[:3]]
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255


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
    annotations = grid["layout"]["annotations"]
    titles = [a["text"] for a in annotations[:10]]
    assert "p = " in titles[0] and "bits" in titles[0]
    lost = [c.lost_class for c in cells]
    # β·k = 1000 discards the class (paper §4.1), and here β·k = 100 too.
    assert lost[4] and not lost[0]
    # The β row: bits are absolute, one colour scale 0 … the largest bits per pixel of its maps, with a colour bar.
    # A cell that lost the class shows no map: it is off the scales.
    assert [t.get("coloraxis") for t in traces] == ["coloraxis" if not x else None for x in lost[:5]] + [None] * 5
    scale = grid["layout"]["coloraxis"]
    shown_beta = [t for t, x in zip(traces[:5], lost) if not x]
    # (Maxima of the full-resolution maps, as Per-Sample and Compare print them; the picture sent is pooled.)
    assert scale["cmin"] == 0 and scale["cmax"] == max(float(c.heatmap.max()) for c in cells[:5] if not c.lost_class)
    assert scale["colorbar"]["title"]["text"] == "bits / pixel"
    assert "zmax" not in traces[0]
    # The layer row: each map on its own scale, 0 … its maximum, printed in its title; none stays dark.
    for t, title, x, c in zip(traces[5:], titles[5:], lost[5:], cells[5:]):
        if not x:
            assert t["zmin"] == 0 and t["zmax"] == pytest.approx(max(float(c.heatmap.max()), 1e-6), rel=1e-6)
            assert float(z(t).max()) <= t["zmax"]
            assert title.endswith(f"<br>max {t['zmax']:.3g}")
    assert "coloraxis2" not in grid["layout"]
    # Text for a lecture hall: titles, row titles and colour-bar labels at 16 px or more.
    assert all(a["font"]["size"] >= 16 for a in annotations)
    assert grid["layout"]["yaxis"]["title"]["font"]["size"] >= 16 and scale["colorbar"]["tickfont"]["size"] >= 16
    mean = [float(z(t).mean()) for t in shown_beta]
    assert mean[-1] < max(mean)  # the β row's last map is no longer the brightest of its row

    # A class-lost cell is a grey hatched square that says "class lost", never a black map: none of its colours
    # is dark, and the words sit on it; no other cell says it, and the titles leave it to the square.
    marks = [a for a in annotations[10:] if a["text"] == LOST_CLASS_MARK]
    assert len(marks) == sum(lost)
    for k, (t, x) in enumerate(zip(traces, lost), start=1):
        if x:
            assert "coloraxis" not in t and t["showscale"] is False
            assert min(luminance(colour) for _, colour in t["colorscale"]) > 0.7, t["colorscale"]
            assert any(a["xref"] == f"x{k if k > 1 else ''} domain" for a in marks)
    assert not any(LOST_CLASS_MARK in title for title in titles)
    warnings = " ".join(w.value for w in at.warning)
    assert GRID_LOST_MESSAGE in warnings and "β·k = 1000 at block3_2" in warnings
    assert seconds < 120, f"the grid took {seconds:.0f} s"
    # The caption names the scales: the top row's shared, the bottom row's each its own.
    captions = " ".join(c.value for c in at.caption)
    assert "Top row: one linear colour scale" in captions and "Bottom row: each map on its own linear" in captions

    # Per-map scales on request, without recomputing the grid.
    assert at.checkbox(key="bl_per_map").value is False
    at.checkbox(key="bl_per_map").check().run()
    assert_clean(at)
    assert at.session_state["bl_grids"][at.session_state["bl_last"]].cells is cells
    traces = grid_spec(at)["data"]
    assert all("coloraxis" not in t for t in traces)
    assert [t["zmax"] for t, c in zip(traces, cells) if not c.lost_class] == pytest.approx(
        [max(float(c.heatmap.max()), 1e-6) for c in cells if not c.lost_class], rel=1e-6)  # full-resolution maxima
    assert "Each map has its own linear colour scale" in " ".join(c.value for c in at.caption)


def test_presentation_mode_enlarges_the_grid(open_page) -> None:
    at = open_page("beta_layer")
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    normal = grid_spec(at)["layout"]
    assert not any("font-size" in h.proto.body for h in at.get("html"))

    at.sidebar.toggle(key="presentation").set_value(True).run()  # the toggle sits in app.py's sidebar
    assert_clean(at)
    large = grid_spec(at)["layout"]
    assert large["height"] > normal["height"]
    assert large["annotations"][0]["font"]["size"] > normal["annotations"][0]["font"]["size"] >= 16
    assert any("html { font-size:" in h.proto.body for h in at.get("html"))  # the page's text, in rem, grows
    at = open_page("per_sample")  # on every page, once set
    assert at.sidebar.toggle(key="presentation").value is True
    assert any("html { font-size:" in h.proto.body for h in at.get("html"))


def test_a_second_session_gets_the_grid_from_the_disk_cache(monkeypatch) -> None:
    """Two AppTests are two browser sessions of one server process: the second finds the first's grid on disk."""
    from streamlit.testing.v1 import AppTest

    from iba_core.per_sample import PerSampleBottleneck

    runs: list[float] = []
    original = PerSampleBottleneck.attribute

    def counting(self, x, target=None, callback=None):
        runs.append(self.settings.beta_k)
        return original(self, x, target, callback)

    monkeypatch.setattr(PerSampleBottleneck, "attribute", counting)

    def grid_in_a_new_session(steps: int) -> AppTest:
        at = AppTest.from_file(str(APP), default_timeout=180).run()
        at.switch_page("pages/beta_layer.py").run()
        at.number_input(key="bl_steps").set_value(steps)
        at.number_input(key="bl_batch").set_value(3)  # settings no other test uses: the first session computes
        at.button(key="bl_run_button").click().run()
        assert_clean(at)
        return at

    first = grid_in_a_new_session(2)
    assert len(runs) == 9  # ten cells, (β·k = 10, block3_2) in both rows
    second = grid_in_a_new_session(2)
    assert len(runs) == 9, "the second session recomputed the grid"
    assert "computed before" in " ".join(s.value for s in second.success)
    a, b = (at.session_state["bl_grids"][at.session_state["bl_last"]].cells for at in (first, second))
    assert all(np.array_equal(x.heatmap, y.heatmap) and x.total_bits == y.total_bits for x, y in zip(a, b))
    grid_in_a_new_session(3)  # another setting: computed
    assert len(runs) == 18


def test_a_class_the_network_hardly_predicts_gets_one_note(open_page) -> None:
    at = open_page("beta_layer")
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.text_input(key="bl_other").input("ping-pong ball")  # chelsea: far from the network's top-1
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    notes = [w.value for w in at.warning if "does not recognise this image" in w.value]
    assert len(notes) == 1 and "not the network's top prediction" in notes[0]
    cells = at.session_state["bl_grids"][at.session_state["bl_last"]].cells
    assert cells[0].predicted == 285 and cells[0].target != 285


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


def in_order(at) -> list[tuple[str, str]]:
    """(type, key or label) of the main area's elements, top to bottom, expanders' contents included."""
    out: list[tuple[str, str]] = []

    def walk(node) -> None:
        kind = getattr(node, "type", None)
        if kind == "plotly_chart":
            out.append((kind, node.key or ""))
        elif kind == "expander":
            out.append((kind, node.label))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return out


def test_presentation_mode_shows_the_grid_first_and_folds_the_controls(open_page) -> None:
    """For a room: once a grid exists, it is the first thing under the title, larger than in normal mode, and
    the image, network and settings fold into an expander under it (open again on request, and kept open)."""
    at = open_page("beta_layer")
    at.sidebar.toggle(key="presentation").set_value(True).run()
    assert_clean(at)
    assert not at.get("plotly_chart")
    assert at.session_state["bl_controls"] is True  # no grid yet: the controls are open
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    order = in_order(at)
    assert order[0] == ("plotly_chart", "bl_grid")
    assert order.index(("plotly_chart", "bl_grid")) < order.index(("expander", "Image, network and settings"))
    assert at.session_state["bl_controls"] is False  # folded once the grid exists
    assert any(s.value.startswith("The grid is ready") for s in at.success)
    layout = grid_spec(at)["layout"]
    assert layout["height"] >= 2 * 300  # two rows of 300 px maps (where the page is wide enough)
    # The browser reports the grid's room: on a 1280 × 800 screen (sidebar folded, a 1216 px column) the maps
    # shrink until five fit the width and both rows the window; on a 1920 × 1080 one they stay 300 px.
    for (width, height), side in (((1216, 800), None), ((1856, 1080), 300)):
        at.session_state[ROOM_KEY] = {"room": {"width": width, "height": height}}
        at.run()
        assert_clean(at)
        layout = grid_spec(at)["layout"]
        y0, y1 = layout["yaxis"]["domain"]
        row_px = (y1 - y0) * (layout["height"] - layout["margin"]["t"] - layout["margin"]["b"])
        col_px = (width - layout["margin"]["l"] - layout["margin"]["r"]) * (
            layout["xaxis"]["domain"][1] - layout["xaxis"]["domain"][0])
        assert row_px <= col_px + 0.5  # a map as wide as its row is tall: no gaps between the rows
        assert layout["height"] <= height - 80 if side is None else row_px == pytest.approx(side, abs=0.5)
        assert row_px > 180
    at.session_state[ROOM_KEY] = {}
    # Opened again, the controls stay open across reruns (e.g. the scale's checkbox).
    at.session_state["bl_controls"] = True
    at.checkbox(key="bl_per_map").check().run()
    assert_clean(at)
    assert at.session_state["bl_controls"] is True
    # Normal mode: the controls first, the grid below them, as before.
    at.sidebar.toggle(key="presentation").set_value(False).run()
    assert_clean(at)
    assert "bl_grid" in [key for kind, key in in_order(at) if kind == "plotly_chart"]
    assert not any(kind == "expander" and label == "Image, network and settings" for kind, label in in_order(at))


def test_progress_names_each_cell_and_the_time_left(open_page, monkeypatch) -> None:
    """While the grid fills: "Cell i of 10: β·k = … at …", the time left once a cell is timed, and the cells
    drawn as they come (each time one more)."""
    from streamlit.delta_generator import DeltaGenerator

    texts: list[str] = []
    original = DeltaGenerator.progress

    def spy(self, value, text=None):
        texts.append(str(text))
        return original(self, value, text)

    monkeypatch.setattr(DeltaGenerator, "progress", spy)
    charts: list[int] = []
    import iba_core.render.figures as figures

    grid_figure = figures.grid_figure

    def counting(cells, *args, **kwargs):
        charts.append(len(cells))
        return grid_figure(cells, *args, **kwargs)

    at = open_page("beta_layer")
    monkeypatch.setattr(figures, "grid_figure", counting)  # the page imports it by name on each run
    at.number_input(key="bl_steps").set_value(2)
    at.number_input(key="bl_batch").set_value(3)
    at.text_input(key="bl_other").input("tabby")  # a grid no other test computes (cached grids fill at once)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    cells = [t for t in texts if t.startswith("Cell ")]
    assert [t.split(":")[0] for t in cells] == [f"Cell {i} of 10" for i in range(1, 11)]
    assert cells[0] == "Cell 1 of 10: β·k = 0.1 at block3_2 · the time left is estimated after the first cell"
    assert all(" left" in t and "about" in t for t in cells[1:])
    assert "β·k = 10 at stem" in cells[5]
    assert texts[-1] == "10 of 10 cells done"
    # The grid drawn after each cell (1, 2, … 10 cells), then once finished.
    assert charts[:10] == list(range(1, 11)) and charts[10:] == [10]


def test_the_ready_line_stays_while_its_grid_is_shown(open_page) -> None:
    """The browser reports the grid's room as soon as it is drawn, which reruns the page: "The grid is ready" stays
    through that rerun (it used to flash and go) and through the scale's checkbox, in both modes, and goes when the
    form holds another image (the grid below is then not the form's)."""
    at = open_page("beta_layer")
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    ready = [s.value for s in at.success if s.value.startswith("The grid is ready below")]
    assert len(ready) == 1
    at.session_state[ROOM_KEY] = {"room": {"width": 1216, "height": 800}}  # what the browser sends
    at.run()
    assert [s.value for s in at.success if s.value.startswith("The grid is ready")] == ready
    at.checkbox(key="bl_per_map").check().run()
    assert [s.value for s in at.success if s.value.startswith("The grid is ready")] == ready
    at.sidebar.toggle(key="presentation").set_value(True).run()
    assert_clean(at)
    # (the same note: the grid may come from the disk cache of an earlier test)
    assert [s.value for s in at.success if s.value.startswith("The grid is ready")] == [
        ready[0].replace("ready below", "ready")]
    at.sidebar.toggle(key="presentation").set_value(False).run()
    at.selectbox(key="sample_name").set_value("coffee").run()
    assert_clean(at)
    assert at.get("plotly_chart")  # the last grid is still shown …
    assert not [s.value for s in at.success if s.value.startswith("The grid is ready")]  # … but not as ready
