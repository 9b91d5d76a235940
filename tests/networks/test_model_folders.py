"""Local model folders given as a path: timm's layout (save_for_hf) and transformers' (save_pretrained) recognised
by their config.json; a folder that is neither, or one without weights or with absurd sizes, is one sentence."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from iba_core.cli import main
from iba_core.networks import FolderError, load_network
from iba_core.networks.model_folders import read_folder
from source_fixtures import FRUIT, edit_config, save_hf_vit, save_timm_folder


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    return save_timm_folder(tmp_path_factory.mktemp("folders") / "fruit-resnet")


def test_both_layouts_are_recognised(timm_folder, tmp_path):
    assert read_folder(timm_folder)[1] == "timm"
    assert read_folder(save_hf_vit(tmp_path / "vit"))[1] == "transformers"


def test_timm_folder_attributes_a_class_by_name(timm_folder, image, capsys, tmp_path):
    out = tmp_path / "heatmap.npy"
    code = main(["attribute", image, "--model", str(timm_folder), "--target", "elderberry", "--steps", "2", "--n", "8",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["model"] == "folder:fruit-resnet" and summary["class_name"] == "elderberry"
    assert summary["layer"] == "layer2" and summary["path"] == "fx"
    heatmap = np.load(out)
    assert heatmap.shape == (224, 224) and np.isfinite(heatmap).all() and heatmap.std() > 0


def test_timm_folder_config_gives_classes_preprocessing_and_blocks(timm_folder, capsys):
    assert main(["models", "--model", str(timm_folder), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert [layer["name"] for layer in row["layers"]] == [
        "act1", "layer1.0", "layer1", "layer2.0", "layer2", "layer3.0", "layer3", "layer4.0", "layer4"]
    assert row["classes"] == 5 and row["cam_layer"] == "layer4" and row["weights"] != "random"
    # resnet18.a1_in1k's configuration, saved with the weights: crop 224 at crop_pct 0.95 (resize 235), bicubic
    assert (row["preprocess"]["resize"], row["preprocess"]["interpolation"]) == (235, "bicubic")
    net = load_network(timm_folder)
    assert net.categories == FRUIT and net.class_name(3) == "date"


def test_a_folder_that_is_neither_layout(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FolderError, match="holds no config.json, so it is no model folder; a model folder is timm's"):
        load_network(tmp_path / "empty")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"hidden": 3}')
    with pytest.raises(FolderError, match="names neither a timm architecture nor a transformers model_type"):
        load_network(tmp_path / "other")
    with pytest.raises(SystemExit) as exit_:  # the command line refuses it while reading its arguments
        main(["models", "--model", str(tmp_path / "other")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "save_for_hf" in err and "save_pretrained" in err


def test_a_folder_without_weights_or_with_absurd_sizes(timm_folder, tmp_path):
    import shutil

    folder = tmp_path / "no-weights"
    shutil.copytree(timm_folder, folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FolderError, match="has no model.safetensors .* save_for_hf"):
        load_network(folder)
    assert load_network(folder, weights="random").weights_id == "random"  # the structure still loads
    edit_config(folder, model_args={"img_size": 10 ** 9})
    with pytest.raises(FolderError, match=r"config.json.model_args.img_size must be a number from"):
        load_network(folder, weights="random")
    hf = save_hf_vit(tmp_path / "huge-vit")
    edit_config(hf, image_size=10 ** 8)
    with pytest.raises(FolderError, match="config.json.image_size must be a number from"):
        load_network(hf)


def test_networks_that_do_not_take_rgb_load_with_their_channels(tmp_path):
    """A gray timm folder and a 4-band transformers folder (issue #21: tests/networks/test_channels.py runs them)."""
    import torch

    from iba_core.errors import UserError

    save_timm_folder(tmp_path / "gray", in_chans=1)
    gray = load_network(tmp_path / "gray")
    assert gray.spec.channels == 1 and len(gray.spec.mean) == 1
    hf = save_hf_vit(tmp_path / "bands")
    edit_config(hf, num_channels=4)
    bands = load_network(hf, weights="random")  # (the saved weights are the 3-channel ViT's)
    assert bands.spec.channels == 4 and bands.spec.mean == (0.5,) * 4  # the processor's 0.5, for every band
    assert bands.top_k(torch.zeros(1, 4, 64, 64), 1)[0][0] in range(5)
    edit_config(hf, num_channels=0)
    with pytest.raises(UserError, match="names num_channels = 0; an image has from 1 to 64 channels"):
        load_network(hf, weights="random")


def test_timm_and_transformers_are_imported_only_for_their_models():
    """Importing iba_core (every module the app's pages use) and loading a built-in network import neither timm nor
    transformers (seconds each)."""
    code = ("import sys, pkgutil, importlib, iba_core, iba_core.networks, iba_core.cli, iba_core.app\n"
            "for m in pkgutil.iter_modules(iba_core.app.__path__): importlib.import_module('iba_core.app.' + m.name)\n"
            "from iba_core.networks import load_network\n"
            "load_network('efficientnet_lite0')\n"
            "print(sorted(m for m in ('timm', 'transformers', 'huggingface_hub') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_card_names_a_model_folder_beside_it(timm_folder, tmp_path):
    """`model_folder = "dir"` (how the app's form writes a folder it was given): the folder's network under the card's
    name, title, layer, classes and preprocessing; the folder stays inside the card's folder like every card path."""
    import shutil

    import torch

    from iba_core.networks import ModelCardError, read_card
    from iba_core.networks.card_format import write_card
    from iba_core.trust import NotTrustedError

    shutil.copytree(timm_folder, tmp_path / "card" / "model")
    (tmp_path / "card" / "names.txt").write_text("\n".join(name.upper() for name in FRUIT))
    card = write_card(tmp_path / "card" / "mine.toml", model_folder="model", classes="names.txt", title="Mine",
                      layer="layer3", preprocess={"crop": 64, "resize": 72})
    assert card.model_folder == (tmp_path / "card" / "model").resolve() and card.arch is None
    net, folder_net = load_network(card.path), load_network(timm_folder)
    assert net.key == "card:mine" and net.spec.title == "Mine" and net.spec.default_layer == "layer3"
    assert net.categories == [name.upper() for name in FRUIT] and (net.spec.crop, net.spec.resize) == (64, 72)
    assert net.spec.interpolation == folder_net.spec.interpolation == "bicubic"  # the folder's configuration
    assert net.weights_id == folder_net.weights_id
    x = torch.linspace(-1, 1, 3 * 64 * 64).reshape(1, 3, 64, 64)
    torch.testing.assert_close(net.model(x), folder_net.model(x), rtol=1e-4, atol=1e-5)

    (tmp_path / "card" / "names.txt").write_text("\n".join(FRUIT[:4]))
    with pytest.raises(ModelCardError, match="has 4 names but the model folder's network has 5 outputs"):
        load_network(card.path)
    (tmp_path / "card" / "both.toml").write_text('model_folder = "model"\narch = "timm:resnet18"\n')
    with pytest.raises(ModelCardError, match="brings its own architecture and weights, so it takes no arch"):
        read_card(tmp_path / "card" / "both.toml")
    shutil.copytree(timm_folder, tmp_path / "elsewhere")
    (tmp_path / "card" / "out.toml").write_text('model_folder = "../elsewhere"\n')
    with pytest.raises(NotTrustedError, match="model_folder path ../elsewhere leads outside the model card's folder"):
        load_network(tmp_path / "card" / "out.toml")
    (tmp_path / "card" / "gone.toml").write_text('model_folder = "gone"\n')
    with pytest.raises(ModelCardError, match="names the model_folder folder gone, which does not exist"):
        read_card(tmp_path / "card" / "gone.toml")
