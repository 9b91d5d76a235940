"""Image batches for the statistics (`image_sources`): normalised as one tensor per batch (issue #39's first run
of a new model: per-image tensor operations were most of the preprocessing on a busy 2-core CPU), with the same
numbers, the same statistics, and progress after every batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from iba_core.band_images import MultiBandImage
from iba_core.feature_stats import compute_stats
from iba_core.image_sources import FolderBatches, sample_photo_batches
from iba_core.networks import network_from_module
from iba_core.networks.spec import Preprocess

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def per_image(self, crops):
    """The former way: `normalise` one image at a time, stacked."""
    return torch.cat([self.normalise(c) for c in crops])


def photos(folder, n: int = 10):
    """`n` random photos of several sizes and modes (JPEG, PNG, gray, RGBA) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = 60 + 7 * i, 90 - 3 * i
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        image = image.convert(("RGB", "L", "RGBA")[i % 3])
        image.save(folder / f"{i:02d}.{'jpg' if i % 3 == 0 else 'png'}")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")  # skipped and counted, as before
    return folder


def test_a_batch_is_normalised_to_the_same_numbers(tmp_path):
    pre = Preprocess(MEAN, STD, resize=40, crop=32, interpolation="bicubic")
    crops = [pre.crop(pre.load(path)) for path in sorted(photos(tmp_path / "p").glob("*[0-9].*"))]
    batch = pre.normalise_batch(crops)
    assert batch.shape == (10, 3, 32, 32) and batch.dtype == torch.float32
    assert torch.equal(batch, per_image(pre, crops))  # bit for bit
    gray = Preprocess((0.5,), (0.25,), resize=40, crop=32)  # a 1-channel network: one image at a time, as before
    assert torch.equal(gray.normalise_batch(crops[:3]), per_image(gray, crops[:3]))
    bands = Preprocess((0.1,) * 4, (0.2,) * 4, resize=40, crop=32, channels=4)
    cubes = [MultiBandImage(np.random.default_rng(i).random((32, 32, 4), dtype=np.float32)) for i in range(2)]
    assert torch.equal(bands.normalise_batch(cubes), per_image(bands, cubes))


def test_folder_and_photo_batches_are_unchanged(tmp_path, monkeypatch):
    pre = Preprocess(MEAN, STD, resize=40, crop=32, interpolation="bicubic")
    files = sorted(photos(tmp_path / "p").iterdir())
    batches = FolderBatches(files, pre, 4)
    got = list(batches)
    assert [b.shape[0] for b in got] == [4, 4, 2] and batches.skipped == 1
    photo_batches = list(sample_photo_batches(pre, 6, 4, seed=2))
    monkeypatch.setattr(Preprocess, "normalise_batch", per_image)
    assert all(torch.equal(a, b) for a, b in zip(got, FolderBatches(files, pre, 4), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(photo_batches, sample_photo_batches(pre, 6, 4, seed=2), strict=True))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


def test_statistics_from_a_folder_are_unchanged_and_report_progress(tmp_path, monkeypatch):
    network = network_from_module(Tiny().eval(), "tiny-stats")
    folder = photos(tmp_path / "p")
    reports: list[tuple[int, int]] = []
    stats = compute_stats(network, "conv", images=folder, n=11, batch_size=4,
                          progress=lambda done, total, unit: reports.append((done, total)))
    assert reports == [(4, 11), (8, 11), (10, 11)]  # after every batch, of the folder's 11 files
    assert stats.n == 10 and stats.skipped == 1  # the broken file skipped
    monkeypatch.setattr(Preprocess, "normalise_batch", per_image)
    before = compute_stats(network, "conv", images=folder, n=11, batch_size=4)
    np.testing.assert_allclose(stats.mean.numpy(), before.mean.numpy(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(stats.std.numpy(), before.std.numpy(), rtol=1e-4, atol=1e-7)
