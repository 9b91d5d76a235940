"""Compare page, driven through Streamlit's AppTest."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from page_helpers import assert_clean, timed_run

from iba_core.app.choices import DEFAULT_COMPARE_METHODS, READOUT_METHOD
from iba_core.app.maps import cell_pictures
from iba_core.app.state import CompareRun
from iba_core.render.comparison import limits_text, map_limits

CHEAP = ["saliency", "grad_cam"]


def test_grid_fills_and_one_more_method_reuses_the_cached_maps(open_page, calls, lock_waits) -> None:
    at = open_page("compare")
    assert set(at.multiselect(key="cmp_methods").value) == set(DEFAULT_COMPARE_METHODS)
    at.multiselect(key="cmp_methods").set_value(CHEAP)
    at, seconds = timed_run(at.button(key="cmp_run_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    # The shipped offline readout fills the last cell, through the registered method with its checkpoint.
    assert [k for k, _ in calls] == [*CHEAP, READOUT_METHOD]
    assert calls[-1][1]["checkpoint"].endswith("readout_efficientnet_lite0.pt")

    cache = at.session_state["map_cache"]
    last = at.session_state["cmp_last"]
    assert isinstance(last, CompareRun)  # results are kept as dataclasses, not dicts
    assert lock_waits and all(lock_waits)  # the network taken through the waiting helper
    assert [k[4] for k in last.keys] == [*CHEAP, READOUT_METHOD]
    assert len(cache.entries) == 3 and cache.computed == 3
    assert last.readout
    # Input plus one image per map.
    assert len(at.image) >= 1 + len(CHEAP) + 1
    captions = " ".join(c.value for c in at.caption)
    assert "Saliency" in captions and "Grad-CAM" in captions
    assert "signed" in captions
    assert "**Readout (shipped, rough)** ·" in captions  # the cell is named by its checkpoint, briefly
    assert [b.label for b in at.get("download_button")] == ["Download grid (PNG)"]
    assert seconds < 60, f"two cheap maps took {seconds:.0f} s"

    # One more method: only that one is computed, the others (the readout too) come from the session's cache.
    at.multiselect(key="cmp_methods").set_value([*CHEAP, "gradient"])
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert [k for k, _ in calls] == [*CHEAP, READOUT_METHOD, "gradient"]
    assert at.session_state["map_cache"].computed == 4
    assert [k[4] for k in at.session_state["cmp_last"].keys] == [*CHEAP, "gradient", READOUT_METHOD]


def test_without_a_readout_its_cell_explains_why(open_page, calls) -> None:
    at = open_page("compare")
    at.multiselect(key="cmp_methods").set_value(["saliency"])
    at.selectbox(key="cmp_readout_efficientnet_lite0").set_value("—")
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert [k for k, _ in calls] == ["saliency"]
    assert not at.session_state["cmp_last"].readout
    assert any("needs a trained checkpoint" in i.value for i in at.info)


def test_select_all_picks_every_method_the_network_can_run(open_page, offline_model) -> None:
    from iba_core.app.choices import compare_choices

    at = open_page("compare")
    at.button(key="cmp_all").click().run()
    assert_clean(at)
    offered = compare_choices(offline_model).keys
    assert at.multiselect(key="cmp_methods").value == offered
    assert READOUT_METHOD not in offered  # it has its own checkpoint choice


def scales(at) -> dict[str, str]:
    """Cell caption → the colour range it states, for the map cells of the page."""
    return {c.value.split(" · ")[0].strip("*"): c.value.rsplit("scale ", 1)[1]
            for c in at.caption if "· scale " in c.value}


def test_each_bits_map_has_its_own_scale_unless_one_is_asked_for(open_page) -> None:
    """Each bottleneck readable by default: the Per-Sample map on its own 0 … max scale, not the readout's
    (which tops several times higher and left it dark); the toggle puts both on one scale in bits/pixel."""
    at = open_page("compare")
    # The readout's short label in the list; what it was trained on goes into the tooltip.
    readout = at.selectbox(key="cmp_readout_efficientnet_lite0")
    assert readout.format_func(readout.value) == "Readout (shipped, rough)"
    assert "Trained on" in readout.help and "Shipped with the app" in readout.help
    at.multiselect(key="cmp_methods").set_value(["saliency", "iba_10"])
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert at.toggle(key="cmp_shared_scale").value is False
    last = at.session_state["cmp_last"]
    entries = [at.session_state["map_cache"].get(k) for k in last.keys]
    by_key = {e.amap.key: e.amap for e in entries}
    iba_top = float(np.nanmax(by_key["iba_10"].values))
    readout_top = float(np.nanmax(by_key[READOUT_METHOD].values))
    ranges = scales(at)
    iba, out = ranges["Per-Sample IBA β=10/k"], ranges["Readout (shipped, rough)"]
    # Each states its own top, in bits/pixel.
    assert iba == f"0 … {iba_top:.3g} bits/pixel (its own)" and out == f"0 … {readout_top:.3g} bits/pixel (its own)"
    assert iba != out
    readout_caption = next(c for c in at.caption if c.value.startswith("**Readout (shipped, rough)**"))
    assert "Trained on" in readout_caption.proto.help  # the details in a tooltip

    # The cells the page shows (the input too) are PNGs of one size, drawn with the stated ranges.
    pictures = cell_pictures(entries)
    sizes = {Image.open(io.BytesIO(png)).size for png in [last.input_png, *(png for png, _ in pictures)]}
    assert len(sizes) == 1
    assert [f"{limits_text(e.amap, lim)}" for e, (_, lim) in zip(entries, pictures)] == [
        r.removesuffix(" (its own)") for r in ranges.values()]

    # One scale on request: both bottlenecks from 0 to the larger top, stated on each.
    at.toggle(key="cmp_shared_scale").set_value(True).run()
    assert_clean(at)
    one = scales(at)
    top = max(iba_top, readout_top)
    assert one["Per-Sample IBA β=10/k"] == one["Readout (shipped, rough)"] == f"0 … {top:.3g} bits/pixel (shared)"
    assert one["Saliency"] == ranges["Saliency"]  # a map without a unit keeps its own
    assert [r.removesuffix(" (shared)") for r in one.values()] == [
        limits_text(e.amap, lim) for e, lim in zip(entries, map_limits([e.amap for e in entries], True))]


def test_a_class_the_network_hardly_predicts_gets_a_note(open_page) -> None:
    """chelsea's Egyptian cat: no note. The astronaut photo (top-1 a few %): a note above the maps, and with the
    bottleneck the rise of p(target) is explained."""
    at = open_page("compare")
    at.multiselect(key="cmp_methods").set_value(["saliency"])
    at.selectbox(key="cmp_readout_efficientnet_lite0").set_value("—")
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert not [w for w in at.warning if "Hardly predicted" in w.value]

    at.selectbox(key="sample_name").set_value("astronaut").run()
    assert_clean(at)
    at.multiselect(key="cmp_methods").set_value(["saliency", "iba_10"])
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    notes = [w.value for w in at.warning if "Hardly predicted" in w.value]
    assert len(notes) == 1 and "below 10 %" in notes[0]
    iba = next(e.amap for e in (at.session_state["map_cache"].get(k) for k in at.session_state["cmp_last"].keys)
               if e.amap.key == "iba_10")
    if iba.extra["p_with"] > iba.extra["p_without"]:
        assert "rises to" in notes[0]
