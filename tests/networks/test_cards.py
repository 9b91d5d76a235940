"""Model cards: your architecture, weights and class list in a TOML file; safe loading and clear refusals."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card
from iba_core.networks import (ModelCardError, UnsafeWeightsError, WeightsMismatchError, WeightsUnavailableError,
                               load_network, read_class_list)
from iba_core.trust import Trust

CODE = Trust.local(code=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_card_folder(tmp_path_factory.mktemp("card"))


@pytest.fixture(scope="module")
def card_net(folder):
    return load_network(folder / "fruit.toml")


def test_card_loads_with_discovered_layers_and_class_names(folder, card_net):
    net = card_net
    assert net.key == "card:fruit" and net.categories == CLASSES
    assert "layer3" in net.spec.layers and "layer4" in net.spec.layers and not net.can_split
    assert net.spec.default_layer == "layer2"  # the last map of at least 28×28 at 224 px
    assert net.spec.cam_layer == ("layer4", False)  # the last map larger than 1×1
    assert net.spec.stats_images == str((folder / "images").resolve())
    assert len(net.weights_id) == 12 and net.weights_id != "random"
    reference = make_resnet18().eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert torch.allclose(net.model(x), reference(x), atol=1e-5)
    assert net.class_index("cherry") == 2 and net.class_name(6) == "grape"


def test_weights_id_is_per_weights_file(folder, card_net, tmp_path):
    other = tmp_path / "other.pth"
    torch.manual_seed(5)
    torch.save(make_resnet18().state_dict(), other)
    torch.manual_seed(0)
    assert load_network(folder / "fruit.toml").weights_id == card_net.weights_id  # stable
    assert load_network(folder / "fruit.toml", weights=other).weights_id != card_net.weights_id
    assert load_network(str(folder / "fruit.toml"), weights="random").weights_id == "random"


def test_card_safetensors_layer_and_preprocess(folder, tmp_path):
    from safetensors.torch import save_file

    save_file(make_resnet18().state_dict(), str(tmp_path / "w.safetensors"))
    (tmp_path / "classes.json").write_text(json.dumps({str(i): n for i, n in enumerate(CLASSES)}))
    card = write_card(tmp_path, name="sf", weights="w.safetensors", classes="classes.json",
                      extra='layer = "layer3"\n[preprocess]\nresize = 160\ncrop = 128\nmean = [0.5, 0.5, 0.5]\n'
                            'std = [0.25, 0.25, 0.25]\n')
    net = load_network(card)
    assert net.key == "card:sf" and net.categories == CLASSES and net.spec.default_layer == "layer3"
    assert (net.spec.resize, net.spec.crop, net.spec.mean) == (160, 128, (0.5, 0.5, 0.5))
    assert net.preprocess.crop_size == 128


def test_class_list_formats(tmp_path):
    (tmp_path / "a.txt").write_text("cat\n\ndog\n")
    (tmp_path / "b.json").write_text('["cat", "dog"]')
    (tmp_path / "c.csv").write_text("index,name\n1,dog\n0,cat\n")
    for name in ("a.txt", "b.json", "c.csv"):
        assert read_class_list(tmp_path / name) == ["cat", "dog"]
    (tmp_path / "gap.json").write_text('{"0": "cat", "2": "dog"}')
    with pytest.raises(ModelCardError, match="without gaps"):
        read_class_list(tmp_path / "gap.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ModelCardError, match="not valid JSON"):
        read_class_list(tmp_path / "bad.json")
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ModelCardError, match="holds no class names"):
        read_class_list(tmp_path / "empty.txt")


def test_builder_function_arch(tmp_path):
    (tmp_path / "my_fruit_arch.py").write_text(
        "import torchvision\n\ndef build(width=7):\n    return torchvision.models.resnet18(num_classes=width)\n")
    torch.save(make_resnet18().state_dict(), tmp_path / "fruit.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    card = write_card(tmp_path, name="fn", arch="my_fruit_arch:build", extra="[arch_args]\nwidth = 7\n")
    net = load_network(card, trust=CODE)
    assert net.categories == CLASSES and net.spec.resize == 256 and net.spec.mean == (0.485, 0.456, 0.406)


# ---- refusals: one clear sentence each ---------------------------------------------------------------


def test_pickled_whole_module_is_refused_unless_trusted(tmp_path):
    torch.save(make_resnet18(), tmp_path / "fruit.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    card = write_card(tmp_path)
    with pytest.raises(UnsafeWeightsError) as err:
        load_network(card)
    msg = str(err.value)
    assert "pickled" in msg and "arbitrary code" in msg and "torch.save(model.state_dict(), path)" in msg
    net = load_network(card, trust_pickle=True)
    assert net.categories == CLASSES


def test_torchscript_and_exported_program_are_refused(tmp_path):
    model = make_resnet18().eval()
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    torch.jit.save(torch.jit.script(model), tmp_path / "fruit.pth")
    with pytest.raises(UnsafeWeightsError, match="TorchScript archive.*torch.save\\(model.state_dict\\(\\), path\\)"):
        load_network(write_card(tmp_path))
    small = nn.Sequential(nn.Linear(2, 2))
    torch.export.save(torch.export.export(small, (torch.zeros(1, 2),)), tmp_path / "ep.pt2")
    with pytest.raises(UnsafeWeightsError, match="ExportedProgram archive"):
        load_network(write_card(tmp_path, weights="ep.pt2"))


def test_mismatched_keys_list_the_first_mismatches(tmp_path):
    state = make_resnet18().state_dict()
    state["extra.weight"] = torch.zeros(1)
    del state["layer1.0.conv1.weight"]
    state["layer2.0.conv1.weight"] = torch.zeros(3, 3)
    torch.save(state, tmp_path / "fruit.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    with pytest.raises(WeightsMismatchError) as err:
        load_network(write_card(tmp_path))
    msg = str(err.value)
    assert "do not fit" in msg and "3 mismatch(es)" in msg
    assert "missing key layer1.0.conv1.weight" in msg and "unexpected key extra.weight" in msg
    assert "layer2.0.conv1.weight: file [3, 3], model [128, 64, 3, 3]" in msg


def test_wrong_class_count(tmp_path):
    torch.save(make_resnet18().state_dict(), tmp_path / "fruit.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES[:6]))
    with pytest.raises(WeightsMismatchError, match="class list has 6 names but the weights' output layer has 7"):
        load_network(write_card(tmp_path))
    # a builder that fixes its own output size: checked by a dry forward pass
    (tmp_path / "seven_arch.py").write_text(
        "import torchvision\n\ndef build():\n    return torchvision.models.resnet18(num_classes=7)\n")
    with pytest.raises(ModelCardError, match="has 6 names but the network has 7 outputs"):
        load_network(write_card(tmp_path, name="fn", arch="seven_arch:build"), trust=CODE)


def test_missing_files(tmp_path):
    with pytest.raises(ModelCardError, match="Model card not found"):
        load_network(tmp_path / "nope.toml")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    with pytest.raises(ModelCardError, match="names the weights file fruit.pth, which does not exist"):
        load_network(write_card(tmp_path))
    torch.save(make_resnet18().state_dict(), tmp_path / "fruit.pth")
    with pytest.raises(ModelCardError, match="names the classes file nope.txt, which does not exist"):
        load_network(write_card(tmp_path, classes="nope.txt"))
    with pytest.raises(WeightsUnavailableError, match="Weights file not found"):
        load_network(write_card(tmp_path), weights=tmp_path / "gone.pth")
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsUnavailableError, match="Could not read the weights file .*junk.pth: it is not") as err:
        load_network(write_card(tmp_path), weights=tmp_path / "junk.pth")
    assert "\n" not in str(err.value)
    with pytest.raises(ModelCardError, match="Cannot import 'no_such_pkg.mod'.*No module named"):
        load_network(write_card(tmp_path, arch="no_such_pkg.mod:build"), trust=CODE)


def test_bad_toml(tmp_path):
    card = tmp_path / "bad.toml"
    card.write_text('arch = "torchvision:resnet18\nweights = \n')
    with pytest.raises(ModelCardError, match="is not valid TOML"):
        load_network(card)
    card.write_text('arch = "torchvision:resnet18"\nwieghts = "x.pth"\n')
    with pytest.raises(ModelCardError, match="unknown entries wieghts"):
        load_network(card)
    card.write_text('arch = "resnet18"\n')
    with pytest.raises(ModelCardError, match="arch must be"):
        load_network(card)
    card.write_text('arch = "torchvision:not_a_net"\n')
    with pytest.raises(KeyError, match="torchvision has no classification network 'not_a_net'"):
        load_network(card)


def test_card_without_arch_needs_a_trusted_whole_module(tmp_path):
    torch.save(make_resnet18(), tmp_path / "whole.pth")
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    card = tmp_path / "whole.toml"
    card.write_text('weights = "whole.pth"\nclasses = "classes.txt"\n')
    with pytest.raises(UnsafeWeightsError, match="pickled Python objects") as err:
        load_network(card)
    assert "--trust-pickle" in err.value.cli_hint
    assert load_network(card, trust_pickle=True).categories == CLASSES
    card.write_text('classes = "classes.txt"\n')
    with pytest.raises(ModelCardError, match="names no arch"):
        load_network(card)


def test_a_card_named_card_toml_takes_its_folders_name(tmp_path):
    """The layout models/<network>/card.toml: two such cards get two keys (their folders'), not one "card:card"
    that their caches, links and run folders would share; any other file name stays the key."""
    from iba_core.networks.card_format import read_card

    keys = []
    for network in ("skin", "xray"):
        folder = tmp_path / network
        folder.mkdir()
        keys.append(read_card(write_card(folder, name="card", arch="torchvision:resnet18", weights=None,
                                         classes=None)).key)
    assert keys == ["card:skin", "card:xray"]
    assert read_card(write_card(tmp_path / "skin", name="fruit", weights=None, classes=None)).key == "card:fruit"
    named = write_card(tmp_path / "xray", name="card", weights=None, classes=None, extra='name = "chest"\n')
    assert read_card(named).key == "card:chest"
