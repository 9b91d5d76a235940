"""A method that cannot run on a network (issue #39: "every failure has its one-sentence reason, and the same
sentence is what a user sees"): the app's forms, the Dataset page's folder job and the command line (`compare`,
`evaluate`, `attribute FOLDER`, a method named or "all") all give the sentence of the method's `available_for`,
for a tiny timm ViT (Guided Backprop and Guided Grad-CAM: no ReLU; LRP; PatternAttribution; the readout) and for a
network whose layers give no map for a CAM (every CAM: no Grad-CAM layer)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bad_input_helpers import cli_error, run_cli

from iba_core.app.choices import READOUT_METHOD, app_reason, compare_choices, method_choices, unavailable_text
from iba_core.methods import display_names, get_method, method_keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import write_noise_images  # noqa: E402
from source_fixtures import save_tiny_timm  # noqa: E402

CAMS = ["grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "score_cam", "guided_grad_cam"]
#: A network with one 1 × 1 map: nothing for a CAM to lay on the image.
POINT_MODULE = '''from torch import nn


def build(classes=3):
    return nn.Sequential(nn.Conv2d(3, 8, 32, stride=32), nn.ReLU(), nn.Flatten(), nn.Linear(8, classes))
'''


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """"vit": a tiny timm ViT's folder; "point": a card whose network has only a 1 × 1 map; "images": 2 PNGs."""
    root = tmp_path_factory.mktemp("unavailable")
    point = root / "point"
    point.mkdir()
    (point / "pointmod.py").write_text(POINT_MODULE)
    (point / "classes.txt").write_text("apple\nbanana\ncherry\n")
    (point / "point.toml").write_text('arch = "pointmod:build"\nclasses = "classes.txt"\n[arch_args]\nclasses = 3\n'
                                      "[preprocess]\nresize = 32\ncrop = 32\n")
    write_noise_images(root / "images", 2, size=40)
    return {"vit": save_tiny_timm(root / "vit", "vit"), "point": point / "point.toml", "images": root / "images"}


@pytest.fixture(scope="module")
def networks(folders) -> dict[str, object]:
    from iba_core.networks import load_network
    from iba_core.trust import Trust

    return {"vit": load_network(str(folders["vit"])),
            "point": load_network(str(folders["point"]), weights=None, trust=Trust.local(code=True))}


def reasons(network) -> dict[str, str]:
    """key → `available_for`'s sentence, for every registered method that cannot run on `network`."""
    out = {key: get_method(key).available_for(network) for key in method_keys()}
    return {key: reason for key, reason in out.items() if reason}


def test_the_cases_are_what_the_issue_names(networks) -> None:
    vit, point = reasons(networks["vit"]), reasons(networks["point"])
    assert {"guided_backprop", "guided_grad_cam", "lrp_epsilon", READOUT_METHOD} <= set(vit)
    assert not set(CAMS[:5]) & set(vit)  # the CAMs run on a ViT's tokens
    assert "ReLU" in vit["guided_grad_cam"] and vit["guided_backprop"] == vit["guided_grad_cam"]
    assert set(CAMS) <= set(point)
    assert all(point[key].startswith("no Grad-CAM layer is known for") for key in CAMS)


@pytest.mark.parametrize("kind", ["vit", "point"])
def test_the_apps_forms_list_each_method_with_its_own_sentence(networks, kind) -> None:
    """Every form (Compare, Evaluate, Dataset) lists a refused method with its sentence unchanged; only the readout
    adds where on the app's pages a checkpoint is found (`app_reason`)."""
    network = networks[kind]
    expected = reasons(network)
    offered = method_choices(network)
    assert set(offered.unavailable) == set(expected)
    for key, reason in expected.items():
        shown = app_reason(key, network, reason) if key == READOUT_METHOD else reason
        assert offered.unavailable[key] == shown, key
    assert offered.unavailable[READOUT_METHOD] != expected[READOUT_METHOD]  # the app's words (see its own test)
    text = unavailable_text(compare_choices(network), display_names())
    for key, reason in expected.items():
        if key != READOUT_METHOD:
            assert reason.rstrip(".") in text and display_names()[key] in text, key


@pytest.mark.parametrize("kind, key", [("vit", "guided_grad_cam"), ("vit", "guided_backprop"),
                                       ("point", "grad_cam"), ("point", "score_cam")])
def test_compare_names_a_refused_method_with_its_sentence(folders, networks, tmp_path, kind, key) -> None:
    reason = get_method(key).available_for(networks[kind])
    result = run_cli(["compare", folders["images"] / "img00.png", "--model", folders[kind], "--trust-code",
                      "--methods", "saliency", key, "--out", tmp_path / "out"])
    assert result.code == 1  # a method failed
    assert reason in result.err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [m["key"] for m in summary["methods"]] == ["saliency"]
    assert summary["failed"][key] == f"{get_method(key).name} is not available here: {reason}"


@pytest.mark.parametrize("kind, key", [("vit", "guided_grad_cam"), ("point", "layer_cam")])
def test_evaluate_and_a_folder_run_refuse_a_named_method_with_its_sentence(folders, networks, tmp_path, kind,
                                                                           key) -> None:
    method = get_method(key)
    reason = method.available_for(networks[kind])
    common = ["--model", folders[kind], "--trust-code", "--methods", "saliency", key, "--no-progress"]
    evaluate = run_cli(["evaluate", "insertion", "--images", folders["images"], "--step", "256",
                        "--out", tmp_path / "ev", *common])
    assert cli_error(evaluate) == f"{method.name} is not available here: {reason}"
    folder = run_cli(["attribute", folders["images"], "--out", tmp_path / "run", *common])
    assert cli_error(folder) == f"{method.name} cannot run here: {reason}"


@pytest.fixture
def cheap_all(monkeypatch) -> list[list[str]]:
    """`--methods all` kept to saliency after the CLI has said what it leaves out (the note is the real one); the
    keys each call would have run are recorded."""
    import iba_core.cli.common as common

    real, kept = common.runnable, []

    def cheap(methods, network):
        runs = real(methods, network)
        kept.append([m.key for m in runs])
        return [m for m in runs if m.key == "saliency"]

    monkeypatch.setattr(common, "runnable", cheap)
    return kept


@pytest.mark.parametrize("command", ["compare", "evaluate", "attribute"])
def test_all_names_what_it_leaves_out_with_each_sentence(folders, networks, tmp_path, cheap_all, command) -> None:
    """"--methods all" runs what can run on the ViT and says, on stderr, which methods it left out and why: each
    refused method's name and sentence, as the app's forms list them."""
    expected = reasons(networks["vit"])
    argv = {"compare": ["compare", folders["images"] / "img00.png"],
            "evaluate": ["evaluate", "insertion", "--images", folders["images"], "--step", "256"],
            "attribute": ["attribute", folders["images"]]}[command]
    result = run_cli([*argv, "--model", folders["vit"], "--methods", "all", "--out", tmp_path / "out",
                      *([] if command == "compare" else ["--no-progress"])])
    assert result.code == 0, result.err[-600:]
    (note,) = [line for line in result.err.splitlines() if line.startswith("note: Not available for this network")]
    choices = method_choices(networks["vit"])
    choices.unavailable = expected  # the methods' own sentences, the readout's too (no app page to point to here)
    assert note == "note: " + unavailable_text(choices, display_names())
    for key, reason in expected.items():
        assert reason.rstrip(".") in note and display_names()[key] in note, key
    (kept,) = cheap_all
    assert not set(kept) & set(expected) and set(CAMS[:5]) <= set(kept)
