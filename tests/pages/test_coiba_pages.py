"""CoIBA on the pages (issue #30), driven through Streamlit's AppTest: the Per-Sample page's "Bottleneck" choice
with its range picker and live view, the β × layer page's range axis, CoIBA in the Compare and Evaluate method
lists, and a folder run with CoIBA opened on the Dataset page."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, opened_run

from iba_core.app.state import COIBA_METHOD, GridRun, RunRecord
from iba_core.coiba import default_range, layer_range

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180
NETWORK = "efficientnet_lite0"
#: Two 7 × 7 layers: a short range keeps a CoIBA fit quick on a CPU.
FIRST, LAST = "block6_4", "block7_1"


def network_layers() -> tuple[str, ...]:
    from iba_core.networks import get_spec

    return get_spec(NETWORK).layers


def run_button(at: AppTest):
    return at.button(key="ps_run_button")


def choose_coiba(at: AppTest, first: str = FIRST, last: str = LAST, steps: int = 3) -> AppTest:
    """The Per-Sample page with CoIBA chosen over first … last, `steps` steps of batch 2 (not yet run)."""
    at.radio(key="ps_bottleneck").set_value("coiba").run()
    assert_clean(at)
    at.selectbox(key=f"ps_range_first_{NETWORK}").set_value(first)
    at.selectbox(key=f"ps_range_last_{NETWORK}").set_value(last)
    at.number_input(key="psc_steps").set_value(steps)
    at.number_input(key="psc_batch").set_value(2)
    return at


def test_per_sample_offers_coiba_with_the_default_range_of_the_layer_picker(open_page) -> None:
    from iba_core.networks import load_network

    at = open_page("per_sample")
    assert at.radio(key="ps_bottleneck").value == "per_sample"  # the paper's bottleneck first
    shown = at.selectbox(key=f"ps_layer_{NETWORK}").options  # the layer picker's names (name · shape)
    at.radio(key="ps_bottleneck").set_value("coiba").run()
    assert_clean(at)
    first, last = at.selectbox(key=f"ps_range_first_{NETWORK}"), at.selectbox(key=f"ps_range_last_{NETWORK}")
    assert (first.value, last.value) == default_range(load_network(NETWORK))
    assert first.options == last.options == shown and len(shown) == len(network_layers())
    assert shown[0].startswith("stem · ")
    assert f"ps_layer_{NETWORK}" not in [s.key for s in at.selectbox]  # the range replaces the one layer
    # CoIBA's σ_s: its authors' (none), in its own settings
    assert at.number_input(key="psc_sigma").value == 0.0
    at.radio(key="ps_bottleneck").set_value("per_sample").run()
    assert at.selectbox(key=f"ps_layer_{NETWORK}").value == "block3_2"
    assert at.number_input(key="ps_sigma").value == 1.0


def test_coiba_run_shows_the_shared_mask_live_and_its_layers(open_page, downloads, monkeypatch) -> None:
    from iba_core.render import animation

    lambdas: list[np.ndarray] = []
    titles: list[str | None] = []
    real = animation.lambda_panel

    def recording(lam, **kw):
        lambdas.append(np.array(lam))
        titles.append(kw.get("title"))
        return real(lam, **kw)

    monkeypatch.setattr(animation, "lambda_panel", recording)  # the page imports it at each run
    at = choose_coiba(open_page("per_sample"), steps=3)
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    record = at.session_state["ps_run"]
    assert isinstance(record, RunRecord) and record.layers == (FIRST, LAST) and record.layer == FIRST
    result = record.result
    assert len(result.history) == 3 and result.heatmap.shape == (224, 224)
    # Live: one λ picture per step, each the step's shared mask (on the first layer's 7 × 7 grid), then the
    # replay's; the mask shrinks as the information term pushes it down.
    assert len(lambdas) == 4
    for info, drawn in zip(result.history, lambdas[:3]):
        np.testing.assert_allclose(drawn, info.lambda_mean, rtol=1e-5)
        assert drawn.shape == (7, 7)
    assert lambdas[2].mean() < lambdas[0].mean()
    assert titles == ["λ (shared by 2 layers)"] * 4  # one mask for both layers, not a mean over channels
    # Captions say which layers; the numbers are the result's.
    assert any(f"CoIBA at 2 layers, {FIRST} → {LAST}" in c.value for c in at.caption)
    assert any(f"CoIBA at 2 layers, {FIRST} … {LAST}" in c.value for c in at.caption)  # the Result's
    total = float(next(m.value for m in at.metric if m.label == "Information used").replace(",", "").split()[0])
    assert total == pytest.approx(round(result.total_bits), abs=0.5)

    names = list(downloads)
    stem = f"coiba_chelsea_{NETWORK}_{FIRST}-{LAST}"
    assert {f"{stem}_bits.npy", f"{stem}.json", f"{stem}_steps.gif", f"{stem}_overlay.png"} <= set(names), names
    report = json.loads(downloads[f"{stem}.json"]())
    assert report["method"] == COIBA_METHOD and report["layers"] == [FIRST, LAST] and report["layer"] == FIRST
    assert report["settings"]["sigma"] == 0.0 and report["results"]["total_bits"] == pytest.approx(result.total_bits)
    assert len(report["history"]) == 3


def test_a_bad_range_keeps_the_previous_result_and_says_why(open_page) -> None:
    at = choose_coiba(open_page("per_sample"), steps=1)
    run_button(at).click().run()
    assert_clean(at)
    before = at.session_state["ps_run"]
    at.selectbox(key=f"ps_range_first_{NETWORK}").set_value(LAST)
    at.selectbox(key=f"ps_range_last_{NETWORK}").set_value(FIRST)  # reversed
    run_button(at).click().run()
    assert_clean(at)
    assert at.session_state["ps_run"] is before
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and LAST in errors[0] and FIRST in errors[0] and "Traceback" not in errors[0]
    assert any(m.value.startswith("**Last run:**") for m in at.markdown)  # the previous run's replay stays


def test_beta_layer_range_axis_computes_coiba_rows(open_page, monkeypatch) -> None:
    from iba_core import beta_layer

    monkeypatch.setattr(beta_layer, "DEFAULT_BETAS", (10.0,))  # one β cell; the range row is what is tested
    at = open_page("beta_layer")
    at.radio(key="bl_axis").set_value("range").run()
    assert_clean(at)
    from iba_core.networks import load_network

    firsts, last = beta_layer.range_row(load_network(NETWORK), "block3_2")
    assert len(firsts) >= 3 and last == default_range(load_network(NETWORK))[1]
    assert any(f"to {last}" in c.value and "CoIBA" in c.value for c in at.caption)
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(1)
    at.button(key="bl_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    entry = at.session_state["bl_grids"][at.session_state["bl_last"]]
    assert isinstance(entry, GridRun)
    second = [c for c in entry.cells if c.row == "layer"]
    assert [(c.layer, c.last) for c in second] == [(first, last) for first in firsts]
    assert all(c.heatmap.shape == (224, 224) and np.isfinite(c.heatmap).all() for c in second)
    assert any("Bottom row: CoIBA" in c.value for c in at.caption)


def test_compare_and_evaluate_list_coiba(open_page) -> None:
    from iba_core.methods import get_method

    name = get_method("coiba").name  # the lists show names
    assert name.startswith("CoIBA")
    at = open_page("compare")
    assert name in at.multiselect(key="cmp_methods").options
    at = open_page("evaluate")
    assert name in at.multiselect(key="ev_methods").options


def test_compare_runs_coiba(open_page) -> None:
    from iba_core.networks import load_network

    at = open_page("compare")
    at.multiselect(key="cmp_methods").set_value(["coiba"])
    at.selectbox(key=f"cmp_readout_{NETWORK}").set_value("—")
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    run = at.session_state["cmp_last"]
    assert [key[4] for key in run.keys] == ["coiba"] and not run.failed  # map_key: (…, method, settings)
    (entry,) = [e for key, e in at.session_state["map_cache"].entries.items() if key in run.keys]
    network = load_network(NETWORK)
    assert entry.amap.extra["layers"] == layer_range(network, *default_range(network))
    assert entry.amap.unit == "bits/pixel" and entry.amap.values.shape == (224, 224)


def test_dataset_page_shows_a_coiba_folder_run(tmp_path, monkeypatch) -> None:
    from iba_core.cli import main
    from iba_core.images import load_sample

    root = tmp_path / "data_root"
    images = root / "images"
    images.mkdir(parents=True)
    for name in ("chelsea", "coffee"):
        load_sample(name).save(images / f"{name}.jpg", quality=95)
    run_dir = root / "run"
    assert main(["attribute", str(images), "--out", str(run_dir), "--methods", "saliency", "coiba",
                 "--layer-range", f"{FIRST}:{LAST}", "--steps", "2", "--batch", "2", "--no-progress"]) == 0
    monkeypatch.setenv("IBA_DATA_DIRS", str(root))  # the app may read the run folder there
    at = opened_run(APP, run_dir, TIMEOUT)
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    key = "coiba_1__block6_4-block7_1"  # CoIBA's key names its range when it is not the default one
    assert sorted(table[table["method"] == key]["image"]) == ["chelsea.jpg", "coffee.jpg"]
    assert (table[table["method"] == key]["total_bits"] > 0).all()
    from pages.widgets.text import plain

    # the run's line names the range
    assert any(plain(f"layer CoIBA {FIRST} … {LAST}") in c.value for c in at.caption), [c.value for c in at.caption]
    shown = at.multiselect(key="ds_methods_shown")
    assert any(option.startswith("CoIBA") and "block6_4" in option for option in shown.options), shown.options
    # a CoIBA row's link opens CoIBA on the Per-Sample page with the run's range; a saliency row's names none
    from urllib.parse import parse_qs, urlsplit

    from iba_core.app import dataset_gallery
    from iba_core.runs import open_run
    from iba_core.trust import Trust

    run = open_run(run_dir)
    for method, wanted in ((key, [f"{FIRST}:{LAST}"]), ("saliency", None)):
        row = run.table[run.table["method"] == method].iloc[0]
        params = parse_qs(urlsplit(dataset_gallery.per_sample_link(run, row, Trust.for_app())).query)
        assert params.get("range") == wanted, (method, params)
