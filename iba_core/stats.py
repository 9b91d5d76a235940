"""FeatureStats: per-element mean and std of a layer's output, estimated, cached and loaded.

The bottleneck replaces R by noise ε ~ N(μ_R, σ_R²) (paper §3.1), so μ_R and σ_R must be estimated
empirically. Only the network prefix up to the layer runs.
"""
from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import torch
from PIL import Image
from torch import nn

from .bottleneck import MIN_STD
from .images import ImageError, find_images, load_image, load_sample, sample_image_names
from .progress import ProgressFn
from .settings import ASSETS_DIR, RECOMMENDED_SAMPLES, cache_dir

#: Below this many samples the estimate is flagged as rough (the paper used ImageNet's training set).
SHIPPED_STATS_DIR = ASSETS_DIR / "stats"


@dataclass
class FeatureStats:
    """Mean and std of one layer's output, each shaped like the layer (C, H, W)."""

    mean: torch.Tensor
    std: torch.Tensor
    n: int
    model: str = ""
    weights: str = ""
    layer: str = ""
    source: str = ""
    skipped: int = 0  # unreadable files met while estimating
    #: Fraction of samples in which each element was non-zero (None: not recorded). The authors' code
    #: masks "inactive" units (non-zero in ≤ 1 % of the samples); BottleneckSettings.inactive_threshold.
    active: torch.Tensor | None = None

    @property
    def is_rough(self) -> bool:
        """True when fewer than RECOMMENDED_SAMPLES images back the estimate."""
        return self.n < RECOMMENDED_SAMPLES

    def describe(self) -> str:
        """A sentence for users: how many samples, from where, and whether that is enough."""
        text = f"{self.n} samples from {self.source or 'unknown source'}"
        if self.skipped:
            text += f" ({self.skipped} unreadable files skipped)"
        if self.is_rough:
            text += f"; fewer than {RECOMMENDED_SAMPLES}, so μ and σ are rough — point to an image folder for better ones"
        return text

    def floored_std(self, min_std: float = MIN_STD) -> torch.Tensor:
        """σ_R with a floor so dead channels (σ = 0) cannot divide by zero."""
        return self.std.clamp_min(min_std)

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> "FeatureStats":
        return FeatureStats(
            self.mean.to(device, dtype), self.std.to(device, dtype), self.n, self.model, self.weights,
            self.layer, self.source, self.skipped, None if self.active is None else self.active.to(device, dtype),
        )

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write an .npz atomically (a crash mid-write never leaves a half file behind)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(
            tmp,
            mean=self.mean.cpu().numpy().astype(np.float32),
            std=self.std.cpu().numpy().astype(np.float32),
            n=np.int64(self.n),
            skipped=np.int64(self.skipped),
            meta=np.array([self.model, self.weights, self.layer, self.source]),
            **({} if self.active is None else {"active": self.active.cpu().numpy().astype(np.float16)}),
        )
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FeatureStats":
        """Read an .npz written by `save`; raises ValueError if it is corrupt."""
        try:
            with np.load(path, allow_pickle=False) as data:
                mean, std = data["mean"], data["std"]
                n, skipped = int(data["n"]), int(data["skipped"])
                model, weights, layer, source = (str(s) for s in data["meta"])
                active = data["active"].astype(np.float32) if "active" in data.files else None
        except Exception as err:
            raise ValueError(f"Corrupt statistics file {path}: {err}") from err
        if mean.shape != std.shape or not np.isfinite(mean).all() or not np.isfinite(std).all() or n <= 0:
            raise ValueError(f"Corrupt statistics file {path}: inconsistent contents")
        if active is not None and active.shape != mean.shape:
            raise ValueError(f"Corrupt statistics file {path}: inconsistent contents")
        return cls(torch.from_numpy(mean), torch.from_numpy(std), n, model, weights, layer, source, skipped,
                   None if active is None else torch.from_numpy(active))


