"""Results kept across reruns: attribution maps per (image, network, weights, class, method, settings), so
asking for one more method only computes that one, and the β × layer grids of a session."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Hashable, Sequence

import torch

from ..beta_layer import GridKey
from ..compare import ErrorFn, ProgressFn
from ..methods import AttributionMap, get_method
from ..render.comparison import Limits, cell_png, colour_limits, map_limits
from ..feature_stats import FeatureStats, stats_source_key


def keep(entries: dict, key: Hashable, value, max_entries: int) -> None:
    """entries[key] = value, then drop the oldest entries beyond `max_entries` (dicts keep insertion order)."""
    entries[key] = value
    while len(entries) > max_entries:
        entries.pop(next(iter(entries)))


def settings_token(settings: dict | None) -> tuple:
    """A hashable, order-independent form of a method's settings (feature statistics by what they were
    estimated for and from, other objects by their repr)."""
    if not settings:
        return ()
    return tuple(sorted((k, _value_token(v)) for k, v in settings.items()))


def _value_token(value):
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, FeatureStats):
        return ("stats", value.model, value.weights, value.layer, value.source, value.n)
    return repr(value)


def map_key(image_digest: str, network, target: int, method: str, settings: dict | None = None) -> tuple:
    """Cache key of one map: image content, network and its weights, class, method and its settings."""
    return (image_digest, network.key, network.weights_id, int(target), method, settings_token(settings))


@dataclass
class CachedMap:
    """A computed map and its single-cell PNG on the map's own colour scale (drawn once)."""

    amap: AttributionMap
    png: bytes
    _redrawn: dict = field(default_factory=dict, repr=False, compare=False)  # the last other colour range

    def png_for(self, limits: Limits | None = None) -> bytes:
        """The cell drawn with colour range `limits` (None: its own); a range is drawn once and kept until
        another one is asked for."""
        if limits is None or tuple(limits) == colour_limits(self.amap):
            return self.png
        limits = (float(limits[0]), float(limits[1]))
        if limits not in self._redrawn:
            self._redrawn.clear()
            self._redrawn[limits] = cell_png(self.amap, limits)
        return self._redrawn[limits]


def cell_pictures(entries: Sequence[CachedMap], shared_scale: bool = False) -> list[tuple[bytes, Limits]]:
    """(cell PNG, colour range) per entry, as a grid of these maps draws them: each map on its own scale, or
    with shared_scale the bits/pixel maps on one (bits are absolute: to compare magnitudes)."""
    limits = map_limits([e.amap for e in entries], shared_scale)
    return [(e.png_for(lim), lim) for e, lim in zip(entries, limits)]


@dataclass
class MapRequest:
    """The maps a page asks the map cache for: keys in order, per-key settings and display names."""

    keys: list[str]
    settings: dict[str, dict] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


@dataclass
class MapCache:
    """Maps keyed by `map_key`; bounded, oldest first out. `computed` counts maps actually computed."""

    max_entries: int = 64
    entries: dict = field(default_factory=dict)
    computed: int = 0

    def get(self, key: tuple) -> CachedMap | None:
        return self.entries.get(key)

    def put(self, key: tuple, amap: AttributionMap) -> CachedMap:
        entry = CachedMap(amap, cell_png(amap))
        keep(self.entries, key, entry, self.max_entries)
        return entry

    def missing(self, network, image_digest: str, target: int, methods: Sequence[str],
                settings: dict[str, dict] | None = None) -> list[str]:
        """The keys in `methods` whose map is not cached yet."""
        settings = settings or {}
        return [m for m in methods if self.get(map_key(image_digest, network, target, m, settings.get(m))) is None]

    def maps(
        self,
        network,
        x: torch.Tensor,
        image_digest: str,
        target: int,
        methods: Sequence[str],
        *,
        settings: dict[str, dict] | None = None,
        names: dict[str, str] | None = None,
        progress: ProgressFn | None = None,
        on_map: Callable[[str, CachedMap, bool], None] | None = None,
        on_error: ErrorFn | None = None,
    ) -> dict[str, CachedMap]:
        """{method key: cached map} for `methods`, computing only those not cached yet.

        settings: per key, the method's settings (part of the cache key); names: per key, a display name
        that replaces the method's own (e.g. a readout checkpoint's label; it titles the cell).
        progress(done, total, label) before each method computed and at the end; on_map(key, entry,
        was_cached) as each map becomes available; on_error(key, err) for a failing method (skipped),
        else it raises.
        """
        settings = settings or {}
        names = names or {}
        out: dict[str, CachedMap] = {}
        total = len(methods)
        for i, key in enumerate(methods):
            ck = map_key(image_digest, network, target, key, settings.get(key))
            entry = self.get(ck)
            cached = entry is not None
            if entry is None:
                try:
                    method = get_method(key, **settings.get(key, {}))
                    if progress is not None:
                        progress(i, total, names.get(key, method.name))
                    amap = method.attribute(network, x, target)
                except Exception as err:  # noqa: BLE001 - reported to the caller
                    if on_error is None:
                        raise
                    on_error(key, err)
                    continue
                if key in names:
                    amap = replace(amap, name=names[key])
                self.computed += 1
                entry = self.put(ck, amap)
            out[key] = entry
            if on_map is not None:
                on_map(key, entry, cached)
        if progress is not None:
            progress(total, total, "done")
        return out


def grid_key(image_digest: str, network, layer: str, target: int, settings, folder: str | None, n: int,
             layers: Sequence[str] | None = None, axis: str = "layer") -> GridKey:
    """Key of one β × layer grid: same image, network, weights, layer, class, settings, statistics (folder
    and n) and second row (axis: "layer" or CoIBA's "range") → same grid. The session's dict of grids and the
    disk cache (`beta_layer.cached_grid`) both use it."""
    return GridKey.of(image_digest, network, layer, target, settings, stats_source_key(folder, n), layers,
                      axis=axis)
