"""FeatureStats: per-element mean and std of a layer's output, estimated, validated, cached and loaded.

The bottleneck replaces R by noise ε ~ N(μ_R, σ_R²) (paper §3.1), so μ_R and σ_R must be estimated
empirically. Only the network up to the layer asked for runs, over one batch at a time (running sums in
float64), with progress (done, total) after each batch; a progress callback that returns False (or raises)
stops the estimate and nothing is cached.

Files go through `cache.py`: a checksum of the contents and the identity of what made them (network,
weights, layer, image source and sample count, format). On load they are also validated (`problem`);
a file that fails any of it is warned about, removed and estimated again.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from . import cache
from .bottleneck import MIN_STD
from .image_sources import FolderBatches, photo_pool, sample_photo_batches
from .images import MIN_SIDE, find_images
from .model_state import layer_tensor
from .progress import ProgressFn
from .errors import MissingFileError, UserError, check_range
from .settings import ASSETS_DIR, MAX_SAMPLES, RECOMMENDED_SAMPLES, STATS_SAMPLES_ENV, cache_dir, stats_samples

#: Fewer distinct photos than this behind crop-based statistics makes them rough (see FeatureStats.is_rough).
RECOMMENDED_PHOTOS = 100

#: Statistics that ship with the app (the offline network, every layer), named as in the cache.
SHIPPED_STATS_DIR = ASSETS_DIR / "stats"

#: Default samples from the offline photos for a network that ships no statistics and has no image folder
#: (torchvision:NAME, a model card without stats_images): its first step starts within a minute on a 2-core
#: CPU. Such statistics are rough and say so; IBA_STATS_SAMPLES or an image folder gives more.
PHOTO_SAMPLES = 100

#: Layout of the statistics files (part of their identity): bump when it changes.
STATS_FORMAT = 2

#: σ at or below this counts as zero; statistics with σ zero at more than this fraction of the active units
#: are broken (a zeroed file turned one run into 13.2 billion bits).
ZERO_STD = 1e-12
MAX_ZERO_STD_FRACTION = 0.5


class EstimationCancelled(Exception):
    """The progress callback stopped an estimate; nothing was cached."""


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
    skipped: int = 0  # files met while estimating that could not be used (unreadable, too small, other bands)
    #: Fraction of samples in which each element was non-zero (None: not recorded). The authors' code
    #: masks "inactive" units (non-zero in ≤ 1 % of the samples); BottleneckSettings.inactive_threshold.
    active: torch.Tensor | None = None
    #: Names of the offline photos whose augmented crops were the samples (empty for an image folder).
    photos: tuple[str, ...] = ()
    #: Where the samples came from and how many were asked for (`stats_source_key`): part of the cache identity.
    source_key: str = ""

    @property
    def is_rough(self) -> bool:
        """True when fewer than RECOMMENDED_SAMPLES samples, or crops of fewer than RECOMMENDED_PHOTOS
        distinct photos, back the estimate (crops of one photo are far from independent samples)."""
        return self.n < RECOMMENDED_SAMPLES or (bool(self.photos) and len(self.photos) < RECOMMENDED_PHOTOS)

    @property
    def requested(self) -> int | None:
        """Samples asked for (the count in `source_key`), or None where not recorded. `n` is what was used: a
        folder with fewer usable images than asked for gives fewer (all of them)."""
        count = self.source_key.rpartition(":")[2]
        return int(count) if count.isdigit() else None

    @property
    def shortfall(self) -> str | None:
        """A sentence when fewer samples were used than asked for (a folder with fewer usable images), else None."""
        asked = self.requested
        if asked is None or self.n >= asked:
            return None
        return (f"{asked} samples were asked for, but the folder gave only {self.n} usable images, so all "
                f"{self.n} were used")

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
            text += f" ({self.skipped} unreadable or unusable files skipped: another channel count, or under {MIN_SIDE} px)"
        if self.shortfall:
            text += f" — {self.shortfall}"
        if self.is_rough:
            few = (f"fewer than {RECOMMENDED_SAMPLES} samples" if self.n < RECOMMENDED_SAMPLES
                   else f"only {len(self.photos)} distinct photos")
            if not self.photos and self.source:
                advice = "add more images to the folder"
            elif self.n < RECOMMENDED_SAMPLES:
                advice = (f"ask for more crops ({STATS_SAMPLES_ENV}={RECOMMENDED_SAMPLES}, or --n on the command "
                          "line) or point to an image folder")
            else:
                advice = "point to an image folder for better ones"
            text += f"; {few}, so μ and σ are rough — {advice}"
        return text

    def floored_std(self, min_std: float = MIN_STD) -> torch.Tensor:
        """σ_R with a floor so dead channels (σ = 0) cannot divide by zero."""
        return self.std.clamp_min(min_std)

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> "FeatureStats":
        return FeatureStats(
            self.mean.to(device, dtype), self.std.to(device, dtype), self.n, self.model, self.weights,
            self.layer, self.source, self.skipped, None if self.active is None else self.active.to(device, dtype),
            self.photos, self.source_key,
        )

    def problem(self) -> str | None:
        """Why these statistics cannot be right, or None: shapes that differ, values that are not finite,
        a negative σ, or σ at zero (no noise to inject) at most of the units that are active."""
        if self.n <= 0:
            return "no samples behind them"
        if self.mean.shape != self.std.shape or (self.active is not None and self.active.shape != self.mean.shape):
            return "mean, std and activity differ in shape"
        if not (torch.isfinite(self.mean).all() and torch.isfinite(self.std).all()):
            return "values that are not finite"
        if (self.std < 0).any():
            return "a negative standard deviation"
        active = torch.ones_like(self.std, dtype=torch.bool) if self.active is None else self.active > 0
        if active.any() and (self.std[active] <= ZERO_STD).float().mean() > MAX_ZERO_STD_FRACTION:
            return "σ is zero at most of the units that are active"
        return None

    # ---- persistence ---------------------------------------------------------------------
    def identity(self) -> dict:
        """What made these statistics: the part of a file's metadata that must match to reuse it."""
        return {"format": STATS_FORMAT, "network": self.model, "weights": self.weights, "layer": self.layer,
                "source_key": self.source_key}

    def save(self, path: str | os.PathLike, compact: bool = False) -> Path:
        """Write an .npz through `cache.save_arrays` (atomic, with a checksum and `identity`).

        compact: μ and σ as float16 (for the statistics that ship in assets/; relative error ≤ 5e-4, far
        below the estimate's own sampling error).
        """
        dtype = np.float16 if compact else np.float32
        arrays = {"mean": self.mean.cpu().numpy().astype(dtype), "std": self.std.cpu().numpy().astype(dtype)}
        if self.active is not None:
            arrays["active"] = self.active.cpu().numpy().astype(np.float16)
        meta = {**self.identity(), "samples": self.n, "skipped": self.skipped, "source": self.source,
                "photos": list(self.photos)}
        cache.save_arrays(path, arrays, meta)
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, expect: dict | None = None) -> "FeatureStats":
        """Read a file written by `save`; ValueError when it is missing or unusable (then also removed)."""
        stats = _read(Path(path), expect)
        if stats is None:
            raise UserError(f"The statistics file {path} is missing or unusable; estimate the statistics again.")
        return stats


