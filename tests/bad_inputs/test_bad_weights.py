"""Bad weights files (issue #20): integer tensors, garbage, raw pickles and files of another network are refused
with whole sentences (never cut mid-word, never a long echo), through the library, the CLI and the form."""
from __future__ import annotations

import io
import pickle
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card  # noqa: E402

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli  # noqa: E402
from iba_core.app.models import FileGiven, NewNetwork, add_network  # noqa: E402
from iba_core.networks import (ModelCardError, WeightsMismatchError, WeightsUnavailableError,  # noqa: E402
                               load_network)
from iba_core.trust import Trust, shown  # noqa: E402


def card_with(tmp_path: Path, weights: str, classes: list[str] = CLASSES) -> Path:
    (tmp_path / "classes.txt").write_text("\n".join(classes))
    return write_card(tmp_path, weights=weights)


def test_integer_safetensors_are_refused_not_loaded_as_garbage(tmp_path) -> None:
    state = {k: v.to(torch.int32) for k, v in make_resnet18().state_dict().items()}
    save_file(state, str(tmp_path / "fruit.safetensors"))
    card = card_with(tmp_path, "fruit.safetensors")
    with pytest.raises(WeightsMismatchError, match="int32") as err:
        load_network(card)
    assert "floating-point" in str(err.value) and "conv1.weight int32" in str(err.value)
    assert_one_sentence(str(err.value))
    assert "int32" in cli_error(run_cli(["stats", "--model", card, "--n", "1"]))
    # A built-in network given the same kind of file.
    small = {"features.0.weight": torch.zeros(2, 2, dtype=torch.int32)}
    save_file(small, str(tmp_path / "lite.safetensors"))
    with pytest.raises(WeightsMismatchError, match="int32"):
        load_network("efficientnet_lite0", weights=tmp_path / "lite.safetensors")
    # Float64 weights fit (they are cast to the model's float32).
    save_file({k: v.double() if v.is_floating_point() else v for k, v in make_resnet18().state_dict().items()},
              str(tmp_path / "double.safetensors"))
    assert load_network(card_with(tmp_path, "double.safetensors")).categories == CLASSES


@pytest.mark.parametrize("name, data", [
    ("garbage.pth", b"\x00\x01 not a checkpoint at all " * 40),
    ("raw.pkl.pth", pickle.dumps({"weights": [1.0, 2.0], "note": "x" * 300})),
    ("garbage.safetensors", b"\xff" * 64),
], ids=["garbage", "raw pickle", "garbage safetensors"])
def test_unreadable_files_get_whole_sentences(name, data, tmp_path) -> None:
    (tmp_path / name).write_bytes(data)
    card = card_with(tmp_path, name)
    with pytest.raises((WeightsUnavailableError, WeightsMismatchError, ValueError)) as err:
        load_network(card)
    message = str(err.value)
    assert_one_sentence(message)
    assert "x" * 50 not in message and "`w" not in message
    assert_one_sentence(cli_error(run_cli(["stats", "--model", card, "--n", "1"])))


def test_an_output_layer_of_the_right_size_is_not_blamed_on_the_class_list(tmp_path) -> None:
    state = make_resnet18(3).state_dict()
    state["fc.weight"] = torch.zeros(3, 100)  # as many outputs as names; other inputs (another network)
    torch.save(state, tmp_path / "fruit.pth")
    with pytest.raises(WeightsMismatchError) as err:
        load_network(card_with(tmp_path, "fruit.pth", CLASSES[:3]))
    message = str(err.value)
    assert "class list" not in message and "fc.weight: file [3, 100], model [3, 512]" in message
    # When the outputs do differ, the class list is named with both numbers.
    torch.save(make_resnet18(7).state_dict(), tmp_path / "seven.pth")
    with pytest.raises(WeightsMismatchError, match="class list has 3 names but the weights' output layer has 7"):
        load_network(card_with(tmp_path, "seven.pth", CLASSES[:3]))


def test_the_form_does_not_echo_a_long_file_name(tmp_path) -> None:
    long_name = "w" * 5000 + ".pth"
    new = NewNetwork(name="long", arch="resnet18", weights=FileGiven.upload(long_name, b"not weights"),
                     classes=FileGiven.upload("classes.txt", "\n".join(CLASSES).encode()))
    with pytest.raises(WeightsUnavailableError) as err:
        add_network(new, tmp_path / "models", trust=Trust.for_app())
    message = str(err.value)
    assert "w" * 100 not in message and ".adding-" not in message
    assert_one_sentence(message)
    assert not (tmp_path / "models" / "long").exists()


# ---- long titles ---------------------------------------------------------------------------------------

