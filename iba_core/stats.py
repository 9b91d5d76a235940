"""FeatureStats: per-element mean and std of a layer's output, estimated, cached and loaded.

The bottleneck replaces R by noise ε ~ N(μ_R, σ_R²) (paper §3.1), so μ_R and σ_R must be estimated
empirically. Only the network prefix up to the layer runs.
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import warnings
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

#: Fewer distinct photos than this behind crop-based statistics makes them rough (see FeatureStats.is_rough).
RECOMMENDED_PHOTOS = 100

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
    #: Names of the offline photos whose augmented crops were the samples (empty for an image folder).
    photos: tuple[str, ...] = ()

    @property
    def is_rough(self) -> bool:
        """True when fewer than RECOMMENDED_SAMPLES samples, or crops of fewer than RECOMMENDED_PHOTOS
        distinct photos, back the estimate (crops of one photo are far from independent samples)."""
        return self.n < RECOMMENDED_SAMPLES or (bool(self.photos) and len(self.photos) < RECOMMENDED_PHOTOS)

    def includes(self, photo: str) -> bool:
        """Whether crops of the offline photo `photo` are among the samples (μ, σ then know that image)."""
        return photo in self.photos

    def describe(self) -> str:
        """A sentence for users: how many samples, from where, and whether that is enough."""
        if self.photos:
            text = f"{self.n} crops of {len(self.photos)} photos (the offline photos: {', '.join(self.photos)})"
        else:
            text = f"{self.n} samples from {self.source or 'unknown source'}"
        if self.skipped:
            text += f" ({self.skipped} unreadable files skipped)"
        if self.is_rough:
            few = (f"fewer than {RECOMMENDED_SAMPLES} samples" if self.n < RECOMMENDED_SAMPLES
                   else f"only {len(self.photos)} distinct photos")
            advice = ("add more images to the folder" if not self.photos and self.source
                      else "point to an image folder for better ones")
            text += f"; {few}, so μ and σ are rough — {advice}"
        return text

    def floored_std(self, min_std: float = MIN_STD) -> torch.Tensor:
        """σ_R with a floor so dead channels (σ = 0) cannot divide by zero."""
        return self.std.clamp_min(min_std)

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> "FeatureStats":
        return FeatureStats(
            self.mean.to(device, dtype), self.std.to(device, dtype), self.n, self.model, self.weights,
            self.layer, self.source, self.skipped, None if self.active is None else self.active.to(device, dtype),
            self.photos,
        )

    # ---- persistence ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike, compact: bool = False) -> Path:
        """Write an .npz atomically (a crash mid-write never leaves a half file behind).

        compact: μ and σ as float16 (for the statistics that ship in assets/; relative error ≤ 5e-4, far
        below the estimate's own sampling error).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        dtype = np.float16 if compact else np.float32
        np.savez_compressed(
            tmp,
            mean=self.mean.cpu().numpy().astype(dtype),
            std=self.std.cpu().numpy().astype(dtype),
            n=np.int64(self.n),
            skipped=np.int64(self.skipped),
            meta=np.array([self.model, self.weights, self.layer, self.source]),
            photos=np.array(self.photos, dtype=str),
            **({} if self.active is None else {"active": self.active.cpu().numpy().astype(np.float16)}),
        )
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FeatureStats":
        """Read an .npz written by `save`; raises ValueError if it is corrupt."""
        try:
            with np.load(path, allow_pickle=False) as data:
                mean, std = data["mean"].astype(np.float32), data["std"].astype(np.float32)
                n, skipped = int(data["n"]), int(data["skipped"])
                model, weights, layer, source = (str(s) for s in data["meta"])
                active = data["active"].astype(np.float32) if "active" in data.files else None
                photos = tuple(str(p) for p in data["photos"]) if "photos" in data.files else ()
        except Exception as err:
            raise ValueError(f"Corrupt statistics file {path}: {err}") from err
        if mean.shape != std.shape or not np.isfinite(mean).all() or not np.isfinite(std).all() or n <= 0:
            raise ValueError(f"Corrupt statistics file {path}: inconsistent contents")
        if active is not None and active.shape != mean.shape:
            raise ValueError(f"Corrupt statistics file {path}: inconsistent contents")
        return cls(torch.from_numpy(mean), torch.from_numpy(std), n, model, weights, layer, source, skipped,
                   None if active is None else torch.from_numpy(active), photos)


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


def offline_photos(extended: bool = False) -> dict[str, "Image.Image"]:
    """The real photos this machine has without a download, by name.

    Always the app's colour sample photos (`images.sample_image_names`). extended=True adds the other
    real photographs that ship inside installed packages: scikit-image's right view of the stereo
    motorcycle pair and its grey-scale photos `camera`, `clock`, `coins` (as RGB), and matplotlib's
    `grace_hopper.jpg` (skipped where matplotlib is missing).
    """
    photos: dict[str, Image.Image] = {name: load_sample(name) for name in sample_image_names()}
    if not extended:
        return photos
    import skimage.data

    try:
        right = np.ascontiguousarray(skimage.data.stereo_motorcycle()[1])
        photos["motorcycle_right"] = load_image(Image.fromarray(right))
        for name in ("camera", "clock", "coins"):
            photos[name] = load_image(Image.fromarray(np.ascontiguousarray(getattr(skimage.data, name)())))
    except Exception as err:  # noqa: BLE001 - an older scikit-image may lack one: fewer photos, not a failure
        warnings.warn(f"Some scikit-image photos are unavailable ({err}).", stacklevel=2)
    try:
        from matplotlib import cbook

        with cbook.get_sample_data("grace_hopper.jpg") as f:
            photos["grace_hopper"] = load_image(f.read())
    except Exception:  # noqa: BLE001 - matplotlib is optional
        pass
    return photos


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


def photo_pool(exclude: Iterable[str] = ()) -> list[str]:
    """Names of the offline photos statistics are estimated from: all of `offline_photos(extended=True)`."""
    skip = set(exclude)
    return [name for name in offline_photos(extended=True) if name not in skip]


def sample_photo_batches(
    preprocess, n: int, batch_size: int = 32, seed: int = 0, photos: Iterable[str] | None = None
) -> Iterator[torch.Tensor]:
    """n augmented crops of the offline photos (`photo_pool()` unless named), normalised for the network."""
    import torchvision.transforms.functional as TF

    rng = random.Random(seed)
    pool = offline_photos(extended=True)
    names = list(photos) if photos is not None else photo_pool()
    # Shrink once: cropping the full-size photos (up to 1411 px) for every sample dominated the time.
    photos = [_shrink(pool[name], int(preprocess.crop_size * 1.5)) for name in names]
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
    safe = lambda text: re.sub(r"[^\w.+-]", "_", text)  # noqa: E731 - "card:x", "torchvision:y" keys → file names
    return cache_dir() / "stats" / f"{safe(model)}__{safe(weights)}__{safe(layer)}__{digest}.npz"


#: Part of the cache key of statistics estimated from the offline photos: bump when the pool changes.
PHOTO_SOURCE = "offline-photos-13"


def stats_source_key(images: str | os.PathLike | None, n: int) -> str:
    return f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"{PHOTO_SOURCE}:{n}"


def layer_outputs(network, layers: Iterable[str]):
    """A module mapping an image batch to {layer: output} for several layers in one forward pass.

    Split networks run their (BatchNorm-folded) stages in order, stopping after the last layer asked for;
    others run once with forward hooks on the layers' modules.
    """
    wanted = list(dict.fromkeys(layers))
    for layer in wanted:
        network.spec.check_layer(layer)
    if network.can_split:
        key = ("folded_stages",)
        if key not in network.memo:
            from .fast import fold_batchnorms

            network.memo[key] = [(name, fold_batchnorms(module)) for name, module in network.stages()]
        stages = network.memo[key]
        last = max(i for i, (name, _) in enumerate(stages) if name in wanted)

        def run(x: torch.Tensor) -> dict[str, torch.Tensor]:
            out, h = {}, x.contiguous(memory_format=torch.channels_last)
            for name, module in stages[: last + 1]:
                h = module(h)
                if name in wanted:
                    out[name] = h
            return out

        return run

    modules = {layer: network.hook_module(layer) for layer in wanted}

    def run_hooked(x: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        handles = [m.register_forward_hook(lambda _m, _i, o, name=name: out.setdefault(name, o.detach().clone()))
                   for name, m in modules.items()]
        try:
            network.model(x)
        finally:
            for h in handles:
                h.remove()
        return out

    return run_hooked


def compute_all_stats(
    network,
    layers: Iterable[str] | None = None,
    *,
    images: str | os.PathLike | None = None,
    n: int = RECOMMENDED_SAMPLES,
    batch_size: int = 32,
    progress: ProgressFn | None = None,
    seed: int = 0,
) -> dict[str, FeatureStats]:
    """Statistics of several layers (default: all) from ONE pass over a folder's images or the offline photos."""
    layers = list(layers or network.spec.layers)
    photos: tuple[str, ...] = ()
    if images is not None:
        files = find_images(images)[:n]
        if not files:
            raise FileNotFoundError(f"No images (jpg, png, …) found below {images}.")
        batches: Iterable[torch.Tensor] = FolderBatches(files, network.preprocess, batch_size)
        total, source = len(files), f"folder {Path(images).expanduser().resolve()}"
    else:
        photos = tuple(photo_pool())
        batches = sample_photo_batches(network.preprocess, n, batch_size, seed, photos)
        total, source = n, f"augmented crops of {len(photos)} offline photos"
    run = layer_outputs(network, layers)
    moments = {layer: _RunningMoments() for layer in layers}
    seen = 0
    with torch.inference_mode():
        for x in batches:
            for layer, out in run(x.to(network.device)).items():
                moments[layer].update(out)
            seen += x.shape[0]
            if progress is not None:
                progress(seen, total, "images")
    skipped = getattr(batches, "skipped", 0)
    if seen == 0:
        raise ValueError(f"None of the {total} files below {images} could be read as an image.")
    out = {}
    for layer, m in moments.items():
        mean, std = m.result()
        out[layer] = FeatureStats(mean.float().cpu(), std.float().cpu(), m.n, network.key, network.weights_id, layer,
                                  source, skipped, (m.nonzero / m.n).float().cpu(), photos)
    return out


def compute_stats(network, layer: str, **kwargs) -> FeatureStats:
    """Statistics for one layer (`compute_all_stats` for just that layer)."""
    return compute_all_stats(network, [layer], **kwargs)[layer]


def get_stats(
    network,
    layer: str,
    *,
    images: str | os.PathLike | None = None,
    n: int = RECOMMENDED_SAMPLES,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> FeatureStats:
    """Cached statistics for (network, weights, layer, source); computed and saved on first use.

    On a miss, every layer of the network is estimated in the same pass and cached, so the next layer
    asked for costs nothing. Shipped statistics (assets/stats) count as cached. A corrupt cache file
    is recomputed rather than raised.
    """
    network.spec.check_layer(layer)
    source_key = stats_source_key(images, n)
    if not refresh:
        found = _stored(network, layer, source_key)
        if found is not None:
            return found
    missing = [name for name in network.spec.layers
               if name == layer or refresh or _stored(network, name, source_key) is None]
    fresh = compute_all_stats(network, missing, images=images, n=n, progress=progress)
    for name, stats in fresh.items():
        try:
            stats.save(stats_cache_path(network.key, network.weights_id, name, source_key))
        except OSError:
            pass  # a read-only cache must not stop the user from getting a result
    return fresh[layer]


def stored_stats(network, layer: str, *, images: str | os.PathLike | None = None,
                 n: int = RECOMMENDED_SAMPLES) -> FeatureStats | None:
    """The statistics `get_stats` would return without estimating anything, or None."""
    return _stored(network, layer, stats_source_key(images, n))


def _stored(network, layer: str, source_key: str) -> FeatureStats | None:
    """From the cache, else from the shipped statistics (copied into the cache), else None."""
    path = stats_cache_path(network.key, network.weights_id, layer, source_key)
    for candidate in (path, SHIPPED_STATS_DIR / path.name):
        if candidate.is_file():
            try:
                stats = FeatureStats.load(candidate)
            except (ValueError, OSError):
                continue
            if candidate != path:
                try:
                    stats.save(path)
                except OSError:
                    pass
            return stats
    return None


def cached_stats(network, layer: str) -> list[FeatureStats]:
    """All readable cached statistics for (network, weights, layer), most samples first."""
    folder = cache_dir() / "stats"
    found = []
    for path in folder.glob(stats_cache_path(network.key, network.weights_id, layer, "").name.rsplit("__", 1)[0] + "__*.npz"):
        try:
            found.append(FeatureStats.load(path))
        except ValueError:
            continue
    return sorted(found, key=lambda s: -s.n)
