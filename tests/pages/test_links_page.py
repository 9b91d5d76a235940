"""Links that reopen a view (issue 23, point 6), a network switch that shows none of the previous network's
controls, and a kept result that says which image it is of (point 7), on the Per-Sample page through AppTest."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, make_card_folder  # noqa: E402

from iba_core.app import links  # noqa: E402
from iba_core.networks import get_spec  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180
#: A layer of the offline network other than its default, and a class outside coffee's top five (tabby).
LAYER, TABBY = "block5_1", 281


def opened(params: dict[str, str], page: str = "per_sample") -> AppTest:
    """A new session opening pages/<page>.py with these query parameters (as a link would)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params.update(params)
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    assert_clean(at)
    return at


def warnings(at: AppTest) -> list[str]:
    return [w.value for w in at.warning]


def captions(at: AppTest) -> str:
    return " ".join(c.value for c in at.caption)


def test_a_link_restores_the_view_and_follows_the_widgets() -> None:
    assert LAYER != get_spec("efficientnet_lite0").default_layer
    at = opened({"image": "coffee", "network": "efficientnet_lite0", "layer": LAYER, "beta_k": "100",
                 "target": str(TABBY), "step": "2"})
    assert not warnings(at), warnings(at)
    assert at.radio(key="image_source").value == "Sample photo"
    assert at.selectbox(key="sample_name").value == "coffee"
    assert at.selectbox(key="ps_layer_efficientnet_lite0").value == LAYER
    assert at.select_slider(key="ps_beta").value == 100.0
    assert at.text_input(key="ps_other").value == str(TABBY), "a class outside the top five goes in the field"
    assert "step 2" in captions(at) and "press **Run**" in captions(at), "a link's step needs a run: said so"
    # the address bar holds the same view, in a fixed order, and the popover shows it
    assert at.query_params == {"image": "coffee", "network": "efficientnet_lite0", "layer": LAYER, "beta_k": "100",
                               "target": str(TABBY), "step": "2"}
    assert any(c.value.endswith(f"?image=coffee&network=efficientnet_lite0&layer={LAYER}&beta_k=100&target={TABBY}"
                                "&step=2") for c in at.code), [c.value for c in at.code]

    # Run: the replay opens at the link's step; the settings run are the link's
    at.number_input(key="ps_steps").set_value(3)
    at.number_input(key="ps_batch").set_value(2)
    at.button(key="ps_run_button").click().run()
    assert_clean(at)
    record = at.session_state["ps_run"]
    assert (record.layer, record.result.target, record.result.settings.beta_k) == (LAYER, TABBY, 100.0)
    replay = next(s for s in at.slider if s.label == "Replay step")
    assert replay.value == 2 and at.query_params["step"] == "2"
    assert "This link shows step" not in captions(at), "the step was taken"

    # the query parameters follow the widgets: the replay step, the image, a class picked on the radio
    replay.set_value(3).run()
    assert at.query_params["step"] == "3"
    at.selectbox(key="sample_name").set_value("chelsea").run()
    assert at.query_params["image"] == "chelsea"
    at.text_input(key="ps_other").set_value("")
    at.select_slider(key="ps_beta").set_value(1.0)
    at.button(key="ps_run_button").click().run()
    assert_clean(at)
    top1 = at.session_state["ps_run"].result.target
    assert at.query_params["beta_k"] == "1" and at.query_params["target"] == str(top1) != str(TABBY)


@pytest.mark.parametrize("page, prefix", [("beta_layer", "bl"), ("compare", "cmp"), ("evaluate", "ev")])
def test_the_other_pages_take_a_link_too(page: str, prefix: str) -> None:
    at = opened({"image": "coffee", "target": str(TABBY), "layer": LAYER}, page=page)
    assert not at.warning and at.selectbox(key="sample_name").value == "coffee"
    assert at.text_input(key=f"{prefix}_other").value == str(TABBY)
    assert at.query_params["image"] == "coffee" and at.query_params["target"] == str(TABBY)
    if page == "beta_layer":  # the only one of them with a layer
        assert at.selectbox(key="bl_layer_efficientnet_lite0").value == LAYER