class _RunningMoments:
    """Chan et al.'s parallel update of mean and M2 in float64: stable for any number of batches."""

    def __init__(self) -> None:
        self.n = 0
        self.mean: torch.Tensor | None = None
        self.m2: torch.Tensor | None = None
        self.nonzero: torch.Tensor | None = None

    def update(self, batch: torch.Tensor) -> None:
        x = batch.detach().to(torch.float64)
        nb = x.shape[0]
        nonzero = (x != 0).sum(dim=0, dtype=torch.float64)
        self.nonzero = nonzero if self.nonzero is None else self.nonzero + nonzero
        mb = x.mean(dim=0)
        m2b = ((x - mb) ** 2).sum(dim=0)
        if self.mean is None:
            self.n, self.mean, self.m2 = nb, mb, m2b
            return
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * (nb / n)
        self.m2 = self.m2 + m2b + delta**2 * (self.n * nb / n)
        self.n = n

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.mean is None:
            raise ValueError("No samples to estimate statistics from.")
        var = self.m2 / max(self.n - 1, 1)
        return self.mean, var.sqrt()


def _moments(prefix: nn.Module, batches: Iterable[torch.Tensor], device, progress: ProgressFn | None,
             total: int) -> _RunningMoments:
    moments = _RunningMoments()
    with torch.inference_mode():
        for x in batches:
            moments.update(prefix(x.to(device)))
            if progress is not None:
                progress(moments.n, total, "images")
    return moments


