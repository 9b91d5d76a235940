"""Layers whose output's leading axis is not the image batch (issue #39: MobileViT's transformer folds each
image's patch positions into it, and a bottleneck there failed with "shape '[2560, 8, 2, 2]' is invalid"): listed
unusable with the reason, never offered or chosen as the default."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from iba_core.cli import main
from iba_core.networks import load_network
from iba_core.networks.spec import derive_spec, find_layers
from source_fixtures import attribute_cli, edit_config, save_timm_folder


class FoldsPatches(nn.Module):
    """A conv stem, then a block that runs on (batch · 4, tokens, channels) like MobileViT's transformer, then a
    conv on the unfolded map and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.mixer = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.after = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        x = self.stem(x)
        n, c, h, w = x.shape
        # (N, C, H, W) → (N·2·2, H/2·W/2, C): one row per image and position in each 2×2 patch
        t = x.reshape(n, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1).reshape(n * 4, h * w // 4, c)
        t = self.mixer(t)
        x = t.reshape(n, 2, 2, h // 2, w // 2, c).permute(0, 5, 3, 1, 4, 2).reshape(n, c, h, w)
        return self.head(self.after(x).mean((2, 3)))


def test_a_folded_batch_is_listed_unusable_with_its_reason():
    infos = {info.name: info for info in find_layers(FoldsPatches(), 32)}
    mixer = infos["mixer"]  # (2·4, 16·16, 8) in the dry pass of two images: tokens on a grid, but not per image
    assert mixer.kind == "tokens" and not mixer.batched and not mixer.usable
    assert mixer.shape[0] == 8 and "leading axis (8 for a batch of 2 images) is not the image batch" in mixer.reason
    assert infos["after"].usable and infos["after"].shape == (1, 8, 32, 32)  # per image, shown for one image
    spec = derive_spec(FoldsPatches(), "folds")
    assert "mixer" not in spec.layers and spec.default_layer == "after"


@pytest.fixture(scope="module")
def mobilevit(tmp_path_factory):
    """timm's mobilevit_xxs, random, saved by save_for_hf, its input 64 px (a 2×2 patch grid on 8×8 maps)."""
    folder = save_timm_folder(tmp_path_factory.mktemp("mobilevit") / "mvit", "mobilevit_xxs")
    cfg = json.loads((folder / "config.json").read_text())["pretrained_cfg"]
    edit_config(folder, pretrained_cfg={**cfg, "input_size": [3, 64, 64]})
    return folder


def test_mobilevit_offers_no_transformer_and_says_why(mobilevit, capsys):
    spec = load_network(mobilevit).spec
    folded = [info for info in spec.layer_info if ".transformer." in info.name]
    # stages 2 and 3's 2 + 4 transformer blocks (stage 4's, one token per patch position at 64 px, lie on no grid)
    assert len(folded) == 6 and not any(info.usable for info in folded)
    assert not any(".transformer." in layer for layer in spec.layers)
    assert spec.default_layer in spec.layers and spec.layout(spec.default_layer).kind == "map"
    assert main(["models", "--model", str(mobilevit), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert {u["name"] for u in row["unusable"]} == {info.name for info in folded}
    assert all("not the image batch" in u["reason"] for u in row["unusable"])


def test_mobilevit_default_per_sample_run(mobilevit, image, capsys, tmp_path):
    summary, heatmap = attribute_cli([image, "--model", mobilevit], capsys, tmp_path)  # failed inside a block
    assert summary["layer"] == load_network(mobilevit).spec.default_layer and heatmap.shape == (64, 64)
    assert summary["total_bits"] > 0


def test_mobilevit_library_run_at_the_default_layer(mobilevit, image):
    from iba_core.feature_stats import FeatureStats, estimate_stats
    from iba_core.methods import get_method

    network = load_network(mobilevit)
    layer = network.spec.default_layer
    g = torch.Generator().manual_seed(1)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(2, 3, 64, 64, generator=g)])
    stats = FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")
    x = network.preprocess(network.preprocess.load(image))
    amap = get_method("iba", stats=stats, steps=2, batch=4).attribute(network, x, 0)
    assert amap.values.shape == (64, 64) and torch.isfinite(torch.as_tensor(amap.values)).all()
    assert amap.values.std() > 0
