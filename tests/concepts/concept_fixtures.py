"""Helpers for the concept tests: a hand-made network given as a model card (one 8 × 8 convolution whose output is
each cell's mean colour, global average pooling, a linear head with chosen weights), a folder run of it on six
hand-made images with the Per-Sample Bottleneck."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image


#: The hand-made network's code, written beside its card.
HAND_MODULE = "iba_concepts_hand_net"
HAND_SOURCE = '''
import torch
from torch import nn


class HandNet(nn.Module):
    """cells: an 8 x 8 convolution of stride 8 whose channel c is the mean of input channel c over the cell (64 px
    crops: an 8 x 8 grid; values can be negative), then global average pooling and a linear head."""

    def __init__(self, classes=2, head=((3.0, -3.0, 0.0), (-3.0, 3.0, 0.0))):
        super().__init__()
        self.cells = nn.Conv2d(3, 3, 8, stride=8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(3, classes)
        with torch.no_grad():
            self.cells.weight.zero_()
            for c in range(3):
                self.cells.weight[c, c] = 1.0 / 64
            self.cells.bias.zero_()
            self.fc.weight.copy_(torch.tensor(head, dtype=torch.float32)[:classes])
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(self.pool(self.cells(x)).flatten(1))


def build(classes=2):
    return HandNet(classes)
'''
SIZE, GRID, LAYER = 64, 8, "cells"
CLASSES = ["red", "green"]
#: Images per class in the hand-made folder.
PER_CLASS = 3
#: Concepts per group in the fixture's concept set.
K = 2


def hand_module():
    """The builder module, importable from the tests too (to build the same network by hand)."""
    import importlib
    import types

    if HAND_MODULE not in sys.modules:
        module = types.ModuleType(HAND_MODULE)
        exec(compile(HAND_SOURCE, f"<{HAND_MODULE}>", "exec"), module.__dict__)
        sys.modules[HAND_MODULE] = module
    return importlib.import_module(HAND_MODULE)


def write_hand_card(folder: Path, model=None, name: str = "hand") -> Path:
    """A card of the hand-made network (its module, weights — the hand-set ones unless `model` — and classes) whose
    Per-Sample Bottleneck statistics come from ../background."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{HAND_MODULE}.py").write_text(HAND_SOURCE)
    torch.save((model or hand_module().build(len(CLASSES))).state_dict(), folder / f"{name}.pth")
    (folder / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    lines = [f'arch = "{HAND_MODULE}:build"', f'weights = "{name}.pth"', 'classes = "classes.txt"',
             f'layer = "{LAYER}"', 'stats_images = "../background"', "[arch_args]", f"classes = {len(CLASSES)}",
             "[preprocess]", f"resize = {SIZE}", f"crop = {SIZE}", "mean = [0.5, 0.5, 0.5]", "std = [0.5, 0.5, 0.5]"]
    card = folder / f"{name}.toml"
    card.write_text("\n".join(lines) + "\n")
    return card


def hand_image(rng: np.random.Generator, colour: int, place: tuple[int, int]) -> np.ndarray:
    """A grey noise texture with a 16 × 16 square of pure red (colour 0) or green (1) whose top-left corner is at
    `place` (row, col) in pixels."""
    img = rng.integers(100, 160, (SIZE, SIZE, 3)).astype(np.uint8)
    top, left = place
    img[top:top + 16, left:left + 16] = (255, 0, 0) if colour == 0 else (0, 255, 0)
    return img


def write_hand_folder(folder: Path) -> list[str]:
    """Class folders red/ and green/, PER_CLASS images each with the square at a different place; their keys."""
    rng = np.random.default_rng(3)
    places = [(0, 0), (24, 36), (44, 12)]
    keys = []
    for colour, cls in enumerate(CLASSES):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            key = f"{cls}/{i}.png"
            Image.fromarray(hand_image(rng, colour, places[i])).save(folder / key)
            keys.append(key)
    return keys


def make_hand_run(root: Path) -> Path:
    """A finished folder run of the hand-made network on the hand-made folder with the Per-Sample Bottleneck."""
    from iba_core.methods import get_method
    from iba_core.runs import finish_run, list_images, run_folder
    from run_fixtures import load_card

    rng = np.random.default_rng(5)
    (root / "background").mkdir(parents=True, exist_ok=True)
    for i in range(8):
        Image.fromarray(rng.integers(100, 160, (SIZE, SIZE, 3)).astype(np.uint8)).save(root / "background" / f"{i}.png")
    write_hand_folder(root / "data")
    network = load_card(write_hand_card(root / "card"))
    top, items = list_images(root / "data", class_index=network.class_index)
    run_folder(network, items, [get_method("iba_10", precision="fp32", stats_samples=8)], root / "run", root=top)
    finish_run(root / "run")
    return root / "run"


