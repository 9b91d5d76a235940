"""Tile helpers shared by the faithfulness checks and the degradation metric (paper §4.5)."""
from __future__ import annotations

import numpy as np
import torch


def tile_sums(attribution: np.ndarray, tile: int) -> np.ndarray:
    """Sum of an (H, W) attribution inside each tile×tile tile → (H//tile, W//tile)."""
    h, w = attribution.shape
    if h % tile or w % tile:
        raise ValueError(f"Image size {h}×{w} is not a multiple of the tile size {tile}.")
    return attribution.reshape(h // tile, tile, w // tile, tile).sum(axis=(1, 3))


def tile_order(attribution: np.ndarray, tile: int, most_relevant_first: bool = True) -> np.ndarray:
    """Flat tile indices ranked by summed attribution (MoRF when most_relevant_first, else LeRF)."""
    sums = tile_sums(attribution, tile).ravel()
    order = np.argsort(-sums if most_relevant_first else sums, kind="stable")
    return order


def remove_tiles(x: torch.Tensor, tiles: np.ndarray, tile: int, fill: torch.Tensor | None = None) -> torch.Tensor:
    """Copy of x (1, C, H, W) with the given flat tile indices replaced by `fill`.

    fill, shaped (C, 1, 1), defaults to the image's per-channel mean (the paper's "constant value").
    """
    out = x.clone()
    if fill is None:
        fill = x.mean(dim=(2, 3), keepdim=True)[0]
    cols = x.shape[-1] // tile
    for t in np.asarray(tiles).ravel():
        r, c = divmod(int(t), cols)
        out[0, :, r * tile:(r + 1) * tile, c * tile:(c + 1) * tile] = fill
    return out
