"""Occlusion against a hand computation on a network whose logits are linear in the pixels."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from method_helpers import TinyLinear, wrap
from iba_core.methods import get_method


def expected_occlusion(model: TinyLinear, x: torch.Tensor, target: int, size: int) -> np.ndarray:
    """logit drop per tile = Σ_{pixels in tile, channels} W[target] · (x − channel mean), by hand."""
    _, c, h, w = x.shape
    weights = model.weight[target].reshape(c, h, w)
    mean = x[0].mean(dim=(1, 2))  # the image's mean colour
    out = np.zeros((h, w), dtype=np.float64)
    for top in range(0, h, size):
        for left in range(0, w, size):
            tile = (slice(None), slice(top, top + size), slice(left, left + size))
            diff = x[0][tile] - mean[:, None, None]
            out[top : top + size, left : left + size] = float((weights[tile] * diff).sum())
    return out


@pytest.mark.parametrize("size, image", [(8, 16), (8, 20), (14, 28), (14, 20)])
def test_occlusion_equals_hand_computation(size, image):
    """Stride = tile size; 20 px is not a multiple of 8 or 14: the edge tiles are cut at the border."""
    model = TinyLinear(image)
    x = torch.randn(1, 3, image, image, generator=torch.Generator().manual_seed(size + image))
    method = get_method(f"occlusion_{size}")
    got = method.attribute(wrap(model), x, 1).values
    np.testing.assert_allclose(got, expected_occlusion(model, x, 1, size), rtol=1e-4, atol=1e-4)


def test_occlusion_batches_do_not_change_the_result():
    model = TinyLinear(16)
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    one = get_method("occlusion_8", perturbations_per_eval=1).attribute(wrap(model), x, 2).values
    many = get_method("occlusion_8", perturbations_per_eval=7).attribute(wrap(model), x, 2).values
    np.testing.assert_allclose(one, many, rtol=1e-4, atol=1e-5)


def test_occlusion_names():
    assert get_method("occlusion_8").name == "Occlusion-8×8"
    assert get_method("occlusion_14").name == "Occlusion-14×14"
    assert get_method("occlusion_14").signed
