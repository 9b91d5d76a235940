"""Which feature statistics (μ_R, σ_R of a layer) a run uses, and a line that says so."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..methods import get_method
from ..networks import Network
from ..settings import stats_samples
from ..progress import ProgressFn
from ..stats import FeatureStats, cached_stats, get_stats, photo_pool, stored_stats


def choose_stats(
    loaded: Network,
    layer: str,
    *,
    folder: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
) -> FeatureStats:
    """Statistics for a run: from `folder` if given, else the best cached ones with ≥ n samples,
    else freshly estimated from n augmented sample photos (then cached on disk)."""
    n = n or stats_samples()
    if folder:
        path = Path(folder).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"Image folder not found: {path}. Enter a folder that holds images.")
        return get_stats(loaded, layer, images=path, n=n, progress=progress)
    best = next(iter(cached_stats(loaded, layer)), None)
    if best is not None and best.n >= n:
        return best
    return get_stats(loaded, layer, n=n, progress=progress)


def stats_status(loaded: Network, layer: str) -> str:
    """One line on the statistics a run at `layer` would use now."""
    n = stats_samples()
    best = next(iter(cached_stats(loaded, layer)), None)
    if best is None or best.n < n:
        best = stored_stats(loaded, layer, n=n)
    if best is not None and best.n >= n:
        return f"Ready: {best.describe()}."
    return (
        f"Not estimated yet for {layer}: the first run estimates μ and σ of every layer of this network at once "
        f"from {n} augmented crops of the {len(photo_pool())} offline photos, and keeps them on disk."
    )


def stats_for_methods(loaded: Network, methods: Iterable[str],
                      progress: ProgressFn | None = None) -> FeatureStats | None:
    """The statistics that the methods in `methods` read with their default settings (the network's default
    layer, `settings.stats_samples()` samples), estimated now if any of them needs statistics; else None.

    Estimating here, before the maps, lets a page show the estimate's own progress.
    """
    if not any(get_method(key).needs_stats for key in methods):
        return None
    return get_stats(loaded, loaded.spec.default_layer, n=stats_samples(), progress=progress)
