"""Every preset of the bottleneck family (`iba`, `coiba`, `m2ib`) runs in every precision on every kind of network:
registered (the offline network's stage list), torchvision, a timm folder, a Hugging Face folder and a model card,
split by stages, a torch.fx cut or forward hooks. A lower precision is forced (bf16 runs on any CPU, emulated where
the CPU lacks it), so the path a bf16 CPU takes by default is tested on every machine."""
from __future__ import annotations

import numpy as np
import pytest

from card_fixtures import make_card_folder
from iba_core.images import load_image
from iba_core.methods import get_method
from iba_core.networks import load_network
from source_fixtures import save_hf_vit, save_timm_folder, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = ("registered", "torchvision", "timm", "hf", "card")
QUICK = dict(steps=2, batch=2, stats_samples=4)


@pytest.fixture(scope="module")
def networks(tmp_path_factory):
    root = tmp_path_factory.mktemp("preset-networks")
    built: dict = {}

    def get(kind: str):
        if kind not in built:
            if kind == "registered":
                built[kind] = load_network("efficientnet_lite0")
            elif kind == "torchvision":
                built[kind] = load_network("torchvision:resnet18", weights="random")
            elif kind == "timm":
                built[kind] = load_network(str(save_timm_folder(root / "vit", "vit_tiny_patch16_224", img_size=64,
                                                                depth=3, embed_dim=32, num_heads=2)))
            elif kind == "hf":
                built[kind] = load_network(str(save_hf_vit(root / "hf")))
            else:
                built[kind] = load_network(str(make_card_folder(root / "card") / "fruit.toml"))
        return built[kind]

    return get


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return load_image(write_image(tmp_path_factory.mktemp("preset-image") / "img.png"))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("preset", ["iba", "coiba", "m2ib"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_preset_in_every_precision_on_every_kind(networks, image, kind, preset, precision):
    net = networks(kind)
    method = get_method(preset, precision=precision, **QUICK)
    amap = method.attribute(net, net.preprocess(image), 0)
    crop = net.spec.crop
    assert amap.values.shape == (crop, crop) and np.isfinite(amap.values).all() and amap.values.min() >= 0
    extra = amap.extra
    assert extra["precision"] == precision and extra["total_bits"] > 0 and 0 <= extra["p_with"] <= 1
    located = extra["total_bits"] - extra["unlocated_bits"]
    assert float(amap.values.sum()) == pytest.approx(located, rel=2e-3)
    if preset == "coiba":
        transformer = kind in ("timm", "hf")
        assert extra["placement"] == ("branch" if transformer else "output")
        if transformer:
            assert all(layer.rsplit(".", 1)[-1] in ("norm1", "layernorm_before") for layer in extra["layers"])
