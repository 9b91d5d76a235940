"""timm models by name (`timm:NAME`): weights random, from IBA_WEIGHTS_DIR or refused offline with what to place
where; preprocessing and class names from timm's configuration; blocks and stages as layers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from iba_core.cli import main
from iba_core.networks import UnknownModelError, WeightsUnavailableError, load_network
from source_fixtures import attribute_cli


def test_resnet18_random_weights_attribute_a_class_by_name(image, capsys, tmp_path):
    summary, heatmap = attribute_cli([image, "--model", "timm:resnet18", "--weights", "random", "--target", "goldfish"],
                                  capsys, tmp_path)
    assert summary["model"] == "timm:resnet18" and summary["layer"] == "layer2"  # 28×28, like conv3_4
    assert summary["target"] == 1 and summary["class_name"] == "goldfish"  # timm's ImageNet names, first lemma
    assert summary["path"] == "fx" and heatmap.shape == (224, 224)


def test_vit_tiny_random_weights_on_its_token_blocks(image, capsys, tmp_path):
    summary, heatmap = attribute_cli([image, "--model", "timm:vit_tiny_patch16_224", "--weights", "random",
                                   "--target", "tench"], capsys, tmp_path)
    assert summary["layer"] == "blocks.5" and summary["class_name"] == "tench"  # the middle of 12 blocks
    assert summary["unlocated_bits"] > 0 and heatmap.shape == (224, 224)  # the class token's bits apart
    assert summary["path"] == "fx"  # timm's optional attn_mask is baked into the trace, not a crossing value


def test_models_lists_readable_blocks_with_shapes(capsys):
    assert main(["models", "--model", "timm:convnext_atto", "--weights", "random", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    layers = {layer["name"]: layer["shape"] for layer in row["layers"]}
    assert list(layers)[:4] == ["stages.0.blocks.0", "stages.0", "stages.1.blocks.0", "stages.1"]
    assert layers["stages.1"] == [80, 28, 28] and layers["stages.3"] == [320, 7, 7] and len(layers) == 12
    assert row["default_layer"] == "stages.1" and row["classes"] == 1000 and not row["unusable"]
    # timm's pretrained configuration: crop 224, crop_pct 0.875 → resize 256, bicubic, ImageNet mean and std
    assert row["preprocess"] == {"resize": 256, "crop": 224, "mean": [0.485, 0.456, 0.406],
                                 "std": [0.229, 0.224, 0.225], "interpolation": "bicubic", "channels": 3}
    assert main(["models", "--model", "timm:vit_tiny_patch16_224", "--weights", "random"]) == 0
    text = capsys.readouterr().out
    assert "blocks.11" in text and "197×192  tokens" in text and "resize 248 (bicubic)" in text  # ⌊224 / 0.9⌋


def test_pretrained_weights_from_the_weights_folder(tmp_path, monkeypatch, offline_hub):
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(5)
    state = timm.create_model("resnet18").state_dict()
    save_file(state, tmp_path / "resnet18.a1_in1k.safetensors")  # timm's default tag for resnet18
    monkeypatch.setenv("IBA_WEIGHTS_DIR", str(tmp_path))
    net = load_network("timm:resnet18")
    assert net.weights_id == "resnet18.a1_in1k.safetensors"
    assert torch.equal(net.model.fc.weight, state["fc.weight"])


def test_pretrained_weights_from_the_hub_cache_offline(tmp_path, offline_hub):
    """timm's file downloaded before by huggingface_hub (cache layout refs/main → snapshots/<commit>/…)."""
    import os

    import timm
    from safetensors.torch import save_file

    commit = "f" * 40
    snapshot = Path(os.environ["HF_HUB_CACHE"]) / "models--timm--resnet18.a1_in1k"
    (snapshot / "snapshots" / commit).mkdir(parents=True)
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text(commit)
    torch.manual_seed(6)
    state = timm.create_model("resnet18").state_dict()
    save_file(state, snapshot / "snapshots" / commit / "model.safetensors")
    net = load_network("timm:resnet18")
    assert net.weights_id == "resnet18.a1_in1k" and torch.equal(net.model.fc.bias, state["fc.bias"])


def test_pretrained_weights_offline_say_what_to_place_where(offline_hub, image, capsys):
    with pytest.raises(WeightsUnavailableError) as err:
        load_network("timm:resnet18")
    message = str(err.value)
    assert "not in the Hugging Face cache" in message and "HF_HUB_OFFLINE is set" in message
    assert "hf download timm/resnet18.a1_in1k" in message
    assert "IBA_WEIGHTS_DIR as resnet18.a1_in1k.safetensors" in message
    # on the command line: one line, with the flags that help
    assert main(["attribute", image, "--model", "timm:resnet18"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("error:") and len(line.splitlines()) == 1
    assert "--weights random" in line and "hf download" in line


def test_unknown_timm_names_get_the_closest_ones(capsys):
    with pytest.raises(UnknownModelError, match="the closest are resnet18"):
        load_network("timm:resnet18x", weights="random")
    with pytest.raises(SystemExit):
        main(["models", "--model", "timm:convnext_atom"])
    assert "timm has no model 'convnext_atom'; the closest are convnext_atto" in capsys.readouterr().err
    with pytest.raises(UnknownModelError, match="its tags are"):
        load_network("timm:resnet18.no_such_tag", weights="random")


def test_an_unknown_layer_names_the_closest_blocks():
    net = load_network("timm:vit_tiny_patch16_224", weights="random")
    with pytest.raises(UnknownModelError) as err:
        net.spec.check_layer("blocks.13")
    assert "choose one of: blocks.0, blocks.1" in str(err.value)  # 12 blocks: all listed
    net = load_network("timm:resnet50", weights="random")
    assert len(net.spec.layers) == 17  # stem, 16 blocks with each stage's last under the stage's name
    many = net.spec.layers + tuple(f"extra.{i}" for i in range(10))
    from iba_core.networks.spec import unknown_layer_error

    message = str(unknown_layer_error("ResNet-50", "layer3.9", many))
    assert "the closest are layer3.4, layer3.3" in message and "(of 27 layers)" in message
    assert "extra.5" not in message and "conv1" not in message


def test_input_channels_see_through_a_space_to_depth_stem():
    """TResNet folds each 4 × 4 pixel block into channels before its first convolution (48 = 3 · 16 inputs): the
    network takes 3 (or in_chans) image channels, not 48 (its folder failed to load with a convolution error)."""
    import timm

    from iba_core.networks.timm_models import input_channels

    assert input_channels(timm.create_model("tresnet_m", num_classes=3)) == 3
    assert input_channels(timm.create_model("tresnet_m", num_classes=3, in_chans=1)) == 1
    assert input_channels(timm.create_model("resnet18", num_classes=3, in_chans=1)) == 1
