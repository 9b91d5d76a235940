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
from source_fixtures import FRUIT, edit_config, save_hf_vit, save_timm_folder, write_image


@pytest.fixture(scope="module")
def timm_folder(tmp_path_factory):
    return save_timm_folder(tmp_path_factory.mktemp("folders") / "fruit-resnet")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return str(write_image(tmp_path_factory.mktemp("folder-image") / "img.png"))


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


def test_networks_that_do_not_take_rgb_are_refused_with_one_sentence(tmp_path):
    from iba_core.errors import UserError

    save_timm_folder(tmp_path / "gray", in_chans=1)
    with pytest.raises(UserError, match="takes 1-channel images; only RGB"):
        load_network(tmp_path / "gray")
    hf = save_hf_vit(tmp_path / "bands")
    edit_config(hf, num_channels=4)
    with pytest.raises(UserError, match="takes 4-channel images; only RGB"):
        load_network(hf)


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
