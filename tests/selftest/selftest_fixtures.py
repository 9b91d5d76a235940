"""Helpers for the self-test's tests: the tiny card CNN of the folder-run tests (tests/runs/run_fixtures.py) trained
so that a red top-left square is the only cue of its class "marked" (both classes show the green object), a folder of
the other class's images, and noise photos of any size."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import MARK, SIZE, load_card, tiny_module, train, write_card  # noqa: E402

CLASSES = ["marked", "object"]


def mark_image(rng: np.random.Generator, marked: bool, size: int = SIZE) -> np.ndarray:
    """A noise texture with a green square (the object) somewhere inside; a "marked" image also carries a red square
    in its top-left corner, the only thing that tells its class."""
    img = rng.integers(40, 160, (size, size, 3)).astype(np.uint8)
    top, left = rng.integers(MARK + 4, size - 2 * MARK - 4, 2)
    img[top:top + MARK, left:left + MARK] = (0, 255, 0)
    if marked:
        img[:MARK, :MARK] = (255, 0, 0)
    return img


def train_mark_net(steps: int = 100, seed: int = 0) -> torch.nn.Module:
    """The tiny CNN trained for a few seconds to tell "marked" (the red corner) from "object" (no red corner)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    labels = np.arange(128) % 2
    imgs = np.stack([mark_image(rng, marked=(y == 0)) for y in labels]).astype(np.float32) / 255.0
    x, y = (torch.from_numpy(imgs).permute(0, 3, 1, 2) - 0.5) / 0.5, torch.from_numpy(labels)
    model = tiny_module().build(2)
    # lr 3e-3: 1e-2 (the shortcut net's) leaves most units dead: a flat output on clean images, gradients of zero
    return train(model, x, y, steps, lr=3e-3, seed=seed)


def write_object_folder(folder: Path, count: int, seed: int = 1) -> list[str]:
    """`count` PNGs of the class "object" (no red corner) in `folder`; their keys."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    keys = []
    for i in range(count):
        Image.fromarray(mark_image(rng, marked=False)).save(folder / f"{i:02d}.png")
        keys.append(f"{i:02d}.png")
    return keys


def write_background(folder: Path, count: int = 16, seed: int = 7) -> Path:
    """Plain noise texture: the feature statistics (no object, no mark)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(rng.integers(40, 160, (SIZE, SIZE, 3)).astype(np.uint8)).save(folder / f"{i}.png")
    return folder


def mark_network(root: Path, model: torch.nn.Module):
    """The card network of `model` (classes "marked", "object"), its statistics from noise texture."""
    write_background(root / "background")
    return load_card(write_card(root / "card", CLASSES, model=model, stats_images="../background"))


def noise_photo(path: Path, width: int, height: int, seed: int = 0) -> Path:
    """A noise photo of any size (values 40–160, far from a mark's pure colours)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(40, 160, (height, width, 3)).astype(np.uint8)).save(path)
    return path