def estimate_stats(
    prefix: nn.Module,
    batches: Iterable[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Run `prefix` over input batches; return (mean, std, n) of its output per element."""
    mean, std, n, _ = estimate_stats_and_activity(prefix, batches, device=device, progress=progress, total=total)
    return mean, std, n


def estimate_stats_and_activity(
    prefix: nn.Module,
    batches: Iterable[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """(mean, std, n, active): `estimate_stats` plus the fraction of samples in which each element is non-zero."""
    moments = _moments(prefix, batches, device, progress, total)
    mean, std = moments.result()
    return mean.float().cpu(), std.float().cpu(), moments.n, (moments.nonzero / moments.n).float().cpu()


# ---- image sources ----------------------------------------------------------------------


def _random_resized_crop(img: Image.Image, size: int, rng: random.Random) -> Image.Image:
    """Augmentation for the few offline photos: scale (0.25–1) and aspect (3/4–4/3) crop, random flip."""
    import torchvision.transforms.functional as TF

    w, h = img.size
    for _ in range(10):
        area = w * h * rng.uniform(0.25, 1.0)
        aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        cw, ch = int(round((area * aspect) ** 0.5)), int(round((area / aspect) ** 0.5))
        if 0 < cw <= w and 0 < ch <= h:
            left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
            break
    else:
        cw, ch, left, top = w, h, 0, 0
    out = TF.resized_crop(img, top, left, ch, cw, [size, size], antialias=True)
    return TF.hflip(out) if rng.random() < 0.5 else out


def _shrink(img: Image.Image, short_side: int) -> Image.Image:
    scale = short_side / min(img.size)
    if scale >= 1:
        return img
    return img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.LANCZOS)


def sample_photo_batches(
    preprocess, n: int, batch_size: int = 32, seed: int = 0
) -> Iterator[torch.Tensor]:
    """n augmented crops of the offline sample photos, normalised like the network expects."""
    import torchvision.transforms.functional as TF

    rng = random.Random(seed)
    # Shrink once: cropping the full-size photos (up to 1411 px) for every sample dominated the time.
    photos = [_shrink(load_sample(name), int(preprocess.crop_size * 1.5)) for name in sample_image_names()]
    done = 0
    while done < n:
        k = min(batch_size, n - done)
        crops = [_random_resized_crop(photos[(done + i) % len(photos)], preprocess.crop_size, rng) for i in range(k)]
        yield torch.stack([TF.normalize(TF.to_tensor(c), preprocess.mean, preprocess.std) for c in crops])
        done += k


class FolderBatches:
    """Batches from an image folder; unreadable files are skipped and counted, not fatal."""

    def __init__(self, files: list[Path], preprocess, batch_size: int):
        self.files, self.preprocess, self.batch_size = files, preprocess, batch_size
        self.skipped = 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        batch: list[torch.Tensor] = []
        for path in self.files:
            try:
                batch.append(self.preprocess(load_image(path))[0])
            except (ImageError, OSError):
                self.skipped += 1
                continue
            if len(batch) == self.batch_size:
                yield torch.stack(batch)
                batch = []
        if batch:
            yield torch.stack(batch)


def stats_cache_path(model: str, weights: str, layer: str, source_key: str) -> Path:
    """Cache file keyed by model, weights, layer and where the samples came from."""
    digest = hashlib.sha1(source_key.encode()).hexdigest()[:10]
    return cache_dir() / "stats" / f"{model}__{weights}__{layer}__{digest}.npz"


def compute_stats(
    loaded,
    layer: str,
    *,
    images: str | os.PathLike | None = None,
    n: int = RECOMMENDED_SAMPLES,
    batch_size: int = 32,
    progress: ProgressFn | None = None,
    seed: int = 0,
) -> FeatureStats:
    """Estimate statistics for `loaded` (a Network) at `layer` from a folder or the sample photos."""
    prefix = loaded.prefix(layer)
    if images is not None:
        files = find_images(images)[:n]
        if not files:
            raise FileNotFoundError(f"No images (jpg, png, …) found below {images}.")
        batches = FolderBatches(files, loaded.preprocess, batch_size)
        mean, std, count, active = estimate_stats_and_activity(prefix, batches, device=loaded.device,
                                                               progress=progress, total=len(files))
        source, skipped = f"folder {Path(images).expanduser().resolve()}", batches.skipped
        if count == 0:
            raise ValueError(f"None of the {len(files)} files below {images} could be read as an image.")
    else:
        batches = sample_photo_batches(loaded.preprocess, n, batch_size, seed)
        mean, std, count, active = estimate_stats_and_activity(prefix, batches, device=loaded.device,
                                                               progress=progress, total=n)
        source, skipped = "augmented crops of the offline sample photos", 0
    return FeatureStats(mean, std, count, loaded.key, loaded.weights_id, layer, source, skipped, active)


def get_stats(
    loaded,
    layer: str,
    *,
    images: str | os.PathLike | None = None,
    n: int = RECOMMENDED_SAMPLES,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> FeatureStats:
    """Cached statistics for (network, weights, layer, source); computed and saved on first use.

    A corrupt cache file is recomputed rather than raised.
    """
    source_key = f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"samples:{n}"
    path = stats_cache_path(loaded.key, loaded.weights_id, layer, source_key)
    if path.is_file() and not refresh:
        try:
            return FeatureStats.load(path)
        except ValueError:
            pass  # fall through: recompute and overwrite
    shipped = SHIPPED_STATS_DIR / path.name
    if shipped.is_file() and not refresh:
        # Statistics for the default network and layer ship with the app for a fast first result.
        try:
            stats = FeatureStats.load(shipped)
            stats.save(path)
            return stats
        except (ValueError, OSError):
            pass
    stats = compute_stats(loaded, layer, images=images, n=n, progress=progress)
    try:
        stats.save(path)
    except OSError:
        pass  # a read-only cache must not stop the user from getting a result
    return stats


def cached_stats(loaded, layer: str) -> list[FeatureStats]:
    """All readable cached statistics for (network, weights, layer), most samples first."""
    folder = cache_dir() / "stats"
    found = []
    for path in folder.glob(f"{loaded.key}__{loaded.weights_id}__{layer}__*.npz"):
        try:
            found.append(FeatureStats.load(path))
        except ValueError:
            continue
    return sorted(found, key=lambda s: -s.n)
