"""Your network through the CLI: a model card and torchvision:NAME wherever --model is accepted."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card
from iba_core.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_card_folder(tmp_path_factory.mktemp("cli-card"))


@pytest.fixture(scope="module")
def card(folder):
    return str(folder / "fruit.toml")


@pytest.fixture(scope="module")
def image(folder):
    return str(folder / "images" / "img00.png")


def test_attribute_with_a_class_name_from_the_list(card, image, folder, tmp_path, capsys):
    out = tmp_path / "h.npy"
    code = main(["attribute", image, "--model", card, "--target", "cherry", "--steps", "2", "--n", "12",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip())
    assert summary["model"] == "card:fruit" and summary["layer"] == "layer2"
    assert summary["target"] == 2 and summary["class_name"] == "cherry"
    assert summary["stats_samples"] == 12  # from the card's stats_images (12 photos)
    assert np.load(out).shape == (224, 224)


def test_compare_saliency_and_grad_cam(card, image, tmp_path, capsys):
    code = main(["compare", image, "--model", card, "--methods", "saliency,grad_cam", "--target", "fig",
                 "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["class_name"] == "fig" and [m["key"] for m in summary["methods"]] == ["saliency", "grad_cam"]
    assert np.load(tmp_path / "grad_cam.npy").shape == (224, 224)  # on layer4, the derived CAM layer


def test_stats_from_an_image_folder(card, folder, capsys):
    code = main(["stats", "--model", card, "--images", str(folder / "images"), "--n", "12", "--layer", "layer3"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    row = json.loads(captured.out.strip())
    assert row["model"] == "card:fruit" and row["layer"] == "layer3" and row["samples"] == 12
    assert row["shape"] == [256, 14, 14] and row["weights"] != "random"


def test_models_lists_discovered_layers_with_shapes(card, capsys):
    assert main(["models", "--model", card, "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    layers = {layer["name"]: layer["shape"] for layer in row["layers"]}
    assert row["model"] == "card:fruit" and row["classes"] == 7 and row["cam_layer"] == "layer4"
    assert layers["layer2"] == [128, 28, 28] and layers["layer4"] == [512, 7, 7]
    assert main(["models", "--model", card]) == 0
    text = capsys.readouterr().out
    assert "layer2" in text and "128×28×28  (default)" in text and "(Grad-CAM)" in text
    # torchvision's ResNet calls one ReLU module several times per block: listed as unusable, with why
    assert {u["name"] for u in row["unusable"]} >= {"layer1.0.relu", "layer4.1.relu"}
    assert "layer1.0.relu" in text and "not usable: it runs 2 times" in text


def test_evaluate_degradation(card, folder, tmp_path, capsys):
    out = tmp_path / "results.jsonl"
    code = main(["evaluate", "degradation", "--model", card, "--images", str(folder / "images"), "--limit", "2",
                 "--methods", "random", "saliency", "--tile", "14", "--points", "3", "--out", str(out),
                 "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["method"] for r in records} == {"random", "saliency"}
    assert len({r["image"] for r in records}) == 2


def test_torchvision_random_weights_attribute(image, capsys):
    code = main(["attribute", image, "--model", "torchvision:resnet18", "--weights", "random", "--steps", "1",
                 "--n", "4", "--target", "2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out.strip())
    assert summary["model"] == "torchvision:resnet18" and summary["class_name"] == "great white shark"


# ---- refusals on the command line: one line on stderr, exit status 1 (or argparse's 2) --------------


def _error(argv, capsys, code=1) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1
    return err


def test_pickled_module_refused_then_trusted(tmp_path, image, capsys):
    torch.save(make_resnet18(), tmp_path / "fruit.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    card = str(write_card(tmp_path))
    err = _error(["models", "--model", card], capsys)
    assert "pickled" in err and "torch.save(model.state_dict(), path)" in err and "--trust-pickle" in err
    assert main(["models", "--model", card, "--trust-pickle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["classes"] == 7


def test_bad_cards_on_the_command_line(tmp_path, folder, image, capsys):
    (tmp_path / "bad.toml").write_text("arch = [")
    assert "is not valid TOML" in _error(["models", "--model", str(tmp_path / "bad.toml")], capsys)
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES[:6]))
    torch.save(make_resnet18().state_dict(), tmp_path / "fruit.pth")
    err = _error(["attribute", image, "--model", str(write_card(tmp_path))], capsys)
    assert "class list has 6 names but the weights' output layer has 7 outputs" in err


def test_unknown_model_and_missing_card(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["models", "--model", "bogus"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Unknown network 'bogus'" in err and "torchvision:NAME" in err and ".toml" in err
    with pytest.raises(SystemExit):
        main(["stats", "--model", str(tmp_path / "missing.toml")])
    assert "Model card not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["stats", "--model", "torchvision:fasterrcnn_resnet50_fpn"])
    assert "torchvision has no classification network" in capsys.readouterr().err


def test_empty_image_folder(card, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    err = _error(["evaluate", "degradation", "--model", card, "--images", str(empty), "--methods", "random",
                  "--out", str(tmp_path / "r.jsonl")], capsys)
    assert "No images" in err and str(empty) in err
    err = _error(["stats", "--model", card, "--images", str(empty), "--n", "4"], capsys)
    assert str(empty) in err


def test_train_readout_on_a_card_then_attribute_with_it(card, folder, image, tmp_path, capsys):
    """A card network has no stage list: the readout reads it through hooks and a traced cut."""
    out = tmp_path / "readout"
    assert main(["train-readout", "--model", str(card), "--images", str(folder / "images"), "--epochs", "1",
                 "--batch-size", "4", "--stats-n", "12", "--out", str(out), "--no-progress"]) == 0
    checkpoint = next(out.glob("readout_epoch001.pt"))
    capsys.readouterr()
    assert main(["attribute", str(image), "--model", str(card), "--method", "readout", "--readout",
                 str(checkpoint), "--target", "cherry", "--png", str(tmp_path / "map.png")]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["method"] == "readout" and result["class_name"] == "cherry"
    assert np.isfinite(result["total_bits"]) and result["total_bits"] > 0


def test_readout_refuses_token_layers_with_a_reason():
    from iba_core.networks import LOGITS, load_network
    from iba_core.readout.config import ReadoutCheckpointError
    from iba_core.readout.network import network_passes

    vit = load_network("torchvision:vit_b_16", weights="random")
    layer = vit.spec.default_layer
    with pytest.raises(ReadoutCheckpointError, match="token sequence"):
        network_passes(vit, layer, (layer, LOGITS))
