"""Which feature statistics (μ_R, σ_R of a layer) a run uses, and a line that says so.

The images behind them: a folder given on the page, else the folder a model card names (`stats_images`,
the network's own data), else augmented crops of the offline sample photos. For a model card's network
without a folder those photos are likely out of its domain, which distorts the bits: `domain_warning`
says so. Estimates are cached per network, weights (a card's weights file hash), layer and image source.
"""
from __future__ import annotations

import os
from typing import Iterable

from ..feature_stats import (FeatureStats, app_samples, find_run_stats, photo_pool, run_stats_source, stats_for_layers,
                             stats_for_run)
from ..methods import get_method
from ..networks import Network
from ..progress import ProgressFn
from ..errors import UserError, check_range
from ..settings import MAX_STATS_SAMPLES_ENV, STATS_SAMPLES_ENV, max_stats_samples
from .models import is_card_network


def stats_folder(network: Network, folder: str | os.PathLike | None = None) -> str | None:
    """The image folder statistics come from: `folder` if given, else the model card's `stats_images`
    (None: the offline sample photos)."""
    return run_stats_source(network, folder)[0]


def domain_warning(network: Network, folder: str | os.PathLike | None = None) -> str | None:
    """A warning for a model card's network whose statistics would come from the offline sample photos, or for a
    network of more than 3 bands without an image folder (the RGB photos cannot give its statistics at all)."""
    if stats_folder(network, folder):
        return None
    channels = getattr(network.preprocess, "channels", 3)
    if channels > 3:
        return (f"{network.spec.title} takes {channels}-band images, so the offline sample photos (RGB) cannot give "
                "its feature statistics. Add stats_images = \"folder of your images\" (its .npy or .tif files) to "
                "the model card, or enter such a folder under “Feature statistics” on the Per-Sample and β × layer "
                "pages.")
    if not is_card_network(network):
        return None
    n = app_samples(network, folder)
    return (
        f"{network.spec.title} has no image folder for its feature statistics, so they come from {n} augmented "
        "crops of the offline sample photos (cats, coffee, astronauts, …), which are probably not what it was "
        "trained on. Out-of-domain statistics distort the bits: the noise does not look like your data's features. "
        "Add stats_images = \"folder of your images\" to the model card, or enter such a folder under "
        f"“Feature statistics” on the Per-Sample and β × layer pages; {STATS_SAMPLES_ENV} sets how many "
        "samples are used."
    )


def check_samples(n: object) -> int:
    """`n` if a visitor may ask statistics from that many samples (1 … IBA_MAX_STATS_SAMPLES), else a UserError
    saying the range and how the app's owner raises it."""
    top = max_stats_samples()
    try:
        return int(check_range("The number of samples", n, 1, top, integer=True))
    except UserError as err:
        raise UserError(err.message, app_hint=f"The app's owner can allow more with {MAX_STATS_SAMPLES_ENV}.",
                        cli_hint="") from None


def choose_stats(
    network: Network,
    layer: str,
    *,
    folder: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
) -> FeatureStats:
    """One layer's statistics by `choose_range_stats`."""
    return choose_range_stats(network, [layer], folder=folder, n=n, progress=progress)[layer]


def choose_range_stats(
    network: Network,
    layers: list[str],
    *,
    folder: str | os.PathLike | None = None,
    n: int | None = None,
    progress: ProgressFn | None = None,
) -> dict[str, FeatureStats]:
    """Statistics for a run — one layer, or every layer of CoIBA's range — by the one policy every front end uses
    (`feature_stats.stats_for_layers`: `folder`, or the model card's folder; else the cached ones of the offline
    photos with ≥ n samples, else n freshly estimated, the missing layers in one pass), within the sample count a
    visitor may ask for.

    A folder that is not there raises MissingFileError, one holding no readable image UserError, with a sentence
    saying so.
    """
    folder, samples = run_stats_source(network, folder, n)
    check_samples(samples)
    return stats_for_layers(network, list(layers), images=folder, n=samples, progress=progress)


def choose_method_stats(network: Network, method, *, progress: ProgressFn | None = None) -> dict[str, FeatureStats]:
    """The statistics of a bottleneck method (`methods.BottleneckMethod`: its layers, its folder and samples), within
    the sample count a visitor may ask for; kept with the method, which builds its bottleneck from them."""
    folder, samples = run_stats_source(network, method.settings.get("stats_images"), method.settings.get("stats_samples"))
    check_samples(samples)
    return method.statistics(network, progress) if method.needs_stats else {}


def range_stats_description(stats: dict[str, FeatureStats]) -> str:
    """What a CoIBA run's statistics are, in one line: one description for all layers when they agree, else one
    per layer (e.g. shipped for some, estimated for others)."""
    described = {layer: s.describe() for layer, s in stats.items()}
    if len(set(described.values())) == 1:
        return f"{next(iter(described.values()))}, for each of the {len(described)} layers of the range"
    return "; ".join(f"{layer}: {text}" for layer, text in described.items())


def method_stats_layers(network: Network, method) -> list[str]:
    """The layers whose statistics `method` reads on `network` (`BottleneckMethod.resolve`: its one layer, or every
    layer of CoIBA's range — for its branch placement, layers of a view of the network)."""
    return list(method.resolve(network)[1])


def stats_status(network: Network, layer: str) -> str:
    """One line on the statistics a run at `layer` would use now."""
    folder, n = run_stats_source(network, stats_folder(network))
    found = find_run_stats(network, layer, images=folder, n=n)
    if folder:
        if found is not None:
            return f"Ready, from the model card's image folder: {found.describe()}."
        return (f"Not estimated yet for {layer}: the first run estimates μ and σ of this layer from up to "
                f"{n} images in the model card's folder {folder}, and keeps them on disk (per weights file).")
    if found is not None:
        return f"Ready: {found.describe()}."
    return (
        f"Not estimated yet for {layer}: the first run estimates μ and σ of this layer from {n} augmented crops "
        f"of the {len(photo_pool())} offline photos, and keeps them on disk."
    )


def stats_for_methods(network: Network, methods: Iterable[str],
                      progress: ProgressFn | None = None) -> FeatureStats | None:
    """The statistics that the methods in `methods` read with their default settings (each method's own layers,
    `BottleneckMethod.statistics`: a range's in one pass; the widest range first, so a one-layer method at one of
    its layers finds it estimated — CoIBA's branch inputs are other layers, a pass of their own), estimated now if
    any of them needs statistics; the default layer's returned, else None.

    Estimating here, before the maps, lets a page show the estimate's own progress.
    """
    methods = [get_method(key) for key in methods]
    needing = sorted((m for m in methods if m.needs_stats), key=lambda m: -len(method_stats_layers(network, m)))
    if not needing:
        return None
    for method in needing:
        method.statistics(network, progress)
    return stats_for_run(network, network.spec.default_layer, progress=progress)


def seconds_left(done: int, total: int, elapsed: float) -> float | None:
    """Seconds still to go at the pace so far (None before anything is done or without a total)."""
    if done <= 0 or total <= 0 or elapsed < 0:
        return None
    return max(total - done, 0) * elapsed / done


def stats_progress_text(layer: str, done: int, total: int, elapsed: float) -> str:
    """The progress bar's line while statistics are estimated: images done and, once known, the time left."""
    text = f"Estimating feature statistics for {layer}: {done} / {total} images"
    left = seconds_left(done, total, elapsed)
    if left is not None and done < total:
        text += f", about {left:.0f} s left" if left < 120 else f", about {left / 60:.0f} min left"
    return text
