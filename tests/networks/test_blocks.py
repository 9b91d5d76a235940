"""The layers a person reads: lists of same-class composite blocks, two levels at most, a stage's last block under
the stage's name; on tiny hand-built networks."""
from __future__ import annotations

import torch
from torch import nn

from iba_core.networks.blocks import block_layers, repeated_blocks


class Block(nn.Module):
    """conv → ReLU, with an inner list of two sub-layers (a block's inside, never offered)."""

    def __init__(self, channels: int):
        super().__init__()
        self.inner = nn.ModuleList(SubLayer(channels) for _ in range(2))

    def forward(self, x):
        for layer in self.inner:
            x = layer(x)
        return x


class SubLayer(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv, self.act = nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()

    def forward(self, x):
        return self.act(self.conv(x))


class Stage(nn.Module):
    """A downsampling pair (conv, norm: mixed classes, no blocks) and a list of blocks; returns the last block's
    output unchanged."""

    def __init__(self, channels: int, depth: int):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(channels, channels, 2, stride=2), nn.BatchNorm2d(channels))
        self.blocks = nn.Sequential(*(Block(channels) for _ in range(depth)))

    def forward(self, x):
        return self.blocks(self.down(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1))  # leaves only
        self.stages = nn.ModuleList([Stage(4, 2), Stage(4, 1)])
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(x.mean(dim=(2, 3)))


def test_lists_of_composite_blocks_are_found():
    found = repeated_blocks(Net())
    assert "stages.0" in found and "stages.0.blocks.1" in found and "stages.0.blocks.0.inner.0" in found
    assert not any(name.startswith(("stem.", "stages.0.down.")) for name in found)  # leaves and mixed pairs


def test_two_levels_and_each_stage_once():
    layers = block_layers(Net(), 16, named=["stem", "missing"])
    # stages.0's last block returns the stage's output: listed as "stages.0"; stages.1 has one block, the same
    assert set(layers) == {"stem", "stages.0", "stages.0.blocks.0", "stages.1"}  # order: derive_spec's dry pass
    assert not any(".inner." in name for name in layers)  # inside a block inside a stage


def test_the_dry_pass_leaves_the_model_as_it_was():
    net = Net().train()
    block_layers(net, 16)
    assert net.training and not net._forward_hooks and not any(m._forward_hooks for m in net.modules())
