"""Random attribution: the naive baseline of the paper (§4.1); any method should beat it."""
from __future__ import annotations

import numpy as np
import torch

from .base import Method


class RandomMap(Method):
    """Independent uniform [0, 1) values per pixel; `seed` makes it reproducible (None: fresh each call)."""

    key = "random"
    name = "Random"
    signed = False
    description = "Uniform random values: the score any useful method must beat."
    PASSES = 0  # no pass through the network

    @classmethod
    def default_settings(cls) -> dict:
        return {"seed": 0}

    def _compute(self, network, x: torch.Tensor, target: int) -> np.ndarray:
        rng = np.random.default_rng(self.settings["seed"])
        return rng.random(tuple(x.shape[-2:]), dtype=np.float32)
