"""The β × layer grid (paper Fig. 3) for one image: how β and the bottleneck's depth shape the map.

Row "beta": β·k over a log range at one layer. Row "layer": a handful of layers across the network's
depth at β·k = 10. Every cell is one Per-Sample Bottleneck run with otherwise equal settings. With the
"range" axis the second row holds CoIBA runs instead (issue #30): one range from each of those layers to the
last layer of CoIBA's default range, so the row shows what spanning more of the network does to the map.

A finished grid is kept on disk (`cached_grid`, keyed by a `GridKey`), so another session asking for the
same image, network, class and settings gets it at once instead of ten runs again.
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from . import cache
from .bottleneck import DEFAULT_BETA_K
from .networks import Network, NetworkSpec
from .progress import ProgressFn
from .settings import cache_dir
from .per_sample import BottleneckSettings, bottleneck_lost_class, target_note
from .results import GridCell, bottleneck_place, cell_name, range_label
from .feature_stats import FeatureStats
from .render.text import format_seconds

DEFAULT_BETAS: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1000.0)
#: β·k used along the layer row (the paper's default β = 10/k).
LAYER_ROW_BETA = DEFAULT_BETA_K
#: What the second row varies: "layer" (one Per-Sample Bottleneck per layer, the paper's Fig. 3) or "range"
#: (one CoIBA run per layer range, each from one of those layers to the same last layer).
AXES = ("layer", "range")


def lost_class_cells(cells: Sequence[GridCell]) -> list[GridCell]:
    """The cells whose bottleneck discarded the class, each (β·k, layer) once, in grid order."""
    seen: set[tuple[float, str, str]] = set()
    out = []
    for c in cells:
        if c.lost_class and (c.beta_k, c.layer, c.last) not in seen:
            seen.add((c.beta_k, c.layer, c.last))
            out.append(c)
    return out


#: What a lost cell means in the grid, which shows no map there (`render.figures.LOST_CLASS_MARK`).
GRID_LOST_MESSAGE = ("the bottleneck discarded the class, so the grid shows no map there (a grey square): what "
                     "would survive is not what the class needs")


def lost_class_warning(cells: Sequence[GridCell]) -> str:
    """A sentence naming the cells where the bottleneck discarded the class, or "" when there are none."""
    lost = lost_class_cells(cells)
    if not lost:
        return ""
    names = "; ".join(f"{c.name} (p = {c.p_with:.2f}, without the bottleneck {c.p_without:.2f})" for c in lost)
    return f"{names}: {GRID_LOST_MESSAGE}."


def grid_target_note(cells: Sequence[GridCell], head: str = "softmax") -> str:
    """`per_sample.target_note` once for the whole grid, or "" when the network recognises the class well.

    p(target) without the bottleneck and the network's top-1 are the same in every cell (one image, one class);
    p with it is read from the β row's β·k = 10 cell (what the Per-Sample page computes by default). head: the
    network's (`heads.py`; a sigmoid head's labels count as recognised from p = 50 %).
    """
    if not cells:
        return ""
    first = cells[0]
    ref = next((c for c in cells if c.row == "beta" and c.beta_k == LAYER_ROW_BETA), first)
    note = target_note(first.p_without, ref.p_with, first.predicted < 0 or first.predicted == first.target, head)
    if note and ref.p_with > first.p_without:
        note += f" (p with the bottleneck: the {ref.name} cell.)"
    return note


def _stage(layer: str) -> str:
    """Stage prefix of a layer name: conv3_4 → conv3, block2_1 → block2, stem → stem."""
    return layer.split("_")[0]


def _spread(items: Sequence[str], count: int) -> list[str]:
    """`count` items evenly spaced over `items`, first and last included."""
    if count >= len(items):
        return list(items)
    idx = np.unique(np.round(np.linspace(0, len(items) - 1, count)).astype(int))
    return [items[i] for i in idx]


def depth_layers(spec: NetworkSpec, count: int = 5, include: str | None = None) -> list[str]:
    """`count` layers spread over the network's depth, in depth order, always containing `include`.

    Prefers the last layer of each stage (for ResNet-50 this gives the paper's conv1, conv2_3,
    conv3_4, conv4_6, conv5_3); falls back to evenly spaced layers when there are too few stages.
    """
    include = spec.check_layer(include or spec.default_layer)
    layers = list(spec.layers)
    # A layer ends its stage when the next layer (if any) belongs to another stage.
    stage_ends = [name for name, nxt in zip(layers, layers[1:] + [""]) if _stage(nxt) != _stage(name)]
    chosen = _spread(stage_ends if len(stage_ends) >= count else layers, count)
    if include not in chosen:
        # Swap in `include` for the chosen layer nearest to it in depth (ties: the shallower one).
        pos = layers.index(include)
        nearest = min(chosen, key=lambda name: (abs(layers.index(name) - pos), layers.index(name)))
        chosen[chosen.index(nearest)] = include
    return sorted(chosen, key=layers.index)


def range_row(network: Network, include: str | None = None, count: int = 5) -> tuple[list[str], str]:
    """The "range" axis' row: (first layers, last) — each cell CoIBA from one first layer to `last`, the last layer
    of CoIBA's default range (`coiba.default_range`). The first layers are `depth_layers` (with `include`) up to
    `last`, so the ranges shrink from the whole network's depth to its end."""
    from .coiba import default_range

    last = default_range(network)[1]
    order = list(network.spec.layers)
    firsts = [name for name in depth_layers(network.spec, count, include)
              if order.index(name) <= order.index(last)]
    return firsts, last


