"""Bad weights files (issue #20): integer tensors, garbage, raw pickles and files of another network are refused
with whole sentences (never cut mid-word, never a long echo), through the library, the CLI and the form."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, make_resnet18, write_card  # noqa: E402

from bad_input_helpers import assert_one_sentence, cli_error, run_cli  # noqa: E402
from iba_core.app.models import FileGiven, NewNetwork, add_network  # noqa: E402
from iba_core.networks import WeightsMismatchError, WeightsUnavailableError, load_network  # noqa: E402
from iba_core.trust import Trust  # noqa: E402


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
