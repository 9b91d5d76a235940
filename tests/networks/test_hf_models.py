"""Hugging Face image classifiers: folders save_pretrained wrote (tiny random ViT and ConvNeXt), class names and
preprocessing from their configs, blocks as layers, token layers through the hook path; hub ids offline, code that
came with a model and checkpoints without a head refused with one sentence."""
from __future__ import annotations

import json

import numpy as np
import torch
import pytest

from iba_core.cli import main
from iba_core.networks import HubUnavailableError, UnknownModelError, WeightsMismatchError, load_network
from iba_core.trust import NotTrustedError, Trust
from source_fixtures import FRUIT, attribute_cli, edit_config, save_hf_convnext, save_hf_vit, tiny_vit_config


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    return save_hf_vit(tmp_path_factory.mktemp("hf") / "fruit-vit")


@pytest.fixture(scope="module")
def convnext(tmp_path_factory):
    return save_hf_convnext(tmp_path_factory.mktemp("hf") / "tiny-convnext")


def test_vit_folder_attributes_a_class_by_name_on_its_tokens(vit, image, capsys, tmp_path):
    summary, heatmap = attribute_cli([image, "--model", str(vit), "--target", "cherry"], capsys, tmp_path)
    assert summary["model"] == "folder:fruit-vit" and summary["class_name"] == "cherry" and summary["target"] == 2
    assert summary["layer"] == "vit.layers.0"  # the middle block of 2
    assert heatmap.shape == (64, 64)  # the processor's 64 × 64
    assert summary["unlocated_bits"] > 0  # the class token's bits, apart from the 4 × 4 patch grid
    assert summary["path"] == "hook"  # transformers' ViT does not trace with torch.fx


def test_vit_folder_layers_and_preprocessing(vit):
    net = load_network(vit)
    assert net.spec.layers == ("vit.embeddings", "vit.layers.0", "vit.layers.1")
    assert [info.describe() for info in net.layer_table()][1] == "17×32 tokens (4×4 grid + class token, 32 channels)"
    assert (net.spec.resize, net.spec.crop, net.spec.mean, net.spec.std) == (64, 64, (0.5,) * 3, (0.5,) * 3)
    assert net.categories == FRUIT and net.weights_id != "random"
    assert net.model(net.preprocess.normalise(net.preprocess.crop(_gray()))).shape == (1, 5)  # logits, a tensor


def _gray():
    from PIL import Image

    return Image.new("RGB", (80, 64), (120, 120, 120))