def _from_file(arrays: Mapping[str, np.ndarray], meta: dict) -> FeatureStats:
    """FeatureStats from a file's arrays and metadata (KeyError, TypeError or ValueError when malformed)."""
    if not isinstance(meta["photos"], list) or not isinstance(meta["samples"], int):
        raise TypeError("malformed metadata")
    active = arrays.get("active")
    return FeatureStats(
        torch.from_numpy(arrays["mean"].astype(np.float32)), torch.from_numpy(arrays["std"].astype(np.float32)),
        meta["samples"], str(meta["network"]), str(meta["weights"]), str(meta["layer"]), str(meta["source"]),
        int(meta["skipped"]), None if active is None else torch.from_numpy(active.astype(np.float32)),
        tuple(str(p) for p in meta["photos"]), str(meta["source_key"]),
    )


def _read(path: Path, expect: dict | None) -> FeatureStats | None:
    """Statistics from a cache file, or None (a damaged, mismatched or implausible file: warned, removed)."""
    def check(arrays: dict, meta: dict) -> str | None:
        try:
            return _from_file(arrays, meta).problem()
        except (KeyError, TypeError, ValueError):
            return "malformed contents"

    loaded = cache.load_arrays(path, expect={"format": STATS_FORMAT, **(expect or {})}, check=check)
    return None if loaded is None else _from_file(*loaded)


