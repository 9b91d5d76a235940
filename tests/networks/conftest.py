"""Fixtures for any network: torchvision's ResNet-18, ViT-B/16 and Swin-T with random weights, loaded once."""
from __future__ import annotations

import pytest
import torch

from source_fixtures import write_image


@pytest.fixture(scope="session")
def any_network():
    """key ("resnet18", "vit_b_16", "swin_t") → the `torchvision:` network with random weights (network once)."""
    from iba_core.networks import load_network

    network: dict = {}

    def get(name: str):
        if name not in network:
            network[name] = load_network(f"torchvision:{name}", weights="random")
        return network[name]

    return get


@pytest.fixture(scope="session")
def noise_stats():
    """(network, layer, size) → FeatureStats of the layer from two seeded random images of that size."""
    from iba_core.feature_stats import FeatureStats, estimate_stats

    made: dict = {}

    def get(network, layer: str, size: int):
        key = (network.key, layer, size)
        if key not in made:
            g = torch.Generator().manual_seed(1)
            mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(2, 3, size, size, generator=g)])
            made[key] = FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")
        return made[key]

    return get


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty Hugging Face hub cache and HF_HUB_OFFLINE=1, no IBA_WEIGHTS_DIR: nothing can be downloaded or found."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("IBA_WEIGHTS_DIR", raising=False)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> str:
    """A small photo-like PNG (`source_fixtures.write_image`), written once per module, as a path string."""
    return str(write_image(tmp_path_factory.mktemp("image") / "img.png"))