def beta_layer_grid(
    network: Network,
    x: torch.Tensor,
    target: int | None,
    layer: str,
    stats_for: Callable[[str], FeatureStats],
    betas: Sequence[float] = DEFAULT_BETAS,
    layers: Sequence[str] | None = None,
    settings: BottleneckSettings | None = None,
    progress: ProgressFn | None = None,
    on_cell: Callable[[GridCell], None] | None = None,
    *,
    last: str = "",
    range_stats_for: Callable[[list[str]], dict[str, FeatureStats]] | None = None,
) -> list[GridCell]:
    """Heatmaps for β·k ∈ `betas` at `layer`, then for `layers` (default: `depth_layers`) at β·k = 10; with
    `last` (the "range" axis, see `range_row`), the second row's cells are CoIBA runs from each of `layers` to
    `last` instead (`coiba.CoIBASettings.for_range_row`).

    stats_for(layer) supplies the feature statistics for each layer (the caller decides on caching);
    range_stats_for(layers) those of every layer of a range (default: stats_for for each).
    progress(done, total, label) is called before each cell (done = cells finished, label = the cell about to
    run, "β·k = 10 at block3_2") and once at the end (total, total, "done"); on_cell(cell) with each finished
    cell. Identical (β·k, layer, last) cells are computed once (`grid_runs`).
    """
    network.spec.check_layer(layer)
    base = settings or BottleneckSettings()
    layers = list(layers) if layers is not None else depth_layers(network.spec, include=layer)
    plan, ranges = _grid_plan(network, betas, layer, layers, last)
    if target is None:
        target = network.top_k(x, 1)[0][0]  # one class for every cell, so the maps are comparable
    stats_of = _cached_stats(stats_for, range_stats_for)
    done: dict[tuple[float, str, str], GridCell] = {}
    cells: list[GridCell] = []
    for i, (row, label, beta_k, name, end) in enumerate(plan):
        key = (beta_k, name, end)
        if progress is not None:
            progress(i, len(plan), cell_name(beta_k, name, end))
        if key not in done:
            done[key] = _grid_cell(network, x, target, base, (row, label, beta_k, name, end), ranges, stats_of)
        cell = replace(done[key], row=row, label=label)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    if progress is not None:
        progress(len(plan), len(plan), "done")
    return cells


def _grid_plan(network: Network, betas: Sequence[float], layer: str, layers: list[str],
               last: str) -> tuple[list[tuple[str, str, float, str, str]], dict[str, list[str]]]:
    """The grid's cells in order as (row, label, β·k, layer, last), and each range row's layers (by its first)."""
    plan = [("beta", f"β·k = {b:g}", float(b), layer, "") for b in betas]
    ranges: dict[str, list[str]] = {}
    if last:
        from .coiba import layer_range

        ranges = {name: layer_range(network, name, last) for name in layers}  # all checked before any run
        plan += [("layer", range_label(name, last), LAYER_ROW_BETA, name, last) for name in layers]
    else:
        plan += [("layer", name, LAYER_ROW_BETA, network.spec.check_layer(name), "") for name in layers]
    return plan, ranges


def _cached_stats(stats_for: Callable[[str], FeatureStats],
                  range_stats_for: Callable[[list[str]], dict[str, FeatureStats]] | None,
                  ) -> Callable[[list[str]], dict[str, FeatureStats]]:
    """A function giving the statistics of some layers, each asked of the caller once for the whole grid."""
    cache: dict[str, FeatureStats] = {}

    def stats_of(names: list[str]) -> dict[str, FeatureStats]:
        missing = [name for name in names if name not in cache]
        if len(missing) > 1 and range_stats_for is not None:
            cache.update(range_stats_for(missing))  # one pass for the range's missing layers
        for name in missing:
            if name not in cache:
                cache[name] = stats_for(name)
        return {name: cache[name] for name in names}

    return stats_of


