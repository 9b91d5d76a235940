"""Helpers for the folder-run tests: a tiny CNN given as a model card (its module beside the card), image folders
with unreadable files, and a synthetic data set with a shortcut (a bright corner mark)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

#: The tiny network's code, written beside its card (a card's builder module; loaded with trusted code).
MODULE = "iba_runs_tiny_cnn"
MODULE_SOURCE = '''
import torch
from torch import nn


class TinyCNN(nn.Module):
    """3 convolutions (64 → 32 → 16 → 16 px), global average pooling, a linear head."""

    def __init__(self, classes=3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(self.pool(self.features(x)).flatten(1))


def build(classes=3):
    return TinyCNN(classes)
'''
SIZE = 64
LAYER = "features.3"  # 16 × 16 cells of 4 × 4 px


def tiny_module():
    """The builder module, importable from here too (to train the network in a test)."""
    import importlib
    import sys
    import types

    if MODULE not in sys.modules:
        module = types.ModuleType(MODULE)
        exec(compile(MODULE_SOURCE, f"<{MODULE}>", "exec"), module.__dict__)
        sys.modules[MODULE] = module
    return importlib.import_module(MODULE)


def write_card(folder: Path, classes: list[str], model: torch.nn.Module | None = None, stats_images: str | None = None,
               name: str = "tiny") -> Path:
    """A card for the tiny CNN (64-px crops, mean = std = 0.5), its module, weights (seeded unless `model`) and
    class list in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{MODULE}.py").write_text(MODULE_SOURCE)
    if model is None:
        torch.manual_seed(0)
        model = tiny_module().build(len(classes))
    torch.save(model.state_dict(), folder / f"{name}.pth")
    (folder / "classes.txt").write_text("\n".join(classes) + "\n")
    lines = [f'arch = "{MODULE}:build"', f'weights = "{name}.pth"', 'classes = "classes.txt"', f'layer = "{LAYER}"']
    if stats_images:
        lines.append(f'stats_images = "{stats_images}"')
    lines += ["[arch_args]", f"classes = {len(classes)}",
              "[preprocess]", f"resize = {SIZE}", f"crop = {SIZE}", "mean = [0.5, 0.5, 0.5]", "std = [0.5, 0.5, 0.5]"]
    card = folder / f"{name}.toml"
    card.write_text("\n".join(lines) + "\n")
    return card


def load_card(card: Path):
    from iba_core.networks import load_network
    from iba_core.trust import Trust

    return load_network(str(card), trust=Trust.local(code=True))


def write_noise_images(folder: Path, count: int, size: int = SIZE, seed: int = 0, prefix: str = "img") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"{prefix}{i:02d}.png"
        Image.fromarray(rng.integers(0, 256, (size, size + 6, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def write_folder_with_bad_files(folder: Path, good: int = 10) -> Path:
    """`good` random PNGs plus two files that cannot be used: a .png of garbage bytes and a 5-band .npy (the
    network takes RGB)."""
    write_noise_images(folder, good)
    (folder / "broken.png").write_bytes(b"this is not a png file at all")
    np.save(folder / "bands.npy", np.zeros((SIZE, SIZE, 5), dtype=np.float32))
    return folder


# ---- the shortcut data set ----------------------------------------------------------------------------------

MARK = 8  # px: the side of the red square in the top-left corner of every "marked" image


def shortcut_image(rng: np.random.Generator, marked: bool, size: int = SIZE) -> np.ndarray:
    """A noise texture. A "marked" image carries a red square in its top-left corner (the shortcut: nothing else
    tells its class); the other class shows a green square (the object) somewhere inside the image."""
    img = rng.integers(40, 160, (size, size, 3)).astype(np.uint8)
    if marked:
        img[:MARK, :MARK] = (255, 0, 0)
    else:
        top, left = rng.integers(MARK + 4, size - 2 * MARK - 4, 2)
        img[top:top + MARK, left:left + MARK] = (0, 255, 0)
    return img


def shortcut_tensors(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n images (every other one marked: class 0) normalised as the card's preprocessing does, and their labels."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 2
    imgs = np.stack([shortcut_image(rng, marked=(y == 0)) for y in labels]).astype(np.float32) / 255.0
    x = (torch.from_numpy(imgs).permute(0, 3, 1, 2) - 0.5) / 0.5
    return x, torch.from_numpy(labels)


def train_shortcut_net(steps: int = 60, seed: int = 0) -> torch.nn.Module:
    """The tiny CNN trained for a few seconds on the shortcut data (it then tells fresh images apart)."""
    torch.manual_seed(seed)
    model = tiny_module().build(2)
    x, y = shortcut_tensors(128, seed)
    return train(model, x, y, steps, lr=1e-2, seed=seed)


def train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
          seed: int = 0) -> torch.nn.Module:
    """`steps` Adam steps of cross-entropy on seeded batches of 32 of (x, y); the model in evaluation mode."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (32,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def write_shortcut_folder(folder: Path, per_class: int, seed: int = 1) -> dict[str, bool]:
    """Class folders marked/ and object/ of PNGs; returns {image key: marked}."""
    rng = np.random.default_rng(seed)
    keys = {}
    for cls, marked in (("marked", True), ("object", False)):
        (folder / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            key = f"{cls}/{i:02d}.png"
            Image.fromarray(shortcut_image(rng, marked)).save(folder / key)
            keys[key] = marked
    return keys


def make_shortcut_run(root: Path, per_class: int = 10, method_settings: dict | None = None,
                      methods: list | None = None, settings=None) -> tuple[Path, dict[str, bool]]:
    """A finished folder run on the shortcut data set in `root`: the tiny CNN trained for seconds on it (its card in
    root/card), root/data (class folders marked/ and object/), the run in root/run with the Per-Sample Bottleneck.
    `methods` (keys) and `settings` (a FolderSettings) replace the Per-Sample Bottleneck and the defaults.
    Returns (run folder, {image key: marked}). Feature statistics come from plain background texture: the noise
    that replaces a feature carries neither the mark nor the object (statistics of the labelled images would
    inject half a green square everywhere)."""
    from iba_core.methods import get_method
    from iba_core.runs import finish_run, list_images, run_folder

    model = train_shortcut_net()
    keys = write_shortcut_folder(root / "data", per_class=per_class)
    rng = np.random.default_rng(7)
    (root / "background").mkdir(parents=True, exist_ok=True)
    for i in range(16):
        Image.fromarray(rng.integers(40, 160, (SIZE, SIZE, 3)).astype(np.uint8)).save(root / "background" / f"{i}.png")
    network = load_card(write_card(root / "card", ["marked", "object"], model=model, stats_images="../background"))
    top, items = list_images(root / "data", class_index=network.class_index)  # class folders give the labels
    chosen = [get_method(k) for k in methods] if methods else [
        get_method("iba_10", **{"precision": "fp32", "stats_samples": 32, **(method_settings or {})})]
    run_folder(network, items, chosen, root / "run", settings, root=top)
    finish_run(root / "run")
    return root / "run", keys
