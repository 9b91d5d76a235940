"""The one interface every attribution method shares (baselines, Per-Sample and Readout Bottleneck).

A method is an object with a `key`, a display `name`, whether its maps are `signed`, its `unit`, and
one call: `attribute(loaded, x, target) -> (H, W) float array` for a preprocessed image x (1, 3, H, W)
and a registered network (`iba_core.models.LoadedModel`). No hooks or gradients may be left behind.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch


class AttributionMethod(Protocol):
    key: str  # e.g. "saliency", "occlusion_8", "iba_10"
    name: str  # display name, e.g. "Occlusion-8×8"
    signed: bool  # maps with meaningful negative values (diverging colour scale)
    unit: str  # "bits/pixel" for IBA, "" for unitless relevance

    def attribute(self, loaded, x: torch.Tensor, target: int) -> np.ndarray:
        """(H, W) attribution for class `target` of image x (1, 3, H, W)."""
        ...


@dataclass
class AttributionMap:
    """A method's map for one image, with what a view needs to draw it."""

    key: str
    name: str
    values: np.ndarray
    signed: bool
    unit: str
    seconds: float
    extra: dict = field(default_factory=dict)


def run_method(method: AttributionMethod, loaded, x: torch.Tensor, target: int) -> AttributionMap:
    """Time one method on one image and wrap its map.

    A method may also offer `attribute_with_extra(loaded, x, target) -> (map, dict)`; the dict (JSON-friendly
    numbers and strings, e.g. the bottleneck's total bits) then lands in `AttributionMap.extra`.
    """
    start = time.perf_counter()
    extra: dict = {}
    if hasattr(method, "attribute_with_extra"):
        raw, extra = method.attribute_with_extra(loaded, x, target)
    else:
        raw = method.attribute(loaded, x, target)
    values = np.asarray(raw, dtype=np.float32)
    seconds = time.perf_counter() - start
    if values.shape != tuple(x.shape[-2:]):
        raise RuntimeError(f"{method.name} returned a {values.shape} map for a {tuple(x.shape[-2:])} image.")
    return AttributionMap(method.key, method.name, values, method.signed, method.unit, seconds, dict(extra))