def test_bad_params_give_one_warning_and_the_page_works() -> None:
    at = opened({"image": "[x](http://evil)", "network": "/etc/passwd", "layer": "no_such_layer",
                 "beta_k": "1e9", "target": "99999", "step": "x", "utm_source": "mail"})
    assert len(at.warning) == 1, warnings(at)
    text = at.warning[0].value
    for words in ("not one of the sample photos", "not offered on this server", "not a layer of",
                  "outside", "not one of the 1000 classes", "not a replay step"):
        assert words in text, (words, text)
    # a link's text is shown as typed, never as Markdown (nor as a link: `plain` breaks the URL invisibly)
    assert _plain("[x](http://evil)") in text and "\\[x\\]\\(http" in text
    # the page works with its own choices; the address bar now holds the view shown (other params kept)
    spec = get_spec("efficientnet_lite0")
    assert at.selectbox(key="sample_name").value == "chelsea"
    assert at.selectbox(key=f"ps_layer_{spec.key}").value == spec.default_layer
    assert at.get("form"), "the settings form is there"
    assert at.query_params["image"] == "chelsea" and at.query_params["layer"] == spec.default_layer
    assert at.query_params["utm_source"] == "mail"
    # the warning is about the link: gone on the next run
    at.selectbox(key="sample_name").set_value("coffee").run()
    assert not at.warning


def test_an_upload_link_reopens_the_upload_while_the_server_keeps_it(open_page, chelsea_png: bytes) -> None:
    # Pixels of this test's own (the upload cache lives as long as the test session: another test's upload of
    # the same bytes under another name would be the one kept).
    import io

    from PIL import Image, ImageOps

    buf = io.BytesIO()
    ImageOps.flip(Image.open(io.BytesIO(chelsea_png))).save(buf, format="PNG")
    chelsea_png = buf.getvalue()
    at = open_page("per_sample")
    at.radio(key="image_source").set_value("Upload").run()
    at.file_uploader[0].set_value(("my cat.png", chelsea_png, "image/png")).run()
    assert_clean(at)
    value = at.query_params["image"]
    digest = value.removeprefix(links.UPLOAD_PREFIX)
    assert value.startswith(links.UPLOAD_PREFIX) and links.DIGEST_PATTERN.fullmatch(digest)
    assert links.kept_upload(digest) == ("my cat.png", chelsea_png)

    other = opened({"image": value})  # another visitor with the link
    assert not other.warning
    assert other.radio(key="image_source").value == "Upload"
    assert "Using **my cat.png**, uploaded earlier." in captions(other)
    assert other.get("form") and other.query_params["image"] == value

    links.upload_path(digest).unlink()  # the server no longer keeps it
    gone = opened({"image": value})
    assert [w.value for w in gone.warning] == [f"This link could not be opened in full. {_plain(links.UPLOAD_GONE)}"]
    assert gone.selectbox(key="sample_name").value == "chelsea" and gone.get("form")


def _plain(text: str) -> str:
    from pages.widgets.text import plain

    return plain(text)