LONG_TITLE = "T" * 5000


def assert_single_sentence(text: str) -> None:
    """`assert_one_sentence`, and no second sentence inside (". The weights …")."""
    assert_one_sentence(text)
    assert not re.search(r"[.!?]\s+[A-Z]", text), f"more than one sentence: {text!r}"


def test_a_long_title_is_refused_by_the_form(tmp_path) -> None:
    buf = io.BytesIO()
    torch.save(make_resnet18().state_dict(), buf)
    new = NewNetwork(name="titled", arch="resnet18", weights=FileGiven.upload("m.pth", buf.getvalue()),
                     classes=FileGiven.upload("classes.txt", "\n".join(CLASSES).encode()), title=LONG_TITLE)
    with pytest.raises(ModelCardError, match="title of at most 80 characters") as err:
        add_network(new, tmp_path / "models", trust=Trust.for_app())
    message = str(err.value)
    assert "T" * 100 not in message and len(message) < 400
    assert_single_sentence(message)
    assert not (tmp_path / "models" / "titled").exists()
    # 80 characters are fine.
    new.title = "T" * 80
    card = add_network(new, tmp_path / "models", trust=Trust.for_app())
    assert load_network(card).spec.title == "T" * 80


def test_a_card_with_a_long_title_gets_short_one_sentence_messages(tmp_path) -> None:
    torch.save(make_resnet18(7).state_dict(), tmp_path / "seven.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES[:3]))
    card = write_card(tmp_path, weights="seven.pth", extra=f'title = "{LONG_TITLE}"\n')
    with pytest.raises(WeightsMismatchError) as err:
        load_network(card)
    message = str(err.value)
    assert "class list has 3 names but the weights' output layer has 7 outputs, so the weights do not fit" in message
    assert "T" * 100 not in message and len(message) < 400
    assert_single_sentence(message)
    cli = cli_error(run_cli(["models", "--model", card]))
    assert "T" * 100 not in cli and len(cli) < 400
    # Integer weights name the title too.
    save_file({k: v.to(torch.int32) for k, v in make_resnet18(3).state_dict().items()},
              str(tmp_path / "int.safetensors"))
    card = write_card(tmp_path, name="ints", weights="int.safetensors", extra=f'title = "{LONG_TITLE}"\n')
    with pytest.raises(WeightsMismatchError, match="int32") as err:
        load_network(card)
    assert "T" * 100 not in str(err.value) and len(str(err.value)) < 400
    assert_single_sentence(str(err.value))


# ---- the "Add your network" form in the app -------------------------------------------------------------


def test_the_form_refuses_integer_safetensors_and_keeps_the_chosen_network(tmp_path, monkeypatch,
                                                                          open_page) -> None:
    from safetensors.torch import save

    models = tmp_path / "models"
    make_card_folder(models / "fruit")
    fruit = str((models / "fruit" / "fruit.toml").resolve())
    monkeypatch.setenv("IBA_MODELS_DIR", str(models))
    at = open_page("per_sample")
    at = at.selectbox(key="network").set_value(fruit).run()
    assert page_errors(at) == []
    listing = sorted(str(p.relative_to(models)) for p in models.rglob("*"))

    data = save({k: v.to(torch.int32) for k, v in make_resnet18().state_dict().items()})
    at.text_input(key="add_name").input("ints")
    at.selectbox(key="add_arch").set_value("resnet18")
    at.file_uploader(key="add_weights").set_value(("ints.safetensors", data, "application/octet-stream"))
    at.file_uploader(key="add_classes").set_value(("classes.txt", "\n".join(CLASSES).encode(), "text/plain"))
    at = at.button(key="add_network_button").click().run()
    errors = page_errors(at)
    assert len(errors) == 1 and "int32" in errors[0] and "floating-point" in errors[0], errors
    assert ".adding-" not in errors[0]
    assert_one_sentence(errors[0])
    assert sorted(str(p.relative_to(models)) for p in models.rglob("*")) == listing  # nothing written or left
    assert at.session_state["network"] == fruit and not at.success


# ---- a Hugging Face folder's own weights (issue 27.4): the sentence a --weights file gets --------------------------


def _hf_folder(tmp_path: Path, name: str = "vit") -> Path:
    from source_fixtures import save_hf_vit

    return save_hf_vit(tmp_path / name)


def _lying_header(path: Path) -> None:
    """Rewrite a safetensors file so its header claims a tensor far larger than the file holds."""
    import json
    import struct

    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + size])
    first = next(k for k in header if k != "__metadata__")
    header[first]["shape"] = [100_000, 100_000]
    header[first]["data_offsets"] = [0, 4 * 10**10]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + size:])


