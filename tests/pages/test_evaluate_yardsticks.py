"""Evaluate page: the field's yardsticks section (insertion / deletion, ROAD, pointing), driven through AppTest."""
from __future__ import annotations

import json

import pytest

from page_helpers import assert_clean, timed_run
from test_evaluate_page import assert_no_clipped_column, small_crop_card  # noqa: F401 - a fixture

from iba_core.app.evaluation import YardstickRun, chart_colours
from iba_core.metrics.insertion_deletion import PROTOCOLS, protocol_from

CHEAP = ["saliency", "grad_cam"]
#: A coarse step for a quick test: 8 steps of 6,272 pixels on the 224 crop (9 points a curve).
STEP = 224 * 28


def specs(at) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key}


def measure(at, *, step: int = STEP, removed=(30, 60, 90), protocol: str = "rise"):
    at.multiselect(key="ev_methods").set_value(CHEAP)
    at.radio(key="ev_protocol").set_value(protocol)
    at.number_input(key="ev_step").set_value(step)
    at.multiselect(key="ev_removed").set_value(list(removed))
    at, seconds = timed_run(at.button(key="ev_yard_button").click())
    assert_clean(at)
    return at, seconds


def test_one_click_gives_curves_areas_road_and_pointing(open_page, lock_waits) -> None:
    at = open_page("evaluate")
    assert at.radio(key="ev_protocol").value == "rise"  # RISE by default, CoIBA offered
    assert at.radio(key="ev_protocol").options == ["RISE", "CoIBA"]
    assert at.multiselect(key="ev_removed").value == [10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert at.multiselect(key="ev_removed").options[0] == "10 %"  # each chip says what it is
    assert at.checkbox(key="ev_pointing").value is False  # no score against an example box nobody gave
    at.text_input(key="ev_box").set_value("60, 40, 170, 200")  # the one box input, shared with the bbox ratio
    at.checkbox(key="ev_pointing").check()
    at, seconds = measure(at)
    assert not at.error, [e.value for e in at.error]

    run = at.session_state["ev_yardsticks"]
    assert isinstance(run, YardstickRun) and lock_waits and all(lock_waits)
    assert list(run.methods) == CHEAP and run.protocol.step == STEP
    assert run.protocol.name == "rise, modified"  # RISE's blur and baseline with a step of the user's: said so
    assert run.removed == [30.0, 60.0, 90.0]
    for r in run.methods.values():
        assert len(r.pixels.fraction) == 9 and len(r.road.morf) == 3 and r.pointing is not None
    captions = " ".join(c.value for c in at.caption)
    assert run.protocol.describe() in captions  # the protocol is part of the result
    assert "Scored against the box 60, 40, 170, 200" in captions  # which box the pointing game used
    (warning,) = at.warning  # a box of 110 × 160 px covers 35 % of the crop, more than the paper's limit
    assert warning.value.startswith("The box covers 35% of the crop (more than 33%)") \
        and "the pointing game says little here" in warning.value

    charts = specs(at)
    curves = charts["ev_id_chart"]["data"]
    assert len(curves) == 2 * len(CHEAP)  # insertion and deletion per method
    assert [t["name"].split(" · ")[0] for t in curves] == ["Saliency", "Saliency", "Grad-CAM", "Grad-CAM"]
    assert all("AUC" in t["name"] for t in curves) and len(curves[0]["x"]) == 9
    colours = chart_colours(["grad_cam"]) | chart_colours(["saliency"])  # each method's own, chosen alone
    assert [t["line"]["color"] for t in curves] == [colours[k] for k in CHEAP for _ in range(2)]
    assert len(charts["ev_road_chart"]["data"]) == 2 * len(CHEAP)

    (table,) = [t for t in at.dataframe if "insertion AUC" in t.value.columns]
    (points,) = [t for t in at.dataframe if "pointing hit" in t.value.columns]
    frame = table.value
    assert list(frame["Method"]) == ["Saliency", "Grad-CAM"] == list(points.value["Method"])
    for column in ("insertion AUC", "deletion AUC", "ROAD MoRF", "ROAD LeRF", "ROAD combined", "MoRF AOPC"):
        assert frame[column].notna().all() and frame[column].between(-1, 1).all(), column
    # each metric column's header shows its direction, from the metric registry (item 7 of #38)
    labels = {name: c["label"] for name, c in json.loads(table.proto.columns).items() if name in frame.columns}
    assert labels == {"Method": "Method", "insertion AUC": "insertion AUC ↑", "deletion AUC": "deletion AUC ↓",
                      "ROAD MoRF": "ROAD MoRF ↓", "ROAD LeRF": "ROAD LeRF ↑", "ROAD combined": "ROAD combined ↑",
                      "MoRF AOPC": "MoRF AOPC ↑"}
    point_labels = {c["label"] for name, c in json.loads(points.proto.columns).items() if name in points.value}
    assert point_labels == {"Method", "pointing hit ↑", "energy pointing ↑", "EHR ↑"}
    for column in ("energy pointing", "EHR"):
        assert points.value[column].between(0, 1).all(), column
    assert set(points.value["pointing hit"]) <= {"hit", "miss"}
    for t in (table, points):  # a tooltip for every column, none clipped
        assert_no_clipped_column(t)
        config = json.loads(t.proto.columns)  # floats with 4 decimals, so energy pointing 1.0 reads 1.0000
        assert all(config[name]["type_config"]["format"] == "%.4f" for name in t.value.columns
                   if name not in ("Method", "pointing hit")), config
    assert len(at.dataframe) == 2
    assert any("maximum" in c for im in at.image for c in im.captions)  # the box and each map's maximum
    assert at.get("download_button")  # the numbers as CSV
    assert "ev_degradation" not in at.session_state and "ev_bbox" not in at.session_state  # sections run apart
    assert seconds < 120, f"the yardsticks took {seconds:.0f} s"


def test_coiba_without_a_box_and_a_mistake_keeps_the_last_result(open_page) -> None:
    at = open_page("evaluate")
    at.checkbox(key="ev_pointing").uncheck()
    at, _ = measure(at, step=224 * 56, removed=(50,), protocol="coiba")
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["ev_yardsticks"]
    assert run.protocol == protocol_from("coiba", step=224 * 56)  # CoIBA's blur and baseline, a coarse step
    assert run.protocol.blur_kernel == PROTOCOLS["coiba"].blur_kernel == 51
    assert run.picture is None and all(r.pointing is None for r in run.methods.values())
    assert [list(t.value.columns) for t in at.dataframe] == [
        ["Method", "insertion AUC", "deletion AUC", "ROAD MoRF", "ROAD LeRF", "ROAD combined",
         "MoRF AOPC"]]  # no pointing

    at, _ = measure(at, removed=())  # no ROAD point: one sentence, the last result still shown
    assert len(at.error) == 1 and "at least one percentage" in at.error[0].value
    assert at.session_state["ev_yardsticks"] is run
    assert "ev_id_chart" in specs(at)


def test_a_network_with_a_crop_of_its_own(open_page, small_crop_card) -> None:  # noqa: F811 - a fixture
    """A card network with a 192 crop: the maps, curves, box and picture are all in its crop."""
    at = open_page("evaluate")
    at.selectbox(key="network").set_value(small_crop_card).run()
    assert_clean(at)
    at.text_input(key="ev_box").set_value("20, 30, 120, 190")  # in the 192 crop
    at.checkbox(key="ev_pointing").check()
    at, _ = measure(at, step=192 * 24, removed=(50,))
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["ev_yardsticks"]
    assert run.picture.size == (192, 192) and run.box_share == pytest.approx(100 * 160 / 192**2)
    assert run.boxes == [(20.0, 30.0, 120.0, 190.0)]
    for r in run.methods.values():
        assert r.pixels.fraction[-1] == 1.0 and len(r.pixels.fraction) == 9  # 8 steps of 4,608 of 192² pixels
        assert all(0 <= v < 192 for v in r.peak)


def test_the_choices_stay_after_another_page(open_page) -> None:
    """Methods, protocol, step, ROAD's points, the pointing tick and the box survive a visit to another page."""
    at = open_page("evaluate")
    at.text_input(key="ev_box").set_value("10, 20, 100, 120")
    at.checkbox(key="ev_pointing").check()
    at, _ = measure(at, step=224 * 56, removed=(40, 80), protocol="coiba")
    assert not at.error, [e.value for e in at.error]
    at = open_page("compare")
    at = open_page("evaluate")
    assert at.multiselect(key="ev_methods").value == CHEAP
    assert at.radio(key="ev_protocol").value == "coiba" and at.number_input(key="ev_step").value == 224 * 56
    assert at.multiselect(key="ev_removed").value == [40, 80] and at.checkbox(key="ev_pointing").value is True
    assert at.text_input(key="ev_box").value == "10, 20, 100, 120"
    assert not at.warning  # restored without a value given both ways (Streamlit would insert a warning)


def test_a_small_step_says_its_forward_passes_before_running(open_page) -> None:
    """⌈224² / 100⌉ + 1 = 503 points a curve: 1,006 passes per method, said under the step; the default 450 not."""
    at = open_page("evaluate")

    def passes_said() -> list[str]:
        return [c.value for c in at.caption if "forward passes" in c.value]

    intro = next(m.value for m in at.markdown if "checks of the attribution maps" in m.value)
    assert intro.startswith("Four checks") and intro.count("**") == 2 * 4  # it names the four sections below
    assert passes_said() == []  # RISE's 224 pixels a step: 2 × 225 passes
    at.number_input(key="ev_step").set_value(100).run()
    (said,) = passes_said()
    assert said.startswith("1,006 forward passes per method")
    assert "ev_yardsticks" not in at.session_state  # said before anything runs
    at.number_input(key="ev_step").set_value(None).run()
    assert passes_said() == []


def test_a_request_beyond_the_budget_is_refused_before_it_runs(open_page, lock_waits, monkeypatch) -> None:
    """The issue's 1 pixel a step: 2 × 50,177 passes per method, an hour under the network's lock. In an app served
    to others (AppTest listens on no address) it is refused in one sentence before the network is taken; the last
    result stays. The owner's own budget (IBA_MAX_REQUEST_PASSES) holds even a default request to it."""
    from iba_core.app.evaluation import yardsticks_cost

    at = open_page("evaluate")
    at.checkbox(key="ev_pointing").uncheck()
    at, _ = measure(at)
    run, turns = at.session_state["ev_yardsticks"], len(lock_waits)
    at.run()  # a rerun that asks for nothing takes the network this often (the image's prediction)
    plain, turns = len(lock_waits) - turns, len(lock_waits)
    at, _ = measure(at, step=1)
    (error,) = [e.value for e in at.error]
    cost = yardsticks_cost(len(CHEAP), 224 * 224, protocol_from("rise", step=1), (30, 60, 90))  # maps: cached
    assert error.startswith(f"These yardsticks would cost {cost.describe()}, above this shared app's limit of 10,000 "
                            "passes a request, so it did not start: choose fewer methods or a larger pixels-per-step.")
    assert at.session_state["ev_yardsticks"] is run and len(lock_waits) - turns == plain  # no turn of its own
    assert not at.get("progress")  # no bar left behind

    monkeypatch.setenv("IBA_MAX_REQUEST_PASSES", "50")
    at, _ = measure(at)  # the coarse step: 9 points a curve, yet above the owner's 50
    assert "limit of 50 passes a request" in at.error[0].value
    assert at.session_state["ev_yardsticks"] is run