class RunningMoments:
    """Chan et al.'s parallel update of mean and M2 in float64: stable for any number of batches, and only
    the running sums are kept (memory of one layer's size, whatever the number of samples)."""

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
        """(mean, std) in float64."""
        if self.mean is None:
            raise UserError("No samples to estimate statistics from (no image could be read, or every one was too small).")
        var = self.m2 / max(self.n - 1, 1)
        return self.mean, var.sqrt()

    def summary(self) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
        """(mean, std, n, active) as float32 on the CPU; active: the fraction of samples where each element is
        non-zero."""
        mean, std = self.result()
        return mean.float().cpu(), std.float().cpu(), self.n, (self.nonzero / self.n).float().cpu()


#: `FeatureStats.source` of the standard-normal prior (M2IB's): not estimated from any image.
STANDARD_NORMAL_SOURCE = "standard normal prior (not estimated)"


def standard_normal_stats(shape: Sequence[int], layer: str = "", model: str = "", weights: str = "") -> FeatureStats:
    """μ = 0, σ = 1 for every element of a layer shaped `shape`: M2IB's prior (Wang et al., NeurIPS 2023; their
    `scripts/iba.py:105-113` draws ε ~ N(0, 1) and takes the KL against N(0, 1) on the raw features, and
    `methods.py:33-35` hands the estimator zeros). With them the bottleneck's Z and KL are exactly M2IB's
    (`bottleneck.kl_per_element` with r = R)."""
    shape = tuple(int(d) for d in shape)
    return FeatureStats(torch.zeros(shape), torch.ones(shape), 0, model, weights, layer, STANDARD_NORMAL_SOURCE)


