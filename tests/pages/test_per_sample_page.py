"""Per-Sample Bottleneck page, driven through Streamlit's AppTest."""
from __future__ import annotations

import json
import re

import numpy as np
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, timed_run


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def plotly_specs(at: AppTest) -> dict[str, dict]:
    """Plotly charts by their element key (the page keys every chart)."""
    charts = at.get("plotly_chart")
    return {c.key: json.loads(c.proto.spec) for c in charts if c.key}


def percent(text: str) -> float:
    return float(re.sub(r"[^\d.eE+-]", "", text))


def use_upload(at: AppTest) -> AppTest:
    at.radio(key="image_source").set_value("Upload").run()
    assert_clean(at)
    return at


def run_button(at: AppTest):
    return at.button(key="ps_run_button")


def test_run_on_sample_photo_shows_heatmap_and_numbers(open_page) -> None:
    at = open_page("per_sample")
    assert at.selectbox(key="sample_name").value == "chelsea"
    assert at.selectbox(key="network").value == "efficientnet_lite0"
    targets = at.radio[1]
    assert "Egyptian cat" in targets.format_func(targets.value)  # top-1 preselected

    at, seconds = timed_run(run_button(at).click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    m = metrics(at)
    total_bits = float(m["Information used"].replace(",", "").split()[0])
    assert total_bits > 0
    for label in ("p(target) without bottleneck", "p(target) with bottleneck"):
        assert 0.0 <= percent(m[label]) <= 100.0
    assert abs(percent(m["p(target) without bottleneck"]) - 35.5) < 1.0  # chelsea → Egyptian cat

    specs = plotly_specs(at)
    assert {"ps_heatmap", "ps_lambda", "ps_curves"} <= set(specs)
    heat = specs["ps_heatmap"]["data"][0]
    assert heat["type"] == "heatmap"
    assert "bits" in heat["colorbar"]["title"]["text"]

    record = at.session_state["ps_run"]
    assert record.result.heatmap.shape == (224, 224)
    assert np.isclose(record.result.heatmap.sum(), total_bits, rtol=1e-3)
    assert len(record.result.history) == 10
    assert len(at.image) >= 3  # crop preview, overlay, "not needed" view
    assert {b.label for b in at.get("download_button")} >= {"Overlay PNG", "Heatmap .npy", "JSON report"}
    assert seconds < 120, f"one Run took {seconds:.0f} s"

    # Moving a result slider reruns the script; the result must survive without recomputing.
    at.slider(key="ps_opacity").set_value(0.3).run()
    assert_clean(at)
    assert at.session_state["ps_run"] is record
    assert metrics(at)["Information used"] == m["Information used"]


def test_upload_of_a_real_photo_works(open_page, chelsea_png: bytes) -> None:
    at = use_upload(open_page("per_sample"))
    assert any("image file to upload" in i.value for i in at.info), "an empty uploader should say what to do"
    at.file_uploader[0].set_value(("chelsea.png", chelsea_png, "image/png")).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert any("Top prediction: Egyptian cat" in c for im in at.image for c in im.captions)

    at.number_input(key="ps_steps").set_value(3)
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["ps_run"]
    assert record.image_name == "chelsea.png"
    assert len(record.result.history) == 3


def test_corrupt_upload_shows_error_and_keeps_previous_result(open_page) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(2)
    run_button(at).click().run()
    assert_clean(at)
    before = metrics(at)["Information used"]

    use_upload(at)
    at.file_uploader[0].set_value(("broken.png", b"\x89PNG\r\n\x1a\nthis is not really a png", "image/png")).run()
    assert_clean(at)
    assert at.error, "a corrupt upload must show st.error"
    assert "image" in at.error[0].value.lower()
    assert not at.get("form"), "no Run form without a usable image"
    assert metrics(at)["Information used"] == before, "the previous result must stay visible"


def test_unknown_class_name_shows_error(open_page) -> None:
    at = open_page("per_sample")
    at.text_input(key="ps_other").input("definitely not an imagenet class")
    run_button(at).click().run()
    assert_clean(at)
    assert at.error and "No class named" in at.error[0].value
    assert "ps_run" not in at.session_state

    # A unique part of a name is enough; the run explains that class.
    at.text_input(key="ps_other").input("tabby")
    at.number_input(key="ps_steps").set_value(2)
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["ps_run"].result.target == 281


def test_missing_weights_show_error_and_app_keeps_working(open_page) -> None:
    from iba_core.networks import find_weights, get_spec

    if find_weights(get_spec("resnet50")) is not None:
        import pytest

        pytest.skip("ResNet-50 weights are installed here; the missing-weights path cannot be shown")
    at = open_page("per_sample")
    at.selectbox(key="network").set_value("resnet50").run()
    assert_clean(at)
    assert at.error and "resnet50-0676ba61.pth" in at.error[0].value
    at.selectbox(key="network").set_value("efficientnet_lite0").run()
    assert_clean(at)
    assert not at.error
    assert run_button(at) is not None


def test_huge_upload_is_refused_with_a_message(open_page) -> None:
    from iba_core.app.inputs import MAX_UPLOAD_MB

    at = use_upload(open_page("per_sample"))
    too_big = b"\x89PNG\r\n\x1a\n" + bytes(MAX_UPLOAD_MB * 1024 * 1024)
    at.file_uploader[0].set_value(("huge.png", too_big, "image/png")).run()
    assert_clean(at)
    assert at.error and f"{MAX_UPLOAD_MB} MB" in at.error[0].value


def test_statistics_from_an_image_folder(open_page, tmp_path) -> None:
    from PIL import Image

    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(1)
    at.text_input(key="ps_folder").input(str(tmp_path / "no_such_folder"))
    run_button(at).click().run()
    assert_clean(at)
    assert at.error and "Image folder not found" in at.error[0].value

    for i in range(4):
        Image.new("RGB", (300, 260), (60 * i, 120, 200 - 40 * i)).save(tmp_path / f"photo_{i}.jpg")
    at.text_input(key="ps_folder").input(str(tmp_path))
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["ps_run"]
    assert record.stats_description.startswith("4 samples from folder")
    assert any("4 samples from folder" in c.value for c in at.caption)