@pytest.fixture
def fruit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A model card (a 7-class ResNet-18) in a models folder of this test alone."""
    make_card_folder(tmp_path / "models" / "fruit")
    monkeypatch.setenv("IBA_MODELS_DIR", str(tmp_path / "models"))
    return str((tmp_path / "models" / "fruit" / "fruit.toml").resolve())


def test_another_network_shows_none_of_the_previous_networks_controls(open_page, fruit, monkeypatch) -> None:
    at = open_page("per_sample")
    at.text_input(key="ps_other").set_value("tabby").run()
    assert at.selectbox(key="ps_layer_efficientnet_lite0").value

    # While the new network loads (the run stopped inside its loading), the right column says so and holds
    # no layer or class of the previous network.
    import pages.widgets.network_picker as ui

    real = ui.load_shared

    def stopped(key, trust=None):
        if key == fruit:
            st.stop()
        return real(key, trust)

    monkeypatch.setattr(ui, "load_shared", stopped)
    at.selectbox(key="network").set_value(fruit).run()
    assert any(i.value.startswith("Loading fruit") for i in at.columns[1].info), [i.value for i in at.info]
    assert not [w for w in at.selectbox if (w.key or "").startswith("ps_layer_")]
    assert not [w for w in at.radio if (w.key or "").startswith("ps_target_")]
    assert not at.get("form")

    monkeypatch.setattr(ui, "load_shared", real)
    at.run()
    assert_clean(at)
    layers = [w for w in at.selectbox if (w.key or "").startswith("ps_layer_")]
    assert len(layers) == 1 and layers[0].key == "ps_layer_card:fruit"
    assert "block5_1" not in layers[0].options and any(o.startswith("layer2") for o in layers[0].options)
    radios = [r for r in at.radio if (r.key or "").startswith("ps_target_")]
    assert len(radios) == 1 and all(o.split(" · ")[0] in CLASSES for o in radios[0].options)
    assert at.text_input(key="ps_other").value == "", "the class typed for the previous network is cleared"
    assert at.query_params["network"] == "card:fruit" and at.query_params["layer"] == "layer2"
    assert not any(i.value.startswith("Loading") for i in at.info)

    # a link naming the card by name reopens it; the card's path is never a link's value
    other = opened({"network": "card:fruit", "layer": "layer3"})
    assert not other.warning and other.selectbox(key="ps_layer_card:fruit").value == "layer3"
    assert fruit not in " ".join(other.query_params.values())


def test_a_kept_result_says_which_image_it_is_of(open_page) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(2)
    at.number_input(key="ps_batch").set_value(2)
    at.button(key="ps_run_button").click().run()
    assert_clean(at)
    assert "This run is of" not in captions(at)

    at.radio(key="image_source").set_value("Upload").run()
    at.file_uploader[0].set_value(("broken.png", b"\x89PNG\r\n\x1a\nnot really", "image/png")).run()
    assert_clean(at)
    assert at.error and at.metric, "refused, and the last result stays"
    assert "This run is of chelsea; no usable image is chosen above" in captions(at)

    at.radio(key="image_source").set_value("Sample photo").run()
    at.selectbox(key="sample_name").set_value("coffee").run()
    text = captions(at)
    assert "This run is of chelsea, not of the image chosen above; press Run" in text
    assert text.count("This run is of chelsea") == 2, "said in the replay beside the image and above the result"


def test_a_link_with_a_layer_range_opens_coiba_and_leaves_the_link_with_per_sample() -> None:
    at = opened({"image": "chelsea", "network": "efficientnet_lite0", "range": "block5_1:block6_2"})
    assert not warnings(at), warnings(at)
    assert at.radio(key="ps_bottleneck").value == "coiba"
    assert at.selectbox(key="ps_range_first_efficientnet_lite0").value == "block5_1"
    assert at.selectbox(key="ps_range_last_efficientnet_lite0").value == "block6_2"
    assert at.query_params["range"] == "block5_1:block6_2"
    at.radio(key="ps_bottleneck").set_value("per_sample").run()
    assert_clean(at)
    assert "range" not in at.query_params and "layer" in at.query_params

    # a range the network cannot take: one warning, the default range, and the rest of the link opens
    at = opened({"image": "coffee", "network": "efficientnet_lite0", "range": "block6_2:block5_1"})
    assert len(warnings(at)) == 1 and "runs backwards" in warnings(at)[0], warnings(at)
    assert at.selectbox(key="sample_name").value == "coffee"
    assert at.radio(key="ps_bottleneck").value == "per_sample"
    assert "range" not in at.query_params


def test_a_refused_step_leaves_the_address_bar() -> None:
    at = opened({"image": "coffee", "step": "-4"})
    assert len(at.warning) == 1 and "step" not in at.query_params and at.query_params["image"] == "coffee"


def test_a_network_that_does_not_load_is_named_in_the_link_without_another_network_s_layer() -> None:
    at = opened({"image": "coffee"})
    at.selectbox(key="network").set_value("vgg16").run()  # no weights offline: refused with its reason
    assert at.query_params["network"] == "vgg16"
    assert all(name not in at.query_params for name in ("layer", "target", "step"))
