"""Tile helpers shared by the faithfulness checks and the degradation metric (paper §4.6)."""
from __future__ import annotations

import numpy as np
import torch

from .errors import UserError


def tile_sums(attribution: np.ndarray, tile: int) -> np.ndarray:
    """Sum of an (H, W) attribution inside each tile×tile tile → (H//tile, W//tile)."""
    h, w = attribution.shape
    if h % tile or w % tile:
        raise UserError(f"Image size {h}×{w} is not a multiple of the tile size {tile}.")
    return attribution.reshape(h // tile, tile, w // tile, tile).sum(axis=(1, 3))


def tile_order(attribution: np.ndarray, tile: int, most_relevant_first: bool = True) -> np.ndarray:
    """Flat tile indices ranked by summed attribution (MoRF when most_relevant_first, else LeRF)."""
    sums = tile_sums(attribution, tile).ravel()
    order = np.argsort(-sums if most_relevant_first else sums, kind="stable")
    return order


def tile_rank_map(order: np.ndarray, tile: int, size: tuple[int, int]) -> torch.Tensor:
    """(H, W) long tensor: for each pixel, the position of its tile in `order` (0 = removed first).

    With it, the image after removing the first k tiles of `order` is `where(rank < k, fill, x)`,
    which `degrade` builds for many k at once.
    """
    h, w = size
    if h % tile or w % tile:
        raise UserError(f"Image size {h}×{w} is not a multiple of the tile size {tile}.")
    rows, cols = h // tile, w // tile
    order = np.asarray(order).ravel()
    if sorted(order.tolist()) != list(range(rows * cols)):
        raise ValueError(f"`order` must be a permutation of the {rows * cols} tile indices.")
    rank = np.empty(rows * cols, dtype=np.int64)
    rank[order] = np.arange(rows * cols)
    grid = torch.from_numpy(rank.reshape(rows, cols))
    return grid.repeat_interleave(tile, dim=0).repeat_interleave(tile, dim=1)


def degrade(
    x: torch.Tensor, rank_map: torch.Tensor, removed: torch.Tensor | list[int], fill: torch.Tensor | None = None
) -> torch.Tensor:
    """A batch (len(removed), C, H, W): copy b of x (1, C, H, W) with its first removed[b] tiles filled.

    rank_map: a `tile_rank_map`, or a batch of them (B, H, W) for one tile order per copy.
    fill: (C, 1, 1), defaults to the image's per-channel mean (the paper's "constant value").
    Built for every k at once, without a Python loop (tests compare it with a tile-by-tile loop).
    """
    if fill is None:
        fill = x.mean(dim=(2, 3), keepdim=True)[0]
    k = torch.as_tensor(removed, dtype=torch.long, device=x.device).view(-1, 1, 1)
    mask = (rank_map.to(x.device) < k)[:, None]  # (B, 1, H, W)
    return torch.where(mask, fill.to(x.dtype)[None], x)


def tile_mask(tiles: np.ndarray, tile: int, size: tuple[int, int]) -> torch.Tensor:
    """(B, H, W) bool masks from a (B, n) array of flat tile indices (True = inside a listed tile)."""
    h, w = size
    rows, cols = h // tile, w // tile
    tiles = np.atleast_2d(np.asarray(tiles))
    flat = torch.zeros(tiles.shape[0], rows * cols, dtype=torch.bool)
    flat.scatter_(1, torch.from_numpy(tiles.astype(np.int64)), True)
    grid = flat.view(-1, rows, cols)
    return grid.repeat_interleave(tile, dim=1).repeat_interleave(tile, dim=2)
