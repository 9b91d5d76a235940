import numpy as np
import pytest
import torch

from iba_core.errors import UserError
from iba_core.tiles import tile_order, tile_sums
from reference_impl import remove_tiles


def test_tile_sums_and_order():
    a = np.zeros((4, 6))
    a[0:2, 4:6] = 5.0  # tile 2
    a[2:4, 0:2] = 1.0  # tile 3
    sums = tile_sums(a, 2)
    assert sums.shape == (2, 3) and sums[0, 2] == 20 and sums[1, 0] == 4
    assert tile_order(a, 2, True)[:2].tolist() == [2, 3]
    assert tile_order(a, 2, False)[-2:].tolist() == [3, 2]
    with pytest.raises(UserError):
        tile_sums(np.zeros((5, 5)), 2)


def test_remove_tiles_uses_per_channel_mean():
    x = torch.arange(2 * 4 * 4, dtype=torch.float32).view(1, 2, 4, 4)
    out = remove_tiles(x, np.array([1]), 2)
    means = x.mean(dim=(2, 3))[0]
    assert torch.all(out[0, 0, 0:2, 2:4] == means[0]) and torch.all(out[0, 1, 0:2, 2:4] == means[1])
    assert torch.equal(out[0, :, 2:, :], x[0, :, 2:, :]) and torch.equal(x, torch.arange(32.).view(1, 2, 4, 4))
