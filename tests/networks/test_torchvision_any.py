"""`torchvision:NAME`: any torchvision classifier, with its weights enum's classes and preprocessing."""
from __future__ import annotations

import pytest
import torch
import torchvision

from iba_core.networks import (UnknownModelError, UnsafeWeightsError, WeightsMismatchError, WeightsUnavailableError,
                               load_network, weights)


@pytest.fixture(scope="module")
def resnet18_state():
    torch.manual_seed(3)
    return torchvision.models.resnet18(weights=None).state_dict()


def test_random_weights_structure_classes_and_preprocessing():
    net = load_network("torchvision:resnet18", weights="random")
    assert net.key == "torchvision:resnet18" and net.weights_id == "random"
    assert len(net.categories) == 1000 and net.categories[0] == "tench"
    assert (net.spec.resize, net.spec.crop, net.spec.mean) == (256, 224, (0.485, 0.456, 0.406))
    assert net.spec.cam_layer == ("layer4", False) and net.spec.default_layer == "layer2"
    assert net.spec.weights.file == "resnet18-f37072fd.pth"
    again = load_network("torchvision:resnet18", weights="random")  # seeded: random weights are reproducible
    assert torch.equal(net.model.fc.weight, again.model.fc.weight)


def test_preprocessing_follows_the_weights_transforms():
    net = load_network("torchvision:inception_v3", weights="random")
    assert (net.spec.resize, net.spec.crop) == (342, 299)
    assert net.preprocess(__import__("PIL.Image", fromlist=["Image"]).new("RGB", (400, 300))).shape == (1, 3, 299, 299)


def test_weights_from_IBA_WEIGHTS_DIR_and_from_a_path(resnet18_state, tmp_path, monkeypatch):
    torch.save(resnet18_state, tmp_path / "resnet18-f37072fd.pth")
    monkeypatch.setenv("IBA_WEIGHTS_DIR", str(tmp_path))
    net = load_network("torchvision:resnet18")
    assert net.weights_id == "resnet18-f37072fd.pth"
    assert torch.equal(net.model.fc.weight, resnet18_state["fc.weight"])
    from safetensors.torch import save_file

    save_file(resnet18_state, str(tmp_path / "r.safetensors"))
    other = load_network("torchvision:resnet18", weights=tmp_path / "r.safetensors")
    assert torch.equal(other.model.fc.weight, resnet18_state["fc.weight"]) and len(other.weights_id) == 12


def test_offline_without_weights_says_where_to_put_which_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_WEIGHTS_DIR", str(tmp_path))
    monkeypatch.setattr(weights, "_reachable", lambda url, timeout=3.0: False)
    with pytest.raises(WeightsUnavailableError) as err:
        load_network("torchvision:resnet18")
    msg = str(err.value)
    assert "resnet18-f37072fd.pth" in msg and str(tmp_path) in msg
    assert "https://download.pytorch.org/models/resnet18-f37072fd.pth" in msg


def test_refusals(resnet18_state, tmp_path):
    with pytest.raises(UnknownModelError, match="torchvision has no classification network 'resnet7'.*resnet18"):
        load_network("torchvision:resnet7")
    torch.save(torchvision.models.resnet18(weights=None), tmp_path / "whole.pth")
    with pytest.raises(UnsafeWeightsError, match="pickled"):
        load_network("torchvision:resnet18", weights=tmp_path / "whole.pth")
    assert load_network("torchvision:resnet18", weights=tmp_path / "whole.pth", trust_pickle=True).key
    state = dict(resnet18_state)
    state["fc.weight"] = state["fc.weight"][:10]
    torch.save(state, tmp_path / "short.pth")
    with pytest.raises(WeightsMismatchError, match="fc.weight: file \\[10, 512\\], model \\[1000, 512\\]"):
        load_network("torchvision:resnet18", weights=tmp_path / "short.pth")


def test_registered_networks_read_weights_files_safely_too(offline_model, tmp_path):
    from safetensors.torch import save_file

    torch.save(offline_model.model, tmp_path / "whole.pth")
    with pytest.raises(UnsafeWeightsError, match="pickled.*torch.save\\(model.state_dict\\(\\), path\\)"):
        load_network("efficientnet_lite0", weights=tmp_path / "whole.pth")
    save_file({k: v.contiguous() for k, v in offline_model.model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    net = load_network("efficientnet_lite0", weights=tmp_path / "w.safetensors")
    assert torch.equal(net.model._fc.weight, offline_model.model._fc.weight) and net.weights_id == "w.safetensors"


def test_a_network_with_an_in_place_operation_after_its_cam_layer_loads():
    """DenseNet applies F.relu(features, inplace=True) right after its last map: checking that the CAM layer reaches
    the output must not fail there (it raised autograd's leaf error at load), and its Grad-CAM runs."""
    import numpy as np

    from iba_core.methods import get_method
    from iba_core.networks import load_network

    net = load_network("torchvision:densenet121", weights="random")
    assert net.spec.cam_layer == ("features", False)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(2))
    assert np.isfinite(get_method("grad_cam").attribute(net, x, 3).values).all()
