"""Model registry: layer names and shapes, splitting, weights resolution, the offline model."""
import time

import pytest
import torch

from iba_core.errors import UserError
from iba_core.networks import get_spec, network_from_module, weights
from iba_core.images import load_sample
from iba_core.networks import REGISTRY, UnknownModelError, WeightsUnavailableError, load_network

EXPECTED_SHAPES = {
    ("resnet50", "conv1"): (64, 112, 112),
    ("resnet50", "conv2_3"): (256, 56, 56),
    ("resnet50", "conv3_4"): (512, 28, 28),
    ("resnet50", "conv4_6"): (1024, 14, 14),
    ("resnet50", "conv5_3"): (2048, 7, 7),
    ("vgg16", "conv1_1"): (64, 224, 224),
    ("vgg16", "conv4_1"): (512, 28, 28),
    ("vgg16", "conv5_3"): (512, 14, 14),
    ("efficientnet_lite0", "block3_2"): (40, 28, 28),
    ("efficientnet_lite0", "block6_4"): (192, 7, 7),
}


@pytest.fixture(scope="module")
def random_models():
    return {key: load_network(key, weights="random") for key in ("resnet50", "vgg16")}


@pytest.fixture(scope="module")
def x224():
    return torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))


def test_layer_names_follow_the_paper():
    assert REGISTRY["resnet50"].layers[0] == "conv1" and len(REGISTRY["resnet50"].layers) == 17
    assert REGISTRY["resnet50"].default_layer == "conv3_4"
    assert REGISTRY["vgg16"].layers == tuple(
        f"conv{b}_{i}" for b, n in ((1, 2), (2, 2), (3, 3), (4, 3), (5, 3)) for i in range(1, n + 1))
    assert REGISTRY["vgg16"].default_layer == "conv4_1"


@pytest.mark.parametrize("key", ["resnet50", "vgg16"])
def test_stages_reproduce_the_network(random_models, x224, key):
    network = random_models[key]
    with torch.no_grad():
        full = network.model(x224)
        prefix, suffix = network.split(network.spec.default_layer)
        assert torch.allclose(suffix(prefix(x224)), full, atol=1e-4)


def test_offline_stages_reproduce_the_network(offline_model, chelsea_x):
    with torch.no_grad():
        full = offline_model.model(chelsea_x)
        for layer in ("stem", "block3_2", "head"):
            prefix, suffix = offline_model.split(layer)
            assert torch.allclose(suffix(prefix(chelsea_x)), full, atol=1e-4), layer


@pytest.mark.parametrize("key_layer, shape", EXPECTED_SHAPES.items())
def test_layer_shapes(random_models, offline_model, x224, key_layer, shape):
    key, layer = key_layer
    network = offline_model if key == "efficientnet_lite0" else random_models[key]
    with torch.no_grad():
        assert tuple(network.prefix(layer)(x224).shape[1:]) == shape


@pytest.mark.parametrize("key", ["resnet50", "vgg16", "efficientnet_lite0"])
def test_hook_module_output_is_the_layer(random_models, offline_model, x224, key):
    network = offline_model if key == "efficientnet_lite0" else random_models[key]
    layer = network.spec.default_layer
    seen = []
    handle = network.hook_module(layer).register_forward_hook(lambda m, i, o: seen.append(o.clone()))
    try:
        with torch.no_grad():
            network.model(x224)
            expected = network.prefix(layer)(x224)
    finally:
        handle.remove()
    # prefix() has its BatchNorms folded, so agreement is up to float rounding
    assert (seen[0] - expected).abs().max() <= 1e-4 * seen[0].abs().max()


@pytest.mark.parametrize("photo, target", [("chelsea", 285), ("coffee", 967)])
def test_offline_model_classifies_sample_photos(offline_model, photo, target):
    top = offline_model.top_k(offline_model.preprocess(load_sample(photo)), 5)
    assert top[0][0] == target
    assert [p for _, _, p in top] == sorted((p for _, _, p in top), reverse=True)


def test_loaded_model_is_eval_and_frozen(offline_model):
    assert not offline_model.model.training
    assert not any(p.requires_grad for p in offline_model.model.parameters())


def test_class_index_by_number_and_name(offline_model):
    assert offline_model.class_index(967) == 967
    assert offline_model.class_index("Egyptian cat") == 285
    assert offline_model.class_index(" 12 ") == 12
    with pytest.raises(UserError, match="espresso"):
        offline_model.class_index("espress")
    with pytest.raises(UserError, match="range"):
        offline_model.class_index(1000)


def test_unknown_model_and_layer():
    with pytest.raises(UnknownModelError, match="efficientnet_lite0"):
        get_spec("alexnet")
    with pytest.raises(UnknownModelError, match="conv3_4"):
        REGISTRY["resnet50"].check_layer("conv9_9")


def test_missing_weights_fail_fast_with_a_useful_message(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delenv("IBA_WEIGHTS_DIR", raising=False)
    monkeypatch.setattr(weights, "_reachable", lambda url, timeout=3.0: False)  # offline, as here
    start = time.perf_counter()
    with pytest.raises(WeightsUnavailableError) as err:
        load_network("resnet50")
    assert time.perf_counter() - start < 10
    message = str(err.value)
    assert "resnet50-0676ba61.pth" in message and "EfficientNet-Lite0" in message
    assert str(tmp_path / "torch") in message  # says where to put it


def test_weights_from_iba_weights_dir(tmp_path, monkeypatch, random_models):
    torch.save(random_models["vgg16"].model.state_dict(), tmp_path / "vgg16-397923af.pth")
    monkeypatch.setenv("IBA_WEIGHTS_DIR", str(tmp_path))
    network = load_network("vgg16")
    assert network.weights_id == "vgg16-397923af.pth"
    w0 = random_models["vgg16"].model.features[0].weight
    assert torch.equal(network.model.features[0].weight, w0)
    assert "weights found" in weights.weights_status(REGISTRY["vgg16"])


def test_explicit_weights_file_and_bad_file(tmp_path):
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsUnavailableError, match="Could not read"):
        load_network("resnet50", weights=bad)
    with pytest.raises(WeightsUnavailableError, match="not found"):
        load_network("resnet50", weights=tmp_path / "missing.pth")


def test_every_spec_is_complete_and_consistent():
    """What methods and the readout ask of a spec is there for every registered network."""
    for spec in REGISTRY.values():
        assert spec.default_layer in spec.layers and set(spec.hook_modules) >= set(spec.layers) - {"stem", "head"}
        assert spec.cam_layer is not None and spec.canonizers is not None and spec.stages is not None
        reads = spec.reads()
        assert reads[0] == spec.readout_layer and reads[-1] == "fc" and set(reads[:-1]) <= set(spec.layers)


def test_derived_spec_finds_feature_maps_in_execution_order():
    from torch import nn

    relu = nn.ReLU()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(3, 4, 3, padding=1)
            self.shared = relu  # runs twice: unusable
            self.b = nn.Conv2d(4, 4, 3, stride=2, padding=1)
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            x = self.shared(self.b(self.shared(self.a(x))))
            return self.head(x.mean((2, 3)))

    net = network_from_module(Net(), "toy", categories=["a", "b", "c"])
    assert net.spec.layers == ("a", "b") and not net.can_split
    assert net.spec.default_layer == "b"  # the last map ≥ 28×28 (112×112 here)
    assert net.spec.cam_layer is None and net.spec.canonizers is None
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert net.prefix("b")(x).shape == (1, 4, 112, 112)
    assert net.top_k(x, 2)[0][1] in ("a", "b", "c")
