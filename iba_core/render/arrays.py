"""Maps made drawable: finite float32 2-D arrays, mean-pooled for a lighter browser payload."""
from __future__ import annotations

import numpy as np


def as_map(values: np.ndarray) -> np.ndarray:
    """A finite float32 2-D array (float32 keeps Plotly's binary payload small)."""
    arr = np.asarray(values, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"Expected a 2-D map, got shape {arr.shape}.")
    return np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)


def downsample(values: np.ndarray, factor: int) -> np.ndarray:
    """Mean-pool by `factor` (bits per pixel stay bits per original pixel); shrinks the payload."""
    h = as_map(values)
    if factor <= 1:
        return h
    H, W = (h.shape[0] // factor) * factor, (h.shape[1] // factor) * factor
    return h[:H, :W].reshape(H // factor, factor, W // factor, factor).mean(axis=(1, 3))