@pytest.mark.parametrize("damage", ["pickled bin", "lying header", "garbage header"])
def test_a_bad_hugging_face_folder_gets_the_sentence_a_weights_file_gets(damage, tmp_path) -> None:
    from transformers import ViTForImageClassification

    from iba_core.networks import UnsafeWeightsError

    folder = _hf_folder(tmp_path)
    weights = folder / "model.safetensors"
    if damage == "pickled bin":  # only the pickle: a whole module saved with torch.save(model)
        model = ViTForImageClassification.from_pretrained(folder)
        weights.unlink()
        weights = folder / "pytorch_model.bin"
        torch.save(model, weights)
        expected = UnsafeWeightsError
    elif damage == "lying header":
        _lying_header(weights)
        expected = WeightsUnavailableError
    else:
        weights.write_bytes((10).to_bytes(8, "little") + b"{not json!" + b"\0" * 64)
        expected = WeightsUnavailableError
    with pytest.raises(expected) as err:
        load_network(folder)
    folder_message = str(err.value)
    assert_one_sentence(folder_message)
    # The same sentence as the same file given as --weights to a network.
    with pytest.raises(expected) as plain:
        load_network("torchvision:resnet18", weights=weights)
    assert folder_message == str(plain.value)
    assert cli_error(run_cli(["stats", "--model", folder, "--n", "1"])).startswith(folder_message)


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/outside.safetensors", "link.safetensors"])
def test_an_index_naming_shards_outside_the_folder_is_refused(shard, tmp_path) -> None:
    import json

    from iba_core.networks import FolderError

    folder = _hf_folder(tmp_path / "in")
    outside = tmp_path / "in" / "outside.safetensors"  # beside the folder: ../outside.safetensors
    (folder / "model.safetensors").rename(outside)
    if shard == "link.safetensors":
        (folder / shard).symlink_to(outside)
    from safetensors import safe_open

    with safe_open(str(outside), "pt") as f:
        names = list(f.keys())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        n: shard for n in names}}))
    with pytest.raises(FolderError, match="outside its folder; shards must be files beside the index") as err:
        load_network(folder)
    assert_one_sentence(str(err.value))
    message = cli_error(run_cli(["stats", "--model", folder, "--n", "1"]))
    assert "outside its folder" in message


def test_an_index_of_shards_inside_the_folder_loads(tmp_path) -> None:
    import json

    from safetensors import safe_open

    folder = _hf_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    with safe_open(str(folder / "model-00001-of-00001.safetensors"), "pt") as f:
        names = list(f.keys())
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        n: "model-00001-of-00001.safetensors" for n in names}}))
    assert load_network(folder).spec.crop == 64


# ---- a folder where the weights file goes (issue #28, the walkthrough) -------------------------------------


def test_a_folder_given_as_the_weights_file_says_to_choose_the_file_inside_it(tmp_path, monkeypatch) -> None:
    chosen = tmp_path / "my-model"
    chosen.mkdir()
    torch.save(make_resnet18().state_dict(), chosen / "model.pth")
    (chosen / "notes.txt").write_text("trained on lesions")
    # The form's path field: the folder as typed, and the file it holds.
    monkeypatch.setenv("IBA_MODELS_DIR", str(tmp_path / "models"))
    new = NewNetwork(name="lesions", arch="resnet18", weights=FileGiven.local(str(chosen)),
                     classes=FileGiven.upload("classes.txt", "\n".join(CLASSES).encode()))
    with pytest.raises(WeightsUnavailableError) as err:
        add_network(new, tmp_path / "models", trust=Trust.for_app(localhost=True))
    message = str(err.value)
    assert message == f"{shown(chosen)} is a folder; choose the weights file inside it (model.pth)."  # a long tmp path is cut
    assert not (tmp_path / "models" / "lesions").exists()
    # The library and the command line, given the folder for --weights.
    with pytest.raises(WeightsUnavailableError, match=r"is a folder; choose the weights file inside it \(model\.pth\)"):
        load_network("torchvision:resnet18", weights=chosen)
    # A model card naming a folder as its weights: the card, the entry as written, and the files to choose from.
    (tmp_path / "card").mkdir()
    empty = tmp_path / "card" / "weights"
    empty.mkdir()
    card = card_with(tmp_path / "card", "weights")
    with pytest.raises(ModelCardError) as err:
        load_network(card)
    assert "names the weights file weights, which is a folder; choose the weights file inside it (a .pth, .pt, " \
           ".safetensors file)." in str(err.value)
    assert_one_sentence(str(err.value))