def _grid_cell(network: Network, x: torch.Tensor, target: int, base: BottleneckSettings,
               planned: tuple[str, str, float, str, str], ranges: dict[str, list[str]],
               stats_of: Callable[[list[str]], dict[str, FeatureStats]]) -> GridCell:
    """One planned cell (row, label, β·k, layer, last) computed: the bottleneck at the layer at that β·k, or CoIBA
    from the layer to `last`."""
    from .methods import bottleneck_method

    row, label, beta_k, name, end = planned

    # the one door: the registry's method for the cell's settings, with the grid's statistics
    if end:
        from .coiba import CoIBASettings

        method = bottleneck_method(CoIBASettings.for_range_row(base, beta_k), layer_range=(name, end),
                                   stats=stats_of(ranges[name]))
    else:
        method = bottleneck_method(replace(base, beta_k=beta_k), layer=name, stats=stats_of([name])[name])
    result = method.run(network, x, target)
    return GridCell(row, label, beta_k, name, result.heatmap, result.p_with, result.total_bits, result.p_without,
                    bottleneck_lost_class(result.p_without, result.p_with, result.head), int(target),
                    result.predicted, result.p_predicted, end)


def grid_runs(betas: Sequence[float], layer: str, layers: Sequence[str], last: str = "") -> list[tuple[float, str]]:
    """The distinct (β·k, where: `GridCell.where`) cells a grid computes, in order: the β row's at `layer`, then
    the layer row's at β·k = LAYER_ROW_BETA (the β row's layer at that β·k is in both rows and computed once); with
    `last`, the second row's are CoIBA's ranges from each of `layers` to `last` (never a β row's cell)."""
    pairs = [(float(b), layer) for b in betas] + [(LAYER_ROW_BETA, bottleneck_place(name, last)) for name in layers]
    return list(dict.fromkeys(pairs))


def grid_progress_text(done: int, total: int, label: str, seconds_left: float | None) -> str:
    """The progress line of a filling grid: which cell of how many runs now (β·k and layer), and, once a cell
    has been timed, about how long the rest takes; "10 of 10 cells done" at the end."""
    if done >= total:
        return f"{total} of {total} cells done"
    text = f"Cell {done + 1} of {total}: {label}"
    if seconds_left is None:
        return text + " · the time left is estimated after the first cell"
    return text + f" · about {format_seconds(seconds_left)} left"


# ---- kept on disk, for every session ---------------------------------------------------------------

#: Grids kept on disk: the newest (by last use) stay, older ones are removed. Each holds ten float32 maps,
#: 1.5 MB compressed for a 224 × 224 crop, so the grids take at most about 40 MB of the cache folder.
MAX_CACHED_GRIDS = 24
#: The cache folder's sub-folder for grids (`cache.cache_file`).
GRID_CACHE_KIND = "grids"
#: Bump when what a grid holds changes: files of another version are then not found (their names differ).
GRID_CACHE_VERSION = 3  # 2: the mask smoothing became the authors' (5 × 5, reflect; issue #29.7); 3: CoIBA rows
_CELL_NUMBERS = ("beta_k", "p_with", "total_bits", "p_without", "p_predicted")  # one float array each
_CELL_INTS = ("target", "predicted")
_CELL_TEXTS = ("row", "label", "layer", "last")


@dataclass(frozen=True)
class GridKey:
    """Everything that makes one grid: equal keys give the same grid (the seed is among the settings).

    Hashable (a session's dict key) and JSON-able (`identity`, kept in the cached file and checked on load).
    """

    image: str  # the image's content digest
    network: str  # Network.key
    weights: str  # Network.weights_id
    layer: str  # the β row's layer
    target: int
    settings: tuple  # sorted (name, value) pairs of the BottleneckSettings
    stats: str  # where the statistics come from and how many samples (`feature_stats.stats_source_key`)
    betas: tuple[float, ...] = DEFAULT_BETAS
    layers: tuple[str, ...] = ()  # the layer row (the "range" axis: the ranges' first layers)
    last: str = ""  # the "range" axis: the ranges' last layer ("" for the paper's layer row)

    @classmethod
    def of(cls, image_digest: str, network: Network, layer: str, target: int, settings: BottleneckSettings,
           stats_source: str, layers: Sequence[str] | None = None,
           betas: Sequence[float] = DEFAULT_BETAS, axis: str = "layer") -> "GridKey":
        """The key of a grid for `network` (layers: default `depth_layers(network.spec, include=layer)`; the
        "range" axis: default `range_row(network, layer)`, whose last layer the key holds too)."""
        last = ""
        if axis == "range":
            firsts, last = range_row(network, layer)
            layers = layers if layers is not None else firsts
        elif axis != "layer":
            raise ValueError(f"axis is one of {AXES}, not {axis!r}")
        layers = layers if layers is not None else depth_layers(network.spec, include=layer)
        return cls(str(image_digest), str(network.key), str(network.weights_id), str(layer), int(target),
                   tuple(sorted(asdict(settings).items())), str(stats_source), tuple(float(b) for b in betas),
                   tuple(str(name) for name in layers), str(last))

    @property
    def identity(self) -> dict:
        """The key as JSON-able values (tuples as lists), with the cache format's version."""
        return json.loads(json.dumps({"version": GRID_CACHE_VERSION, **asdict(self)}))

    @property
    def digest(self) -> str:
        """A short hash of the identity: the cached file's name."""
        return hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()[:32]


