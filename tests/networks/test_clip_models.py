"""CLIP models as networks (`iba_core.networks.clip_models`): a tiny random CLIPModel folder, loaded offline."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from clip_fixtures import save_tiny_clip


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    return save_tiny_clip(tmp_path_factory.mktemp("clip") / "tiny-clip")


@pytest.fixture(scope="module")
def clip_net(clip_folder):
    from iba_core.networks import load_network

    return load_network(f"clip:{clip_folder}")


def test_a_clip_folder_is_a_network_with_prompts(clip_net, clip_folder):
    from iba_core.networks import load_network
    from iba_core.networks.clip_models import ClipNetwork, is_clip

    assert isinstance(clip_net, ClipNetwork) and is_clip(clip_net)
    assert clip_net.spec.head == "similarity"
    assert clip_net.spec.layers == tuple(f"vision_model.encoder.layers.{i}" for i in range(4))
    assert clip_net.spec.default_layer == "vision_model.encoder.layers.2"  # 3/4 of 4, one before the last
    assert clip_net.spec.layout(clip_net.spec.default_layer).kind == "tokens"
    # The same folder given as a plain path is recognised as CLIP, with the same key (statistics are shared).
    plain = load_network(str(clip_folder))
    assert is_clip(plain) and plain.key == clip_net.key == "folder:tiny-clip"
    assert plain.weights_id == clip_net.weights_id != "random"
