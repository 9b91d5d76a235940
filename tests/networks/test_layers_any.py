"""Layers of any network: CNN maps and transformer tokens on a patch grid, unusable modules, the default rule."""
from __future__ import annotations

import pytest
import torch

from iba_core.networks import derive_spec, load_network
from iba_core.networks.spec import find_layers
from iba_core.networks.tokens import MAP, FeatureLayout, infer_layout, layout_of_shape
from tiny_transformer import TinyViT


# ---- layouts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, expected", [
    ((1, 64, 56, 56), MAP),
    ((1, 512, 1, 1), MAP),
    ((1, 56, 56, 96), FeatureLayout("nhwc")),
    ((1, 197, 768), FeatureLayout("nlc", (14, 14), 1)),
    ((1, 196, 384), FeatureLayout("nlc", (14, 14), 0)),
    ((1, 198, 192), FeatureLayout("nlc", (14, 14), 2)),
    ((1, 1000), None),
    ((1, 3, 768), None),
])
def test_layout_of_shape(shape, expected):
    assert layout_of_shape(shape, 224) == expected


def test_layouts_round_trip_and_map_view():
    g = torch.Generator().manual_seed(0)
    vit = torch.randn(2, 1 + 3 * 4, 5, generator=g)
    layout = FeatureLayout("nlc", (3, 4), 1)
    grid, extra = layout.to_map(vit)
    assert grid.shape == (2, 5, 3, 4) and extra.shape == (2, 5, 1, 1)
    assert torch.equal(grid[1, :, 2, 3], vit[1, 1 + 2 * 4 + 3])  # row-major patch order
    assert torch.equal(extra[1, :, 0, 0], vit[1, 0])  # the class token leads
    assert torch.equal(layout.from_map(grid, extra), vit)
    swin = torch.randn(2, 3, 4, 5, generator=g)
    grid, extra = FeatureLayout("nhwc").to_map(swin)
    assert extra is None and grid.shape == (2, 5, 3, 4) and torch.equal(grid[1, :, 2, 3], swin[1, 2, 3])
    assert torch.equal(FeatureLayout("nhwc").from_map(grid), swin)
    assert infer_layout((197, 768)) == FeatureLayout("nlc", (14, 14), 1) and infer_layout((64, 7, 7)) == MAP
    assert infer_layout((14, 14, 384)) == MAP  # a Swin grid cannot be told from a map by shape: give its layout
    with pytest.raises(ValueError, match="unlocated token"):
        layout.from_map(torch.zeros(2, 5, 3, 4))  # the class token is missing


# ---- torchvision networks -------------------------------------------------------------------------


def test_resnet18_layers_maps_unusable_relus_and_default(any_network):
    net = any_network("resnet18")
    table = {info.name: info for info in net.layer_table()}
    assert table["layer2"].shape == (1, 128, 28, 28) and table["layer2"].kind == "map"
    relu = table["layer1.0.relu"]  # torchvision's BasicBlock calls one ReLU module twice
    assert not relu.usable and relu.runs == 2 and "runs 2 times" in relu.reason
    assert "layer1.0.relu" not in net.spec.layers and "layer2" in net.spec.layers
    assert net.spec.default_layer == "layer2"  # the last map of at least 28×28
    assert net.layer_label("layer2") == "layer2 · 128×28×28 map"
    names = [info.name for info in net.layer_table()]
    assert names.index("layer1") < names.index("layer2") < names.index("layer4")  # execution order


def test_vit_layers_are_tokens_with_class_token_and_middle_block_default(any_network):
    net = any_network("vit_b_16")
    block = "encoder.layers.encoder_layer_5"
    assert net.spec.default_layer == block  # middle of 12 blocks: index (12 - 1) // 2
    info = next(i for i in net.layer_table() if i.name == block)
    assert info.kind == "tokens" and info.shape == (1, 197, 768)
    assert net.layout(block) == FeatureLayout("nlc", (14, 14), 1)
    assert net.layer_label(block) == f"{block} · 197×768 tokens (14×14 grid + class token, 768 channels)"
    assert net.layout("conv_proj") == MAP  # the patch embedding is a CNN map
    assert "encoder.layers.encoder_layer_0.mlp.0" in net.spec.layers  # 3072-channel tokens inside a block
    assert not any("self_attention" == n.rsplit(".", 1)[-1] for n in net.spec.layers)  # tuple outputs left out
    # No map after the blocks (the patch embedding is before them) and a class token: the CAM layer is the last
    # block's input, the output of the block before it
    assert net.spec.cam_layer == ("encoder.layers.encoder_layer_10", False)


def test_swin_layers_are_channels_last_grids(any_network):
    net = any_network("swin_t")
    assert net.spec.default_layer == "features.5.1"  # 6th of the 12 Swin blocks, on the 14×14 grid
    assert net.layout("features.5.1") == FeatureLayout("nhwc")
    assert net.layer_label("features.5.1") == "features.5.1 · 14×14×384 tokens (14×14 grid, 384 channels)"
    assert net.spec.cam_layer == ("permute", False)  # the final normed map, (768, 7, 7)
    depth = next(i for i in net.layer_table() if i.name == "features.1.0.stochastic_depth")
    assert not depth.usable and "runs 2 times" in depth.reason  # called once after attention, once after MLP


def test_registered_network_layer_table_from_its_stages():
    net = load_network("resnet50", weights="random")
    table = net.layer_table()
    assert [i.name for i in table] == list(net.spec.layers)
    assert net.layer_label("conv3_4") == "conv3_4 · 512×28×28 map"
    assert net.split_path("conv3_4") == "stages"


# ---- hand-built networks ------------------------------------------------------------------------------


@pytest.mark.parametrize("class_token", [True, False])
def test_tiny_transformer_default_is_a_middle_block(class_token):
    spec = derive_spec(TinyViT(class_token).eval(), "tiny-vit", input_size=32)
    assert spec.default_layer == "blocks.1"  # (4 - 1) // 2
    assert spec.layout("blocks.1") == FeatureLayout("nlc", (4, 4), 1 if class_token else 0)
    assert spec.layout("embed") == MAP


def test_find_layers_leaves_the_model_as_it_was():
    model = TinyViT().train()
    find_layers(model, 32)
    assert model.training and all(not m._forward_hooks for m in model.modules())


def test_explicit_default_layer_must_be_usable(any_network):
    from iba_core.networks import UnknownModelError

    with pytest.raises(UnknownModelError, match="no layer 'layer1.0.relu'"):
        derive_spec(any_network("resnet18").model, "r18", default_layer="layer1.0.relu")
