"""Networks too large for the server (issue 27.1): a Hugging Face config of 155 B parameters and timm's ViT-g/14 are
refused before anything is built, with one sentence naming the count and IBA_MAX_PARAMS, through the library, the
CLI and the app's "Add your network → Model folder" form."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli
from iba_core.app.models import FileGiven, NewNetwork, add_network
from iba_core.networks import load_network
from iba_core.networks.model_size import ModelTooLargeError
from iba_core.settings import DATA_DIRS_ENV, MODELS_DIR_ENV
from iba_core.trust import Trust

#: transformers' ViT at the sizes the issue names: 48 layers of 16,384 hidden and 65,536 intermediate units.
GIANT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 16384,
         "num_hidden_layers": 48, "intermediate_size": 65536, "num_attention_heads": 128, "image_size": 224,
         "patch_size": 16, "num_channels": 3, "id2label": {"0": "cat", "1": "dog"}, "label2id": {"cat": 0, "dog": 1}}
#: The refusal's limits, as a visitor's upload must be refused (issue 27.1's done-when).
MAX_SECONDS, MAX_RSS_MB = 5.0, 500


def giant_folder(root: Path) -> Path:
    """A model folder with the giant config and a tiny (wrong) model.safetensors: the size is what is refused."""
    folder = root / "giant"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(GIANT))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    return folder


def test_a_155b_config_is_refused_in_seconds_and_little_memory_as_a_visitor(tmp_path) -> None:
    folder = giant_folder(tmp_path / "data")
    script = textwrap.dedent("""
        import json, resource, sys, time
        import iba_core.networks as networks
        from iba_core.trust import Trust
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        try:
            networks.load_network(sys.argv[1], trust=Trust.for_app())
            message = None
        except Exception as err:
            message = f"{type(err).__name__}: {err}"
        seconds = time.perf_counter() - start
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # kB on Linux
        print(json.dumps({"seconds": seconds, "rss_mb": grown, "message": message}))
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), DATA_DIRS_ENV: str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["message"].startswith("ModelTooLargeError: giant (vit, Hugging Face folder) holds at least 51.5 "
                                        "billion parameters"), result
    assert "IBA_MAX_PARAMS" in result["message"]
    assert result["seconds"] < MAX_SECONDS and result["rss_mb"] < MAX_RSS_MB, result


def test_the_giant_config_is_one_sentence_in_the_library_and_the_cli(tmp_path) -> None:
    folder = giant_folder(tmp_path)
    with pytest.raises(ModelTooLargeError) as err:
        load_network(folder)
    assert_one_sentence(str(err.value))
    message = cli_error(run_cli(["stats", "--model", folder, "--n", "1"]))
    assert_one_sentence(message)
    assert "holds at least 51.5 billion parameters" in message and "set IBA_MAX_PARAMS higher" in message


def test_a_config_without_the_floors_sizes_is_counted_on_the_meta_device(tmp_path) -> None:
    """A ConvNeXt config names no intermediate_size: its 16 B parameters are counted by building it on meta."""
    folder = tmp_path / "wide-convnext"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "convnext", "hidden_sizes": [4096] * 4, "depths": [30] * 4, "num_labels": 2}))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    with pytest.raises(ModelTooLargeError, match=r"holds 16.\d billion parameters, more than the 700 million"):
        load_network(folder)


def test_the_form_refuses_the_uploaded_giant_folder(tmp_path, monkeypatch) -> None:
    folder = giant_folder(tmp_path / "upload")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    files = [FileGiven.upload(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]
    new = NewNetwork(name="my-giant", source="folder", arch="", weights=None, classes=None, folder_files=files)
    with pytest.raises(ModelTooLargeError) as err:
        add_network(new, tmp_path / "models", Trust.for_app())
    # Named as the user named it in the form, not by the folder the form copies the files into ("model").
    assert str(err.value).startswith("my-giant (vit, Hugging Face folder) holds at least 51.5 billion parameters")
    assert not (tmp_path / "models" / "my-giant").exists()


def test_the_app_says_one_sentence_for_the_giant_folder(open_page, tmp_path) -> None:
    folder = giant_folder(tmp_path)
    at = open_page("per_sample")
    at.radio(key="add_source").set_value("folder")
    at = at.run()
    at.text_input(key="add_name").input("giant")
    at.file_uploader(key="add_folder_files").set_value(
        [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(folder.iterdir())])
    at = at.button(key="add_check_button").click().run()
    errors = page_errors(at)
    assert len(errors) == 1 and "holds at least 51.5 billion parameters" in errors[0], errors
    assert "IBA_MAX_PARAMS" in errors[0]
    assert_one_sentence(errors[0])


def test_the_giant_timm_name_is_refused_before_it_is_built(monkeypatch, build_devices) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    devices = build_devices(nn.Linear)
    with pytest.raises(ModelTooLargeError) as err:
        load_network("timm:vit_giant_patch14_224")
    # named as typed (the key), not by timm's bare name
    assert str(err.value).startswith("timm:vit_giant_patch14_224 holds 1.01 billion parameters, more than the 700 "
                                     "million")
    assert devices and set(devices) == {"meta"}  # built on the meta device only: nothing allocated
    message = cli_error(run_cli(["stats", "--model", "timm:vit_giant_patch14_224", "--n", "1"]))
    assert_one_sentence(message)
    assert "1.01 billion parameters" in message
