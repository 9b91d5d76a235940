"""Tiny networks and stand-ins for the metric tests (answers known in closed form)."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import nn

SIZE, TILE = 32, 8  # 4×4 = 16 tiles


class OneTileNet(nn.Module):
    """Two classes; logit 0 = gain · mean of the input inside one tile, logit 1 = 0."""

    def __init__(self, tile_index: int = 5, tile: int = TILE, size: int = SIZE, gain: float = 2.0):
        super().__init__()
        self.r, self.c = divmod(tile_index, size // tile)
        self.tile, self.gain = tile, gain
        self.scale = nn.Parameter(torch.ones(1))  # so the model has a parameter (and a device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.tile
        region = x[:, :, self.r * t:(self.r + 1) * t, self.c * t:(self.c + 1) * t]
        a = self.gain * self.scale * region.mean(dim=(1, 2, 3))
        return torch.stack([a, torch.zeros_like(a)], dim=1)


class SmallConvNet(nn.Module):
    """A random non-linear conv net with 3 classes (fixed seed)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1, stride=2)
        self.fc = nn.Linear(6 * 16 * 16, 3)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))
        h = torch.tanh(self.conv2(h))
        return self.fc(h.flatten(1))


class Counting(nn.Module):
    """Wraps a model and counts the images it is run on."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.images = 0
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.images += x.shape[0]
        self.calls += 1
        return self.inner(x)


class TinyPreprocess:
    """PIL → (1, 3, SIZE, SIZE) in [0, 1], with the attributes the bbox runner reads."""

    resize, crop_size = SIZE, SIZE

    def load(self, source) -> Image.Image:
        """The image a file holds, as `spec.Preprocess.load` reads it for an RGB network."""
        from iba_core.images import load_image

        return load_image(source)

    def __call__(self, image: Image.Image) -> torch.Tensor:
        arr = np.asarray(image.convert("RGB").resize((SIZE, SIZE)), dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1)[None].contiguous()


class StubLoaded:
    """The parts of a Network the evaluation loop uses."""

    def __init__(self, model: nn.Module, key: str = "stub"):
        self.model, self.key, self.weights_id = model, key, "w0"
        self.categories = ["zero", "one", "two"]  # SmallConvNet's classes: methods need not probe the network
        self.device = torch.device("cpu")
        self.preprocess = TinyPreprocess()


def one_tile_image(tile_index: int = 5, value: float = 3.0) -> torch.Tensor:
    x = torch.zeros(1, 3, SIZE, SIZE)
    r, c = divmod(tile_index, SIZE // TILE)
    x[:, :, r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE] = value
    return x


def write_images(folder, n: int, seed: int = 0) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(n):
        arr = (rng.random((SIZE, SIZE, 3)) * 255).astype(np.uint8)
        path = folder / f"img{i:02d}.png"
        Image.fromarray(arr).save(path)
        paths.append(path)
    return paths
