"""UI-independent helpers for the app pages: defaults, input checks, statistics choice, model sharing.

Kept free of Streamlit so the logic can be tested (and reused) without a running app.
"""
from __future__ import annotations

import hashlib
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch
from PIL import Image

from .images import ImageError, load_image, load_sample
from .models import LoadedModel, UnknownModelError, WeightsUnavailableError, load_model
from .stats import RECOMMENDED_SAMPLES, FeatureStats, ProgressFn, cached_stats, get_stats

#: Environment variable for the number of sample crops behind default statistics (tests use ~32).
STATS_SAMPLES_ENV = "IBA_STATS_SAMPLES"
#: Environment variable for torch's threads during app computations (default: all cores but one).
THREADS_ENV = "IBA_TORCH_THREADS"
#: Uploads above this size are refused before decoding (the widget enforces it in the browser too).
MAX_UPLOAD_MB = 25

#: β·k on a log scale, 1-2-5 steps from 0.01 to 1000 (paper default 10).
BETA_K_CHOICES: tuple[float, ...] = tuple(
    round(m * 10.0**e, 6) for e in range(-2, 3) for m in (1, 2, 5)
) + (1000.0,)
DEFAULT_BETA_K = 10.0

#: Thresholds for the "not needed" view, in bits per pixel.
THRESHOLD_CHOICES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
DEFAULT_THRESHOLD = 0.05

#: Errors whose message is written for users; anything else is reported as unexpected.
USER_ERRORS = (ImageError, WeightsUnavailableError, UnknownModelError, FileNotFoundError, ValueError)


def default_stats_samples() -> int:
    """Samples behind default statistics: IBA_STATS_SAMPLES if it is a positive integer, else 1000."""
    raw = os.environ.get(STATS_SAMPLES_ENV, "").strip()
    try:
        n = int(raw)
    except ValueError:
        return RECOMMENDED_SAMPLES
    return n if n > 0 else RECOMMENDED_SAMPLES


def user_message(err: BaseException) -> str:
    """A sentence to show for `err`: its own message for known errors, a generic line otherwise."""
    if isinstance(err, USER_ERRORS):
        return str(err)
    return f"Something went wrong ({type(err).__name__}: {err}). Your previous results are kept; please try again."


# ---- images -----------------------------------------------------------------------------------


@dataclass
class ImageInput:
    """An image chosen by the user: its display name, the decoded picture and a content digest."""

    name: str
    image: Image.Image
    digest: str  # identifies the content for caches (same bytes → same digest)


def image_digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()[:16]


def upload_input(name: str, data: bytes, max_mb: int = MAX_UPLOAD_MB) -> ImageInput:
    """Validate and decode uploaded bytes; raises ImageError with a user-facing message."""
    if len(data) > max_mb * 1024 * 1024:
        raise ImageError(
            f"The file {name!r} is {len(data) / 2**20:.1f} MB; uploads are limited to {max_mb} MB. "
            "Please resize or re-compress it."
        )
    return ImageInput(name=name, image=load_image(data), digest=image_digest(data))


def sample_input(name: str) -> ImageInput:
    """One of the offline sample photos."""
    return ImageInput(name=name, image=load_sample(name), digest=f"sample:{name}")


# ---- models -----------------------------------------------------------------------------------


def app_threads() -> int:
    """Torch threads for app computations: IBA_TORCH_THREADS, else all usable cores but one.

    The server's own threads need a core. Torch's OpenMP workers wait for each other after every
    operation, so one worker pushed off its core stalls them all: on 2 cores a run took 3–5× longer
    with 2 threads than with 1.
    """
    try:
        n = int(os.environ.get(THREADS_ENV, ""))
        if n > 0:
            return n
    except ValueError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


@dataclass
class SharedModel:
    """A loaded network plus the lock that every computation touching it must hold.

    Streamlit serves all sessions from one process; the model's modules are shared and the
    bottleneck temporarily changes their state (eval flags, hooks), so runs must not interleave.
    RLock: a helper that takes the lock may call another that takes it too.
    """

    loaded: LoadedModel
    lock: threading.RLock = field(default_factory=threading.RLock)

    @contextmanager
    def busy(self) -> Iterator[LoadedModel]:
        """Hold the lock and run torch with `app_threads()` threads; the thread count is restored after."""
        with self.lock:
            before = torch.get_num_threads()
            torch.set_num_threads(app_threads())
            try:
                yield self.loaded
            finally:
                torch.set_num_threads(before)


def load_shared(key: str) -> SharedModel:
    """Load a registered network on the CPU (or GPU if present); raises WeightsUnavailableError."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return SharedModel(load_model(key, weights="pretrained", device=device))


# ---- statistics -------------------------------------------------------------------------------


def choose_stats(
    loaded: LoadedModel,
    layer: str,
    *,
    folder: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
) -> FeatureStats:
    """Statistics for a run: from `folder` if given, else the best cached ones with ≥ n samples,
    else freshly estimated from n augmented sample photos (then cached on disk)."""
    n = n or default_stats_samples()
    if folder:
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"Image folder not found: {path}. Enter a folder that holds images.")
        return get_stats(loaded, layer, images=path, n=n, progress=progress)
    best = next(iter(cached_stats(loaded, layer)), None)
    if best is not None and best.n >= n:
        return best
    return get_stats(loaded, layer, n=n, progress=progress)


def stats_status(loaded: LoadedModel, layer: str) -> str:
    """One line on the statistics a run at `layer` would use now."""
    n = default_stats_samples()
    best = next(iter(cached_stats(loaded, layer)), None)
    if best is not None and best.n >= n:
        return f"Cached: {best.describe()}."
    return (
        f"Not cached yet for {layer}: the first run estimates μ and σ of the layer from {n} augmented crops "
        "of the sample photos (or takes the statistics shipped in assets/stats, if any) and caches them on disk."
    )


# ---- classes ---------------------------------------------------------------------------------


def resolve_class(loaded: LoadedModel, target: int | str) -> int:
    """Class index from an index, an exact name, or a part of a name that fits exactly one class.

    Raises ValueError (with suggestions) when nothing or several classes fit.
    """
    try:
        return loaded.class_index(target)
    except ValueError:
        if not isinstance(target, str) or not target.strip():
            raise
        wanted = target.strip().lower()
        matches = [i for i, name in enumerate(loaded.categories) if wanted in name.lower()]
        if len(matches) == 1:
            return matches[0]
        raise


# ---- formatting -------------------------------------------------------------------------------


def format_probability(p: float) -> str:
    """0.355 → '35.5 %'; tiny values keep two significant digits."""
    pct = 100.0 * p
    return f"{pct:.1f} %" if pct >= 0.1 else f"{pct:.2g} %"


def format_beta(beta_k: float) -> str:
    return f"{beta_k:g}"
