"""Small stand-ins for the app tests: maps, and a network that only has what the cache keys read."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from iba_core.methods import AttributionMap


def fake_map(key: str, signed: bool = False, unit: str = "") -> AttributionMap:
    values = np.linspace(-1 if signed else 0, 1, 224 * 224, dtype=np.float32).reshape(224, 224)
    return AttributionMap(key, key.title(), values, signed, unit, 0.01)


def fake_network(key: str = "net", weights_id: str = "w", spec=None) -> SimpleNamespace:
    """A network wrapper without named layers (spec None) around a one-layer model."""
    from torch import nn

    return SimpleNamespace(key=key, weights_id=weights_id, spec=spec, model=nn.Conv2d(3, 1, 1))
