"""Fixtures for the baselines: random ResNet-50 / VGG-16 on small inputs."""
from __future__ import annotations

import pytest
import torch

from method_helpers import SMALL, small_stats


@pytest.fixture(scope="module", autouse=True)
def _one_thread_here(one_thread):
    """Every module of this folder runs on one thread (tests/conftest.py::one_thread says why)."""


@pytest.fixture(scope="session")
def resnet_random():
    from iba_core.networks import load_network

    return load_network("resnet50", weights="random")


@pytest.fixture(scope="session")
def vgg_random():
    from iba_core.networks import load_network

    return load_network("vgg16", weights="random")


@pytest.fixture(scope="session")
def small_x():
    return torch.randn(1, 3, SMALL, SMALL, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="session")
def random_networks(resnet_random, vgg_random):
    """key → (network, IBA statistics for SMALL inputs)."""
    return {
        "resnet50": (resnet_random, small_stats(resnet_random)),
        "vgg16": (vgg_random, small_stats(vgg_random)),
    }


@pytest.fixture(scope="session")
def vgg_patterns(vgg_random):
    """PatternAttribution patterns for the random VGG-16 from two random SMALL inputs (seconds, not minutes)."""
    from iba_core.methods.pattern import Patterns, estimate_patterns

    g = torch.Generator().manual_seed(2)
    tensors, n = estimate_patterns(vgg_random, [torch.randn(2, 3, SMALL, SMALL, generator=g)])
    return Patterns(tensors, n, vgg_random.key, vgg_random.weights_id, "random noise")