def test_convnext_folder_generic_labels_and_stages(convnext, image, capsys, tmp_path):
    summary, _ = attribute_cli([image, "--model", str(convnext), "--target", "2", "--layer",
                             "convnext.encoder.stages.1"], capsys, tmp_path)
    assert summary["class_name"] == "class 2"  # transformers calls it LABEL_2, which says nothing
    assert summary["path"] == "hook"  # the embeddings check the channel count in Python: no fx trace past them
    assert main(["models", "--model", str(convnext), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    names = [layer["name"] for layer in row["layers"]]
    assert names == ["convnext.embeddings", "convnext.encoder.stages.0", "convnext.encoder.stages.1",
                     "convnext.encoder.stages.2.layers.0", "convnext.encoder.stages.2", "convnext.encoder.stages.3"]
    assert row["cam_layer"] == "convnext.encoder.stages.3" and row["classes"] == 3
    # ConvNeXt's processor: shortest edge 64 below 384 → resize ⌊64 / 0.875⌋ = 73, crop 64, bicubic
    assert row["preprocess"]["resize"] == 73 and row["preprocess"]["crop"] == 64
    assert row["preprocess"]["interpolation"] == "bicubic"


def test_swin_blocks_return_tuples_and_still_hold_the_bottleneck(tmp_path, image, capsys):
    """transformers' Swin blocks return (hidden states, attention weights): the layer is the hidden states, read
    and replaced through the hook path; without preprocessor_config.json the config's image_size is the crop."""
    import torch
    from transformers import SwinConfig, SwinForImageClassification

    torch.manual_seed(1)
    config = SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[2, 1], num_heads=[1, 2], window_size=4,
                        id2label=dict(enumerate(FRUIT)), label2id={n: i for i, n in enumerate(FRUIT)})
    SwinForImageClassification(config).save_pretrained(tmp_path / "swin")
    net = load_network(tmp_path / "swin")
    assert net.spec.layers == ("swin.embeddings", "swin.encoder.layers.0.blocks.0", "swin.encoder.layers.0.blocks.1",
                               "swin.encoder.layers.0", "swin.encoder.layers.1")
    assert (net.spec.crop, net.spec.resize) == (64, 73)
    summary, heatmap = attribute_cli([image, "--model", str(tmp_path / "swin"), "--target", "banana",
                                   "--layer", "swin.encoder.layers.0.blocks.1"], capsys, tmp_path)
    assert summary["path"] == "hook" and summary["class_name"] == "banana" and heatmap.shape == (64, 64)


def test_random_and_file_weights_for_a_folder(vit, tmp_path):
    from safetensors.torch import save_file

    random = load_network(vit, weights="random")
    assert random.weights_id == "random" and random.categories == FRUIT
    trained = load_network(vit)
    save_file(trained.model.state_dict(), tmp_path / "again.safetensors")  # transformers' own key names
    again = load_network(vit, weights=tmp_path / "again.safetensors")
    x = trained.preprocess(_gray())
    assert np.allclose(again.model(x).numpy(), trained.model(x).numpy(), atol=1e-6)
    assert not np.allclose(random.model(x).numpy(), trained.model(x).numpy(), atol=1e-6)


def test_hub_id_offline_says_what_to_download(offline_hub, image, capsys):
    with pytest.raises(HubUnavailableError) as err:
        load_network("hf:google/vit-base-patch16-224")
    message = str(err.value)
    assert "hf:google/vit-base-patch16-224 is not in the Hugging Face cache" in message
    assert "hf download google/vit-base-patch16-224" in message and "save_pretrained" in message
    assert main(["attribute", image, "--model", "hf:google/vit-base-patch16-224"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("error:") and len(line.splitlines()) == 1 and "--model the folder's path" in line


def test_hub_id_from_the_cache_offline(vit, offline_hub, tmp_path, monkeypatch):
    """A model huggingface_hub downloaded before (its cache layout: refs/main → snapshots/<commit>/files) loads
    offline, keyed by its id, its weights id naming the commit."""
    import os
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--someone--fruit-vit"
    shutil.copytree(vit, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    net = load_network("hf:someone/fruit-vit")
    assert net.key == "hf:someone/fruit-vit" and net.weights_id == "fruit-vit@0123456789ab"
    assert net.categories == FRUIT and net.spec.default_layer == "vit.layers.0"
    folder = load_network(vit)
    x = net.preprocess(_gray())
    assert np.allclose(net.model(x).numpy(), folder.model(x).numpy(), atol=1e-6)


def test_bad_hub_ids_are_refused_before_anything_loads(capsys):
    with pytest.raises(UnknownModelError, match="not a Hugging Face model id"):
        load_network("hf:../../etc")
    with pytest.raises(SystemExit):
        main(["models", "--model", "hf:a b"])
    assert "give hf:ORG/NAME" in capsys.readouterr().err


def test_code_that_came_with_a_model_runs_only_when_allowed(vit, tmp_path, image, capsys, monkeypatch):
    import shutil

    folder = tmp_path / "with-code"
    shutil.copytree(vit, folder)
    edit_config(folder, auto_map={"AutoModelForImageClassification": "modeling_x.XForImageClassification"})
    with pytest.raises(NotTrustedError) as err:
        load_network(folder)
    assert "comes with its own modelling code" in str(err.value) and "runs only when allowed" in str(err.value)
    assert main(["attribute", image, "--model", str(folder)]) == 1
    line = capsys.readouterr().err
    assert "--trust-code" in line and "a model whose code you trust" in line
    # a hub id is refused on its config.json, before its weights (or its code) are fetched
    from iba_core.networks import hub

    fetched = []

    def cached(repo, filename, **_):
        fetched.append(filename)
        return folder / filename

    monkeypatch.setattr(hub, "hub_file", cached)
    monkeypatch.setattr(hub, "hub_offline", lambda: True)
    with pytest.raises(NotTrustedError):
        load_network("hf:someone/with-code", trust=Trust.local(code=False))
    assert fetched == ["config.json"]


def test_a_checkpoint_without_a_trained_head_is_refused(tmp_path):
    import torch
    from transformers import ViTModel

    torch.manual_seed(0)
    ViTModel(tiny_vit_config()).save_pretrained(tmp_path / "backbone")  # no classifier in the weights
    with pytest.raises(WeightsMismatchError, match="without a trained classification head"):
        load_network(tmp_path / "backbone")


def test_a_card_with_a_hub_architecture_and_its_own_head(vit, tmp_path, monkeypatch):
    """arch = "hf:ORG/NAME": the architecture (config, processor) from the hub's cache, the card's classes and
    weights."""
    from safetensors.torch import save_file

    from iba_core.networks import hub

    monkeypatch.setattr(hub, "hub_file", lambda repo, filename, **_: (vit / filename) if (vit / filename).is_file()
                        else None)
    monkeypatch.setattr(hub, "hub_offline", lambda: True)
    from transformers import ViTForImageClassification

    import torch

    torch.manual_seed(7)
    model = ViTForImageClassification(tiny_vit_config(["cat", "dog"]))
    save_file(model.state_dict(), tmp_path / "pets.safetensors")
    (tmp_path / "pets.txt").write_text("cat\ndog\n")
    card = tmp_path / "pets.toml"
    card.write_text('arch = "hf:someone/fruit-vit"\nweights = "pets.safetensors"\nclasses = "pets.txt"\n'
                    '[preprocess]\ninterpolation = "bicubic"\n')
    net = load_network(card)
    assert net.categories == ["cat", "dog"] and net.spec.layers[1:] == ("vit.layers.0", "vit.layers.1")
    assert net.spec.crop == 64 and net.spec.interpolation == "bicubic"  # the processor's size, the card's filter
    x = net.preprocess(_gray())
    model.eval()
    assert torch.allclose(net.model(x), model(pixel_values=x).logits, atol=1e-5)


def test_a_classifier_that_reads_no_pixels_is_refused_in_one_sentence(tmp_path):
    """ImageGPT's classifier reads the colour-cluster ids its processor makes (input_ids), not pixels: loading its
    folder says so, where the layer search's dry pass used to fail inside transformers (an internal error)."""
    from transformers import ImageGPTConfig, ImageGPTForImageClassification

    from iba_core.errors import UserError

    torch.manual_seed(1)
    config = ImageGPTConfig(vocab_size=17, n_positions=64, n_embd=16, n_layer=1, n_head=2, num_labels=2)
    ImageGPTForImageClassification(config).save_pretrained(tmp_path / "igpt")
    with pytest.raises(UserError, match=r"reads input_ids, not an image's pixel values") as caught:
        load_network(str(tmp_path / "igpt"))
    assert "\n" not in str(caught.value) and str(caught.value).endswith(".")


def test_weights_that_do_not_fit_their_config_are_refused_in_one_sentence(vit, tmp_path):
    """A folder whose config.json names 2 classes over a 5-class head: transformers raises a RuntimeError (its
    mismatch report), which was an internal error; now one sentence says the weights do not fit the config."""
    import shutil

    from iba_core.errors import UserError

    folder = tmp_path / "mismatch"
    shutil.copytree(vit, folder)
    edit_config(folder, id2label={"0": "apple", "1": "banana"}, label2id={"apple": 0, "banana": 1})
    with pytest.raises(UserError, match=r"its weights do not fit the model its config.json describes") as caught:
        load_network(str(folder))
    assert "\n" not in str(caught.value) and str(caught.value).endswith(".")


def test_a_head_of_other_width_than_the_class_list_is_refused_in_one_sentence(tmp_path):
    """PvT's config keeps its own num_labels (1000) beside an id2label of 5 names: the folder loads with a 1000-class
    head whose scores the names cannot label. Loading says so, instead of 'class index 579 is out of range' on
    every later request."""
    from transformers import PvtConfig, PvtForImageClassification, ViTImageProcessor

    from iba_core.errors import UserError

    torch.manual_seed(1)
    config = PvtConfig(image_size=32, num_encoder_blocks=2, depths=[1, 1], sequence_reduction_ratios=[2, 1],
                       hidden_sizes=[8, 16], patch_sizes=[4, 2], strides=[4, 2], num_attention_heads=[1, 1],
                       mlp_ratios=[2, 2], id2label=dict(enumerate("abcde")))
    PvtForImageClassification(config).save_pretrained(tmp_path / "pvt")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "pvt")
    with pytest.raises(UserError, match=r"gives 1000 class scores per image, but its config.json names 5") as caught:
        load_network(str(tmp_path / "pvt"))
    assert "\n" not in str(caught.value) and str(caught.value).endswith(".")


def test_a_classifier_class_that_answers_without_scores_is_refused_in_one_sentence():
    """A class transformers registers as an image classifier whose forward returns features only (PP-LCNet's in
    transformers 5.24): one sentence, not an AttributeError."""
    from torch import nn

    from iba_core.errors import UserError
    from iba_core.networks.hf_models import logits_only
    from transformers.modeling_outputs import BaseModelOutputWithNoAttention

    class FeaturesOnly(nn.Module):
        def forward(self, pixel_values):
            return BaseModelOutputWithNoAttention(last_hidden_state=pixel_values)

    with pytest.raises(UserError, match="holds no class scores"):
        logits_only(FeaturesOnly())(torch.zeros(1, 3, 4, 4))
