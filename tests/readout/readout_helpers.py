"""Helpers shared by the readout tests."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def tiny_folder(root: Path, n: int = 4) -> Path:
    """n small unlabelled PNGs, each with a coloured block to look at."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        arr = (rng.random((48, 64, 3)) * 60).astype(np.uint8)
        arr[8 + 4 * i : 30, 10 : 40 + 4 * i] = (200, 120 + 20 * i, 40)
        Image.fromarray(arr).save(root / f"img{i}.png")
    return root
