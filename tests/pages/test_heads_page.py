"""A multi-label (sigmoid) network on the Per-Sample page: its top list says the probabilities are per label and
lists the labels above 50 %; the run's p(target) is σ of the label's logit."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import make_resnet18, write_card  # noqa: E402

LABELS = ["cloud", "water", "road", "forest"]


@pytest.fixture(scope="module")
def sigmoid_card(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("head-models")
    torch.save(make_resnet18(len(LABELS)).state_dict(), root / "scenes.pth")
    (root / "scenes.txt").write_text("\n".join(LABELS) + "\n")
    card = write_card(root, name="scenes", weights="scenes.pth", classes="scenes.txt",
                      extra='head = "sigmoid"\n[preprocess]\nresize = 64\ncrop = 64\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield str(Path(card).resolve())


def _captions(at: AppTest) -> str:
    """Every image caption of the page (st.image's), joined."""
    return " ".join(c for image in at.image for c in image.captions)


def test_a_sigmoid_network_lists_its_labels_above_half(open_page, sigmoid_card) -> None:
    at = open_page("per_sample")
    at = at.selectbox(key="network").set_value(sigmoid_card).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    captions = _captions(at)
    assert "Labels above 50 %" in captions and "per label" in captions and "need not sum to 1" in captions
    radio = next(r for r in at.radio if r.key and r.key.startswith("ps_target_"))
    assert "per label" in radio.help and len(radio.options) == 4
    at.number_input(key="ps_steps").set_value(2)
    at.number_input(key="ps_batch").set_value(4)
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    result = at.session_state["ps_run"].result
    assert result.head == "sigmoid" and 0 < result.p_without < 1 and np.isfinite(result.heatmap).all()
