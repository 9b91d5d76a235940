"""The Compare and Evaluate pages on tiny transformers (issue #39, item 3): every CAM (Grad-CAM, Grad-CAM++,
LayerCAM, Eigen-CAM, Score-CAM) runs on a ViT's and a Swin's token layers with no reshape from the user, each map
a picture of finite, non-constant values; the Evaluate page measures them; and a method that cannot run on a
transformer is listed with the very sentence its `available_for` gives. The networks are saved as timm saves them
(`save_for_hf`, 32-px inputs; a ViT and a Swin) and as transformers does (`save_pretrained`, a 64-px ViT), and
reached through model cards in the app's models folder."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import clean
from test_ecosystem_pages import write_stats_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from source_fixtures import TINY_TIMM, save_hf_vit, save_tiny_timm  # noqa: E402

CAMS = ["grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "score_cam"]
NAMES = ["Grad-CAM", "Grad-CAM++", "LayerCAM", "Eigen-CAM", "Score-CAM"]
#: The tiny timm models' input side (`source_fixtures.TINY_TIMM`).
CROP = 32
#: Each network's crop: the tiny timm ViT and Swin, and a tiny transformers ViT (`save_hf_vit`, 64 px).
KINDS = {"vit": CROP, "swin": CROP, "hf_vit": 64}
#: The class the maps explain (index 2 of `source_fixtures.FRUIT`).
TARGET = "cherry"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A models folder with one card per tiny transformer: <kind>/<kind>.toml, its model folder and images."""
    root = tmp_path_factory.mktemp("transformer-models")
    for seed, kind in enumerate(KINDS):
        folder = root / kind
        write_stats_images(folder / "images", "RGB", seed)
        if kind == "hf_vit":
            save_hf_vit(folder / "model")
        else:
            assert TINY_TIMM[kind][1]["img_size"] == CROP
            save_tiny_timm(folder / "model", kind)
        (folder / f"{kind}.toml").write_text('model_folder = "model"\nstats_images = "images"\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield root



def choose(at: AppTest, models: Path, kind: str) -> AppTest:
    return clean(at.selectbox(key="network").set_value(str((models / kind / f"{kind}.toml").resolve())).run())


def shown(markdown: str) -> str:
    """The text a reader sees of `pages.widgets.text.plain`'s Markdown: escapes, word joiners and bidi isolates
    gone."""
    return re.sub(r"[\u2060\u2066-\u2069]", "", re.sub(r"\\(.)", r"\1", markdown))


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_compare_page_draws_every_cam_on_a_transformer(open_page, models: Path, kind: str) -> None:
    at = choose(open_page("compare"), models, kind)
    assert set(NAMES) <= set(at.multiselect(key="cmp_methods").options)  # offered, not listed as unavailable
    at.multiselect(key="cmp_methods").set_value(CAMS)
    # A class each CAM has a positive part for: the tiny Swin's random weights give the photo's top-1 class a
    # Grad-CAM++ that is negative on every patch, so zero after its ReLU (pytorch-grad-cam's too, checked by hand).
    at.text_input(key="cmp_other").set_value(TARGET)
    at = at.button(key="cmp_run_button").click().run()
    clean(at)
    last = at.session_state["cmp_last"]
    assert not last.failed and [k[4] for k in last.keys] == CAMS and last.subject.class_name == TARGET
    assert not any("failed" in w.value or "not available" in w.value for w in at.warning)
    cache = at.session_state["map_cache"]
    for key in CAMS:
        values = cache.get(next(k for k in last.keys if k[4] == key)).amap.values
        assert values.shape == (KINDS[kind],) * 2 and np.isfinite(values).all(), key
        assert values.std() > 0, key  # a map, not a blank (e.g. gradients that never reach the patch tokens)
        # more than one value per patch: the token grid (4 × 4 for the ViTs, 8 × 8 for the Swin) is upsampled
        assert len(np.unique(values)) > 16, key
    assert len(at.image) >= 1 + len(CAMS)  # the input and one picture per map
    captions = " ".join(c.value for c in at.caption)
    for name in NAMES:
        assert f"**{name}** ·" in captions, name


def test_a_method_a_transformer_cannot_run_is_listed_with_its_own_sentence(open_page, models: Path) -> None:
    """The form's note gives `available_for`'s sentence unchanged (Guided Backprop and Guided Grad-CAM: no ReLU in
    a ViT), once for the two methods that share it."""
    from iba_core.methods import get_method
    from iba_core.networks import load_network

    at = choose(open_page("compare"), models, "vit")
    network = load_network(str(models / "vit" / "model"))
    reasons = {key: get_method(key).available_for(network) for key in ("guided_backprop", "guided_grad_cam")}
    assert all(reasons.values()) and len(set(reasons.values())) == 1  # one sentence for both
    reason = reasons["guided_grad_cam"]
    assert "ReLU" in reason
    offered = at.multiselect(key="cmp_methods").options
    assert "Guided Grad-CAM" not in offered and "Guided Backprop" not in offered
    notes = [shown(c.value) for c in at.caption if "Not available for this network" in shown(c.value)]
    assert len(notes) == 1, [c.value for c in at.caption]
    assert f"Guided Backprop, Guided Grad-CAM ({reason.rstrip('.')})" in notes[0]
    assert notes[0].count(reason.rstrip(".")) == 1


def test_the_evaluate_page_measures_every_cam_on_a_tiny_vit(open_page, models: Path) -> None:
    at = choose(open_page("evaluate"), models, "vit")
    at.multiselect(key="ev_methods").set_value(CAMS)
    at.text_input(key="ev_other").set_value(TARGET)
    # The field's yardsticks: insertion / deletion in 4 steps of a quarter of the crop, ROAD at two points.
    at.radio(key="ev_protocol").set_value("rise")
    at.number_input(key="ev_step").set_value(CROP * CROP // 4)
    at.multiselect(key="ev_removed").set_value([30, 70])
    at = at.button(key="ev_yard_button").click().run()
    clean(at)
    run = at.session_state["ev_yardsticks"]
    assert list(run.methods) == CAMS
    for key, result in run.methods.items():
        assert len(result.pixels.fraction) == 5, key
        assert np.isfinite(result.pixels.insertion).all() and np.isfinite(result.pixels.deletion).all(), key
        assert len(result.road.morf) == 2 and np.isfinite(result.road.morf).all(), key

    # Degradation: every CAM's MoRF and LeRF curves and their area.
    assert at.radio(key="ev_tile:32x32").value == 8  # offered first: 14 does not divide the 32-px crop
    at.number_input(key="ev_points").set_value(3)
    at = clean(at.button(key="ev_deg_button").click().run())
    entry = at.session_state["ev_degradation"]
    assert list(entry.curves) == CAMS
    assert list(at.dataframe[0].value["Method"]) == NAMES
    assert at.dataframe[0].value["Area (LeRF − MoRF)"].notna().all()

    # The sanity check offers the fast CAMs (Score-CAM is slow: one pass per channel, per randomisation step).
    fast = at.selectbox(key="ev_san_method").options
    assert [n for n in NAMES if n in fast] == NAMES[:4]
    at.selectbox(key="ev_san_method").set_value("layer_cam")
    at.slider(key="ev_san_levels").set_value(2)
    at = clean(at.button(key="ev_san_button").click().run())
    strip = at.session_state["ev_sanity"].strip
    assert len(strip.levels) == 2 and strip.heatmaps[0].shape == (CROP, CROP)
    assert np.isfinite(strip.heatmaps[0]).all() and strip.heatmaps[0].std() > 0
