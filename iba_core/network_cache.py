"""What a loaded network keeps of the objects derived from it: one typed cache with one eviction rule.

`Network.memo` is a `NetworkCache`: a field per kind of object, each a `Recent` mapping that keeps at most its
bound of entries and drops the least recently used first. The objects live and die with the network (a
randomised copy for the sanity check gets an empty cache), so nothing is cached in module globals.

| field           | key                                   | value                                         | bound |
|-----------------|---------------------------------------|-----------------------------------------------|-------|
| splits          | ("stages" or "fx", layer)             | (prefix, suffix) with BatchNorms folded, None | 8     |
| fx_reasons      | layer                                 | why `torch.fx` found no cut there             | 8     |
| folded_stages   | ()                                    | the stage list with BatchNorms folded         | 1     |
| layer_table     | ()                                    | the layers found by a dry pass                | 1     |
| readout_passes  | (layer, reads)                        | the analysed network's passes for a readout   | 4     |
| readouts        | checkpoint path (resolved)            | (modification time, loaded readout)           | 4     |
| precision       | ("precision", network, layer, …)      | the "auto" precision measured for a workload  | 64    |
| patterns        | the patterns' source key              | PatternAttribution's patterns                 | 4     |
| pattern_graph   | ()                                    | (the model's structure, its pattern graph)    | 1     |

A Per-Sample Bottleneck built without a `Network` (`PerSampleBottleneck.from_split`, or on the hook path) keys
its "auto" precision by what it runs (the suffix's or model's structure and size, the layer's shape) and keeps it
on disk, so a second one built alike does not measure again (`runners.module_key`).

The app keeps its other caches for one thing each, stated here so there is one place to read them all:
- `st.cache_resource` (`pages/widgets/network_picker.py: shared_model`, at most 3) holds the loaded networks with their locks,
  one per network and weights for every session; so this cache, inside each network, is shared by the sessions;
- `app/maps.py: MapCache` (per session, 64 maps, the oldest out) keeps finished attribution maps keyed by
  everything that made them (image digest, network, weights, class, method and settings);
- on disk, through `cache.py`: feature statistics, PatternAttribution's patterns, the precision memo and the
  β × layer grids (`beta_layer.py`, the 24 used last) outlive the process.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A mapping that keeps at most `limit` entries: reading or writing one makes it the most recent; a new
    entry beyond the limit drops the least recently used."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError(f"A cache must keep at least one entry, not {limit}.")
        self.limit = limit
        self._items: OrderedDict[K, V] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __getitem__(self, key: K) -> V:
        value = self._items[key]
        self._items.move_to_end(key)
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._items))

    def get(self, key: K, default: Any = None) -> V | Any:
        return self[key] if key in self._items else default

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The entry for `key`, made by `make()` and kept when there is none."""
        if key not in self._items:
            self[key] = make()
        return self[key]

    def pop(self, key: K, default: Any = None) -> V | Any:
        return self._items.pop(key, default)

    def values(self) -> list[V]:
        return list(self._items.values())

    def clear(self) -> None:
        self._items.clear()


def _recent(limit: int) -> Any:
    return field(default_factory=lambda: Recent(limit))


@dataclass(repr=False)
class NetworkCache:
    """Objects derived from one network, a field per kind (see the module docstring for keys and bounds)."""

    splits: Recent = _recent(8)
    fx_reasons: Recent = _recent(8)
    folded_stages: Recent = _recent(1)
    layer_table: Recent = _recent(1)
    readout_passes: Recent = _recent(4)
    readouts: Recent = _recent(4)
    precision: Recent = _recent(64)
    patterns: Recent = _recent(4)
    pattern_graph: Recent = _recent(1)

    def kinds(self) -> dict[str, Recent]:
        """Field name → its entries."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def clear(self) -> None:
        """Forget everything (e.g. after the network's weights changed in place)."""
        for kept in self.kinds().values():
            kept.clear()

    def __repr__(self) -> str:
        return "NetworkCache(" + ", ".join(f"{k}={len(v)}" for k, v in self.kinds().items()) + ")"


def cache_of(network: object) -> NetworkCache | None:
    """The network's cache, or None for a bare wrapper of an nn.Module (tests' small networks) that has none."""
    memo = getattr(network, "memo", None)
    return memo if isinstance(memo, NetworkCache) else None


__all__ = ["NetworkCache", "Recent", "cache_of"]