def estimate_moments(
    forward: Callable[[torch.Tensor], Mapping[str, torch.Tensor]],
    batches: Iterable[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[dict[str, RunningMoments], int]:
    """The one estimator: ({output name: running moments}, images seen) of `forward`'s outputs over `batches`.

    One batch at a time: a batch and its outputs are dropped before the next is drawn. After each batch
    progress(done, total, "images") is called; when it returns False (or raises) the estimate stops
    (EstimationCancelled, or its exception) and nothing is returned to cache.
    """
    moments: dict[str, RunningMoments] = {}
    seen = 0
    with torch.inference_mode():
        for x in batches:
            outputs = forward(x.to(device))
            for name, out in outputs.items():
                moments.setdefault(name, RunningMoments()).update(out)
            seen += x.shape[0]
            del x, outputs  # hold at most one batch: the iterator makes the next one after this is gone
            if progress is not None and progress(seen, total, "images") is False:
                raise EstimationCancelled(f"Estimating statistics was stopped after {seen} of {total} images; "
                                          "nothing was kept.")
    return moments, seen


def estimate_stats(
    prefix: nn.Module,
    batches: Iterable[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Run `prefix` over input batches; return (mean, std, n) of its output per element (`estimate_moments`)."""
    moments, _ = estimate_moments(lambda x: {"": prefix(x)}, batches, device=device, progress=progress, total=total)
    if "" not in moments:
        raise UserError("No samples to estimate statistics from (no image could be read, or every one was too small).")
    return moments[""].summary()[:3]


def stats_cache_path(model: str, weights: str, layer: str, source_key: str) -> Path:
    """Cache file keyed by model, weights, layer and where the samples came from (also the shipped files' name)."""
    return cache.cache_file("stats", model, weights, layer, source_key, suffix=".npz")


#: Part of the cache key of statistics estimated from the offline photos: bump when the pool changes.
PHOTO_SOURCE = "offline-photos-13"


def stats_source_key(images: str | os.PathLike | None, n: int) -> str:
    """Where the samples come from and how many: an image folder's absolute path, or the offline photos."""
    return f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"{PHOTO_SOURCE}:{n}"


def default_samples(network, images: str | os.PathLike | None = None) -> int:
    """Samples behind statistics unless told: RECOMMENDED_SAMPLES from an image folder or where statistics
    ship (the offline network), else PHOTO_SAMPLES (quick, and rough). The app and the methods let
    IBA_STATS_SAMPLES override it (`app_samples`); `get_stats` and the command line (--n) do not."""
    shipped = SHIPPED_STATS_DIR / stats_cache_path(network.key, network.weights_id, network.spec.default_layer,
                                                   stats_source_key(None, RECOMMENDED_SAMPLES)).name
    return RECOMMENDED_SAMPLES if images or shipped.is_file() else PHOTO_SAMPLES


def app_samples(network, images: str | os.PathLike | None = None) -> int:
    """Samples behind the statistics the app and the methods estimate: IBA_STATS_SAMPLES, else `default_samples`."""
    return stats_samples(default_samples(network, images))


def run_stats_source(network, images: str | os.PathLike | None = None, n: int | None = None) -> tuple[str | None, int]:
    """(image folder, samples) behind a run's statistics: the folder given, else the model card's `stats_images`,
    else None (the offline photos); the samples given, else `app_samples` (IBA_STATS_SAMPLES, else a default)."""
    folder = str(images) if images else (getattr(network.spec, "stats_images", None) or None)
    return folder, int(n or app_samples(network, folder))


def find_run_stats(network, layer: str, *, images: str | os.PathLike | None = None,
                   n: int | None = None) -> FeatureStats | None:
    """The statistics `stats_for_run` would use without estimating anything, or None (shipped ones are copied
    into the cache first: `copy_shipped_stats`)."""
    folder, n = run_stats_source(network, images, n)
    if folder:
        return stored_stats(network, layer, images=folder, n=n)
    photos = [s for s in cached_stats(network, layer) if s.source_key.startswith(f"{PHOTO_SOURCE}:")]
    if photos and photos[0].n >= n:
        return photos[0]  # the most samples of the offline photos already estimated
    return stored_stats(network, layer, n=n)


def stats_for_run(network, layer: str, *, images: str | os.PathLike | None = None, n: int | None = None,
                  progress: ProgressFn | None = None) -> FeatureStats:
    """One layer's statistics by the one policy (`stats_for_layers`)."""
    return stats_for_layers(network, [layer], images=images, n=n, progress=progress)[layer]


def stats_for_layers(network, layers: Sequence[str], *, images: str | os.PathLike | None = None,
                     n: int | None = None, progress: ProgressFn | None = None) -> dict[str, FeatureStats]:
    """The one policy for the statistics of a run — one layer or every layer of a range (CoIBA's) — whichever front
    end asks (the app, `attribute IMG`, `attribute FOLDER`, the methods, `evaluate`, `train-readout`), so one image
    gets the same bits everywhere:

    - the images: `images`, else the model card's folder, else the offline photos (`run_stats_source`);
    - the samples: `n`, else IBA_STATS_SAMPLES, else the network's default (`app_samples`);
    - for a folder, its statistics with that many samples; for the photos, the cached ones with the most samples
      if they have at least n, else those of n samples — from the cache, the shipped files, or estimated now (and
      cached), the missing layers in ONE pass over the images (`compute_all_stats`).
    A folder that is not there raises MissingFileError with a sentence saying so.
    """
    folder, n = run_stats_source(network, images, n)
    check_range("The number of samples", n, 1, MAX_SAMPLES, integer=True)
    if folder and not Path(folder).expanduser().is_dir():
        raise MissingFileError(f"Image folder not found: {Path(folder).expanduser()}. Enter a folder that holds "
                               "images.")
    found = {layer: find_run_stats(network, layer, images=folder, n=n) for layer in layers}
    missing = [layer for layer in layers if found[layer] is None]
    if len(missing) == 1:
        found[missing[0]] = get_stats(network, missing[0], images=Path(folder).expanduser() if folder else None, n=n,
                                      progress=progress)
    elif missing:
        fresh = compute_all_stats(network, missing, images=Path(folder).expanduser() if folder else None, n=n,
                                  progress=progress)
        for layer, stats in fresh.items():
            _keep(stats, layer)  # cached as `get_stats` keeps them, so a single-layer run finds them too
            found[layer] = stats
    return {layer: found[layer] for layer in layers}


class _Enough(Exception):
    """Raised by a forward hook once every layer asked for has its output: the rest of the network is skipped."""


def layer_outputs(network, layers: Iterable[str]) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """A function mapping an image batch to {layer: output} for the layers asked for, in one forward pass
    that stops after the last of them.

    Split networks run their (BatchNorm-folded) stages in order up to the last layer asked for; others run
    with forward hooks on the layers' modules, and the pass is cut off once all of them have fired.
    """
    wanted = list(dict.fromkeys(layers))
    for layer in wanted:
        network.spec.check_layer(layer)
    if network.can_split:
        def fold() -> list:
            from .fast import fold_batchnorms

            return [(name, fold_batchnorms(module)) for name, module in network.stages()]

        stages = network.memo.folded_stages.get_or_make((), fold)
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

        def keep(name: str, output) -> None:
            # a clone: a later in-place op must not change it; a block's tuple output: its first tensor
            out.setdefault(name, layer_tensor(output).detach().clone())
            if len(out) == len(modules):
                raise _Enough

        handles = [m.register_forward_hook(lambda _m, _i, o, name=name: keep(name, o)) for name, m in modules.items()]
        try:
            network.model(x)
        except _Enough:
            pass
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
    """Statistics of the layers asked for (default: every layer, for the shipped files and `stats --all-layers`)
    from ONE pass over a folder's images or the offline photos."""
    layers = list(layers or network.spec.layers)
    photos: tuple[str, ...] = ()
    if images is not None:
        files = find_images(images)[:n]
        if not files:
            raise MissingFileError(f"No images (jpg, png, …) found below {images}.")
        batches: Iterable[torch.Tensor] = FolderBatches(files, network.preprocess, batch_size)
        total, source = len(files), f"folder {Path(images).expanduser().resolve()}"
    else:
        photos = tuple(photo_pool())
        batches = sample_photo_batches(network.preprocess, n, batch_size, seed, photos)
        total, source = n, f"augmented crops of {len(photos)} offline photos"
    moments, seen = estimate_moments(layer_outputs(network, layers), batches, device=network.device,
                                     progress=progress, total=total)
    if seen == 0:
        raise UserError(f"None of the {total} files below {images} could be read as an image.")
    skipped, key = getattr(batches, "skipped", 0), stats_source_key(images, n)
    out = {}
    for layer in layers:
        mean, std, count, active = moments[layer].summary()
        out[layer] = FeatureStats(mean, std, count, network.key, network.weights_id, layer, source, skipped, active,
                                  photos, key)
    return out


def compute_stats(network, layer: str, **kwargs) -> FeatureStats:
    """Statistics for one layer: only the network up to that layer runs (`compute_all_stats` for it alone)."""
    return compute_all_stats(network, [layer], **kwargs)[layer]


def get_stats(
    network,
    layer: str,
    *,
    images: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> FeatureStats:
    """Cached statistics for (network, weights, layer, source); estimated for that layer alone and saved on
    first use. n: samples (default `default_samples`). Shipped statistics (assets/stats) count as cached.

    A cache file that is damaged, made for something else or implausible is warned about and estimated
    again; statistics that come out implausible are used (with a warning) but not kept.
    """
    network.spec.check_layer(layer)
    n = int(check_range("The number of samples", n or default_samples(network, images), 1, MAX_SAMPLES, integer=True))
    source_key = stats_source_key(images, n)
    if not refresh:
        copy_shipped_stats(network, layer, source_key)
        found = _cached(network, layer, source_key)
        if found is not None:
            return found
    stats = compute_stats(network, layer, images=images, n=n, progress=progress)
    _keep(stats, layer)
    return stats


def get_all_stats(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> dict[str, FeatureStats]:
    """`get_stats` for every layer of the network: the layers not cached yet are estimated in one pass (only
    when asked: the `stats --all-layers` command and the shipped files; memory grows with the layers)."""
    n = n or default_samples(network, images)
    source_key = stats_source_key(images, n)
    if not refresh:
        for layer in network.spec.layers:
            copy_shipped_stats(network, layer, source_key)
    found = {} if refresh else {layer: _cached(network, layer, source_key) for layer in network.spec.layers}
    missing = [layer for layer in network.spec.layers if found.get(layer) is None]
    fresh = compute_all_stats(network, missing, images=images, n=n, progress=progress) if missing else {}
    for layer, stats in fresh.items():
        _keep(stats, layer)
    return {layer: found.get(layer) or fresh[layer] for layer in network.spec.layers}


def _keep(stats: FeatureStats, layer: str) -> None:
    """Save fresh statistics in the cache, unless they look wrong (then warn: they are used, not kept)."""
    reason = stats.problem()
    if reason:
        warnings.warn(f"The statistics estimated for {layer} look wrong ({reason}); they are used but not kept.",
                      stacklevel=3)
        return
    try:
        stats.save(stats_cache_path(stats.model, stats.weights, layer, stats.source_key))
    except OSError:
        pass  # a read-only cache must not stop the user from getting a result


def stored_stats(network, layer: str, *, images: str | os.PathLike | None = None,
                 n: int | None = None) -> FeatureStats | None:
    """The statistics `get_stats` would return without estimating anything, or None. Shipped statistics are
    copied into the cache first (`copy_shipped_stats`: the one write a lookup makes)."""
    source_key = stats_source_key(images, n or default_samples(network, images))
    copy_shipped_stats(network, layer, source_key)
    return _cached(network, layer, source_key)


def _identity(network, layer: str) -> dict:
    return {"network": network.key, "weights": network.weights_id, "layer": layer}


def copy_shipped_stats(network, layer: str, source_key: str) -> bool:
    """Copy the shipped statistics for (network, weights, layer, source) into the cache where the cache has none
    yet, so that a damaged copy is removed from the cache, never from assets/. True when the cache holds a file
    for them now; False without one (none shipped, or a read-only cache: estimate rather than risk the asset)."""
    path = stats_cache_path(network.key, network.weights_id, layer, source_key)
    shipped = SHIPPED_STATS_DIR / path.name
    if not path.is_file() and shipped.is_file():
        try:
            cache.copy_in(shipped, path)
        except OSError:
            return False
    return path.is_file()


def _cached(network, layer: str, source_key: str) -> FeatureStats | None:
    """The cache's statistics for (network, weights, layer, source), or None (it writes nothing; a damaged file
    is removed by `cache.load_arrays`, as every cache read does)."""
    path = stats_cache_path(network.key, network.weights_id, layer, source_key)
    return _read(path, {**_identity(network, layer), "source_key": source_key}) if path.is_file() else None



def cached_stats(network, layer: str) -> list[FeatureStats]:
    """All usable cached statistics for (network, weights, layer), whatever their source, most samples first."""
    identity = _identity(network, layer)
    found = []
    for path in sorted((cache_dir() / "stats").glob("*.npz")):
        meta = cache.read_meta(path)
        if meta is None or any(meta.get(k) != v for k, v in identity.items()):
            continue
        stats = _read(path, identity)
        if stats is not None:
            found.append(stats)
    return sorted(found, key=lambda s: -s.n)
