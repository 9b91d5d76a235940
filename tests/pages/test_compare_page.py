"""Compare page, driven through Streamlit's AppTest."""
from __future__ import annotations

from page_helpers import assert_clean, timed_run

import iba_core.page_support as ps

CHEAP = ["saliency", "grad_cam"]


def test_grid_fills_and_one_more_method_reuses_the_cached_maps(open_page, monkeypatch) -> None:
    calls: list[str] = []
    real = ps.run_method

    def counting(method, loaded, x, target):
        calls.append(method.key)
        return real(method, loaded, x, target)

    monkeypatch.setattr(ps, "run_method", counting)

    at = open_page("compare")
    assert set(at.multiselect(key="cmp_methods").value) == set(ps.DEFAULT_COMPARE_METHODS)
    at.multiselect(key="cmp_methods").set_value(CHEAP)
    at, seconds = timed_run(at.button(key="cmp_run_button").click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert [c for c in calls if c != "readout"] == CHEAP
    assert calls.count("readout") == 1  # the shipped offline readout fills its column

    cache = at.session_state["map_cache"]
    last = at.session_state["cmp_last"]
    assert [k[4] for k in last["keys"]] == CHEAP
    assert len(cache.entries) == 2 and cache.computed == 2
    # Input plus one image per map, and the Readout cell (a map or the placeholder that explains it).
    assert len(at.image) >= 1 + 1 + len(CHEAP)
    captions = " ".join(c.value for c in at.caption)
    assert "Saliency" in captions and "Grad-CAM" in captions
    assert "signed" in captions
    assert last["readout"] is not None  # assets/readout_efficientnet_lite0.pt ships with the app
    assert "Readout" in captions
    assert [b.label for b in at.get("download_button")] == ["Download grid (PNG)"]
    assert seconds < 60, f"two cheap maps took {seconds:.0f} s"

    # One more method: only that one is computed, the others come from the session's cache.
    at.multiselect(key="cmp_methods").set_value([*CHEAP, "gradient"])
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert [c for c in calls if c != "readout"] == [*CHEAP, "gradient"]
    assert at.session_state["map_cache"].computed == 3
    assert [k[4] for k in at.session_state["cmp_last"]["keys"]] == [*CHEAP, "gradient"]


def test_select_all_picks_every_method(open_page) -> None:
    at = open_page("compare")
    at.button(key="cmp_all").click().run()
    assert_clean(at)
    from iba_core.baselines import method_keys

    assert at.multiselect(key="cmp_methods").value == method_keys()
