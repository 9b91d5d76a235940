"""Model cards whose arch is a built-in backbone (`efficientnet_lite0`, `resnet50`, `vgg16`) with the card's own head,
or a timm model: the built-in's paper layer names, preprocessing and stage list; timm's configuration and blocks."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from iba_core.cli import main
from iba_core.networks import REGISTRY, ModelCardError, UnknownModelError, WeightsMismatchError, load_network
from source_fixtures import FRUIT, write_image


def _effnet_card(folder, *, extra: str = "") -> str:
    """A 5-class EfficientNet-Lite0 (random weights, seeded) saved as safetensors, its classes and its card."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(2)
    model = REGISTRY["efficientnet_lite0"].with_classes(len(FRUIT))
    save_file(model.state_dict(), folder / "fruit.safetensors")
    (folder / "classes.txt").write_text("\n".join(FRUIT) + "\n")
    card = folder / "fruit.toml"
    card.write_text('arch = "efficientnet_lite0"\nweights = "fruit.safetensors"\nclasses = "classes.txt"\n' + extra)
    return str(card)


@pytest.fixture(scope="module")
def effnet_card(tmp_path_factory):
    return _effnet_card(tmp_path_factory.mktemp("effnet-head"))


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return str(write_image(tmp_path_factory.mktemp("card-image") / "img.png"))


def test_effnet_backbone_with_a_5_class_head_attributes_a_class_by_name(effnet_card, image, capsys, tmp_path):
    out = tmp_path / "heatmap.npy"
    code = main(["attribute", image, "--model", effnet_card, "--target", "date", "--steps", "2", "--n", "8",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["model"] == "card:fruit" and summary["class_name"] == "date" and summary["target"] == 3
    assert summary["layer"] == "block3_2" and "path" not in summary  # the built-in's default and its stage list
    heatmap = np.load(out)
    assert heatmap.shape == (224, 224) and np.isfinite(heatmap).all() and heatmap.std() > 0


def test_effnet_card_keeps_the_builtins_names_preprocessing_and_split(effnet_card, capsys):
    net = load_network(effnet_card)
    base = REGISTRY["efficientnet_lite0"]
    assert net.spec.layers == base.layers and net.can_split and net.spec.canonizers is base.canonizers
    assert (net.spec.mean, net.spec.resize, net.spec.crop) == (base.mean, base.resize, base.crop)
    assert net.categories == FRUIT and net.model._fc.out_features == 5
    assert main(["models", "--model", effnet_card]) == 0
    text = capsys.readouterr().out
    assert "block3_2" in text and "40×28×28  (default)" in text and "classes: 5" in text


def test_effnet_card_overrides_and_refusals(tmp_path):
    card = _effnet_card(tmp_path / "a",
                        extra='layer = "block4_1"\n[preprocess]\ncrop = 192\ninterpolation = "bicubic"\n')
    net = load_network(card)
    assert net.spec.default_layer == "block4_1" and net.spec.crop == 192 and net.preprocess.interpolation == "bicubic"
    card = _effnet_card(tmp_path / "b", extra='layer = "_blocks.4"\n')
    with pytest.raises(UnknownModelError, match="fruit \\(model card\\) has no layer '_blocks.4'; choose one of: stem"):
        load_network(card)
    card = _effnet_card(tmp_path / "c")
    (tmp_path / "c" / "classes.txt").write_text("\n".join(FRUIT[:4]) + "\n")
    with pytest.raises(WeightsMismatchError, match="class list has 4 names but the weights' output layer has 5"):
        load_network(card)
    (tmp_path / "d.toml").write_text('arch = "efficientnet_lite9"\n')
    with pytest.raises(ModelCardError, match="a built-in backbone \\(efficientnet_lite0, resnet50, vgg16\\)"):
        load_network(tmp_path / "d.toml")


def test_resnet50_backbone_random_head(tmp_path):
    (tmp_path / "classes.txt").write_text("yes\nno\n")
    (tmp_path / "yn.toml").write_text('arch = "resnet50"\nclasses = "classes.txt"\n')
    net = load_network(tmp_path / "yn.toml")
    assert net.spec.default_layer == "conv3_4" and net.model.fc.out_features == 2 and net.weights_id == "builder"
    x = torch.zeros(1, 3, 224, 224)
    prefix, suffix = net.split("conv3_4")
    assert torch.allclose(suffix(prefix(x)), net.model(x), atol=1e-5)


def test_timm_card_with_its_own_head(tmp_path, image, capsys):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(3)
    save_file(timm.create_model("convnext_atto", num_classes=5).state_dict(), tmp_path / "w.safetensors")
    (tmp_path / "classes.txt").write_text("\n".join(FRUIT) + "\n")
    (tmp_path / "c.toml").write_text('arch = "timm:convnext_atto"\nweights = "w.safetensors"\nclasses = "classes.txt"\n'
                                     '[preprocess]\nresize = 240\n')
    net = load_network(tmp_path / "c.toml")
    assert net.categories == FRUIT and net.spec.default_layer == "stages.1" and "stages.2.blocks.4" in net.spec.layers
    assert (net.spec.resize, net.spec.crop, net.spec.interpolation) == (240, 224, "bicubic")  # card, timm, timm
