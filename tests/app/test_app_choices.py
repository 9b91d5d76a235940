"""iba_core.app.choices: what the pages offer, per network."""
from __future__ import annotations

import numpy as np
import pytest

from app_helpers import fake_network
from iba_core.app import choices
from iba_core.errors import UserError
from iba_core.methods import get_method, method_keys


def test_beta_choices_are_log_spaced_and_include_the_paper_default() -> None:
    values = np.array(choices.BETA_K_CHOICES)
    assert values[0] == 0.01 and values[-1] == 1000.0 and choices.DEFAULT_BETA_K in values
    assert (np.diff(values) > 0).all()
    assert np.diff(np.log10(values)).max() < 0.5  # no gaps wider than a factor of ~3
    assert choices.DEFAULT_THRESHOLD in choices.THRESHOLD_CHOICES


def test_defaults_are_registered_methods() -> None:
    keys = set(method_keys())
    for default in (choices.DEFAULT_COMPARE_METHODS, choices.DEFAULT_EVALUATE_METHODS,
                    (choices.DEFAULT_SANITY_METHOD, choices.READOUT_METHOD)):
        assert set(default) <= keys
    assert get_method(choices.DEFAULT_SANITY_METHOD).cost == "fast"


def test_every_method_is_offered_or_set_apart_with_a_reason(offline_model) -> None:
    offered = choices.method_choices(offline_model)
    assert sorted([*offered.keys, *offered.unavailable]) == sorted(method_keys())
    assert [k for k in method_keys() if k in offered.keys] == offered.keys  # display order kept
    assert all(offered.unavailable.values())
    assert {*choices.DEFAULT_COMPARE_METHODS, *choices.DEFAULT_EVALUATE_METHODS, "readout"} <= set(offered.keys)


def test_methods_a_network_cannot_run_are_set_apart_with_their_reason() -> None:
    bare = fake_network(spec=None)  # no named layers: no bottlenecks
    offered = choices.method_choices(bare)
    assert {"iba_10", "readout"} <= set(offered.unavailable) and "saliency" in offered.keys
    assert all(offered.unavailable.values())
    assert [k for k in method_keys() if k in offered.keys] == offered.keys  # display order kept
    text = choices.unavailable_text(offered, {"iba_10": "Per-Sample IBA"})
    assert text.startswith("Not available for this network:") and "Per-Sample IBA" in text
    # methods refused for one reason share it: the bottlenecks' reason is said once, after all their names
    reason = offered.unavailable["iba_10"].rstrip(".")
    assert text.count(reason) == 1 and text.index("Per-Sample IBA") < text.index(reason)
    assert choices.unavailable_text(choices.MethodChoices(["a"]), {}) == ""


def test_compare_choices_leave_out_the_readout(offline_model) -> None:
    offered = choices.compare_choices(offline_model)
    assert choices.READOUT_METHOD not in offered.keys and choices.READOUT_METHOD not in offered.unavailable
    assert set(choices.DEFAULT_COMPARE_METHODS) <= set(offered.keys)


def test_sanity_choices_are_the_fast_methods(offline_model) -> None:
    offered = choices.sanity_choices(offline_model)
    assert offered.keys and all(get_method(k).cost == "fast" for k in offered.keys)
    assert not {"iba_10", "occlusion_14", "integrated_gradients", "smoothgrad"} & set(offered.keys)
    assert offered.keys[choices.default_sanity_method(offered)] == choices.DEFAULT_SANITY_METHOD
    assert choices.default_sanity_method(choices.MethodChoices(["gradient"])) == 0


@pytest.mark.parametrize("wanted, expected", [
    (["saliency", "iba_10", "nope"], ["saliency"]),
    (("iba_10",), []),
    ([], []),
])
def test_defaults_keep_only_offered_methods(wanted, expected) -> None:
    offered = choices.MethodChoices(["saliency", "grad_cam"], {"iba_10": "no layers"})
    assert offered.defaults(wanted) == expected


def test_compare_request_puts_the_chosen_readout_last(tmp_path) -> None:
    from iba_core.app.checkpoints import ReadoutCheckpoint

    ckpt = ReadoutCheckpoint(tmp_path / "r.pt", False, "efficientnet_lite0", "12 photos", True)
    request = choices.compare_request(["saliency"], {"saliency": "Saliency"}, ckpt)
    assert request.keys == ["saliency", choices.READOUT_METHOD]
    assert request.settings == {choices.READOUT_METHOD: {"checkpoint": str(tmp_path / "r.pt")}}
    assert request.names[choices.READOUT_METHOD] == ckpt.label and request.names["saliency"] == "Saliency"
    plain = choices.compare_request(["saliency"], {}, None)
    assert plain.keys == ["saliency"] and plain.settings == {}
    assert choices.compare_request([], {}, ckpt).keys == [choices.READOUT_METHOD]
    with pytest.raises(UserError, match="at least one method"):
        choices.compare_request([], {}, None)


def test_the_default_box_stays_under_the_papers_share_for_every_crop() -> None:
    from iba_core.app.choices import default_box
    from iba_core.metrics.bbox import LARGEST_BOX_SHARE

    assert default_box(224) == (50, 40, 170, 170)
    for crop in (96, 192, 224, 299, 384):
        x0, y0, x1, y1 = default_box(crop)
        assert 0 <= x0 < x1 <= crop and 0 <= y0 < y1 <= crop
        assert (x1 - x0) * (y1 - y0) / crop**2 < LARGEST_BOX_SHARE


def test_a_clip_folder_run_offers_m2ibs_beta_first(tmp_path):
    """A CLIP model's folder run starts with the Per-Sample Bottleneck at its head's default β·k (M2IB's 0.1), a
    key no preset has; a classifier's with the paper's iba_10, nothing added."""
    from clip_fixtures import save_tiny_clip
    from iba_core.app.choices import folder_run_choices
    from iba_core.methods import get_method
    from iba_core.networks import load_network

    clip = load_network(f"clip:{save_tiny_clip(tmp_path / 'clip')}")
    choices, names, defaults = folder_run_choices(clip)
    assert defaults == ["iba_0_1"] and choices.keys[0] == "iba_0_1" and "iba_10" in choices.keys
    assert names["iba_0_1"] == get_method("iba_0_1").name and get_method("iba_0_1").settings["beta_k"] == 0.1
    choices, names, defaults = folder_run_choices(load_network("efficientnet_lite0"))
    assert defaults == ["iba_10"] and "iba_0_1" not in choices.keys