def grid_cache_path(key: GridKey) -> Path:
    """Where the grid of `key` is kept: cache_dir()/grids/<network>__<layer>__<digest>….npz."""
    return cache.cache_file(GRID_CACHE_KIND, key.network, key.layer, key.digest, suffix=".npz")


def save_grid(key: GridKey, cells: Sequence[GridCell]) -> None:
    """Keep `cells` on disk under `key` (atomic, with a checksum), then drop the oldest grids beyond
    MAX_CACHED_GRIDS. Maps stay float32, as computed: a cached grid is the computed one, bit for bit, so its
    maps still sum to the totals in the titles (float16 would round each value by up to 0.05 %)."""
    arrays = {"heatmaps": np.stack([np.asarray(c.heatmap, np.float32) for c in cells]),
              "lost_class": np.array([c.lost_class for c in cells], bool)}
    arrays.update({name: np.array([getattr(c, name) for c in cells], np.float64) for name in _CELL_NUMBERS})
    arrays.update({name: np.array([getattr(c, name) for c in cells], np.int64) for name in _CELL_INTS})
    meta = {"identity": key.identity, **{name: [getattr(c, name) for c in cells] for name in _CELL_TEXTS}}
    cache.save_arrays(grid_cache_path(key), arrays, meta)
    _prune(MAX_CACHED_GRIDS)


def load_grid(key: GridKey) -> list[GridCell] | None:
    """The grid kept under `key`, or None (missing; a damaged file is warned about, removed and rebuilt)."""
    path = grid_cache_path(key)

    def check(arrays: dict, meta: dict) -> str | None:
        n = len(meta.get("row", []))
        names = ("heatmaps", "lost_class", *_CELL_NUMBERS, *_CELL_INTS)
        if any(name not in arrays or len(arrays[name]) != n for name in names) or arrays["heatmaps"].ndim != 3 \
                or any(len(meta.get(name, [])) != n for name in _CELL_TEXTS):
            return "its cells are incomplete"
        return None

    loaded = cache.load_arrays(path, expect={"identity": key.identity}, check=check)
    if loaded is None:
        return None
    arrays, meta = loaded
    try:
        os.utime(path)  # last used now: pruning keeps the grids in use
    except OSError:
        pass
    names = [f.name for f in fields(GridCell)]
    cells = []
    for i in range(len(meta["row"])):
        values = {name: meta[name][i] for name in _CELL_TEXTS}
        values.update({name: float(arrays[name][i]) for name in _CELL_NUMBERS})
        values.update({name: int(arrays[name][i]) for name in _CELL_INTS})
        values.update(heatmap=arrays["heatmaps"][i], lost_class=bool(arrays["lost_class"][i]))
        cells.append(GridCell(**{name: values[name] for name in names}))
    return cells


def cached_grid(key: GridKey, compute: Callable[[], list[GridCell]]) -> tuple[list[GridCell], bool]:
    """(cells, True) when the grid of `key` is on disk, else (compute(), False) after saving it there.

    A cache that cannot be written (a read-only folder, a full disk) only costs the next session a recompute.
    """
    cells = load_grid(key)
    if cells is not None:
        return cells, True
    cells = compute()
    try:
        save_grid(key, cells)
    except OSError as err:
        warnings.warn(f"The β × layer grid could not be cached ({err}); it is recomputed next time.", stacklevel=2)
    return cells, False


def _prune(keep: int) -> None:
    """Remove all but the `keep` most recently used grid files."""
    folder = cache_dir() / GRID_CACHE_KIND
    try:
        files = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in files[keep:]:
        try:
            old.unlink()
        except OSError:
            pass  # gone already (another session pruned it) or read-only
