"""Slow, obvious reference implementations and checks the tests compare the library against."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn


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


def hook_count(model: nn.Module) -> int:
    """Number of forward/backward hooks registered anywhere in `model` (for leak tests)."""
    total = 0
    for m in model.modules():
        total += len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        total += len(getattr(m, "_backward_pre_hooks", {}))
    return total
