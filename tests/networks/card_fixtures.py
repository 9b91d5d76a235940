"""Helpers for the model-card tests: a 7-class ResNet-18 with random weights, its class list, images, a card."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image

CLASSES = ["apple", "banana", "cherry", "date", "elderberry", "fig", "grape"]


def make_resnet18(num_classes: int = len(CLASSES)) -> torch.nn.Module:
    torch.manual_seed(1)
    return torchvision.models.resnet18(weights=None, num_classes=num_classes)


def write_images(folder: Path, count: int = 12, size: int = 48) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"img{i:02d}.png")
    return folder


def write_card(folder: Path, *, name: str = "fruit", arch: str = "torchvision:resnet18",
               weights: str | None = "fruit.pth", classes: str | None = "classes.txt", extra: str = "") -> Path:
    lines = [f'arch = "{arch}"']
    if weights is not None:
        lines.append(f'weights = "{weights}"')
    if classes is not None:
        lines.append(f'classes = "{classes}"')
    card = folder / f"{name}.toml"
    card.write_text("\n".join(lines) + "\n" + extra)
    return card


def make_card_folder(folder: Path) -> Path:
    """The folder: fruit.pth (state dict), classes.txt (7 lines), images/ (12 PNGs), fruit.toml."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(make_resnet18().state_dict(), folder / "fruit.pth")
    (folder / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    write_images(folder / "images")
    write_card(folder, extra='stats_images = "images"\n')
    return folder
