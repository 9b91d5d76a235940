"""Per-map measures on hand-built maps, thumbnails, and the float16 maps that keep their sums."""
import math

import numpy as np
import pytest

from iba_core.runs.measures import (border_mask, border_share, box_share, concentration, cosine_distance,
                                    distance_to_class_mean, map_measures, thumbnail)
from iba_core.runs.store import decode_map, encode_map


def test_a_map_all_in_the_border_has_border_share_one():
    m = np.zeros((20, 30))
    m[0, 5], m[19, 29], m[10, 1] = 3.0, 1.0, 2.0  # top row, bottom-right corner, left strip (b_w = 3)
    assert border_share(m) == pytest.approx(1.0)
    m[10, 15] = 6.0  # the centre: half the mass now
    assert border_share(m) == pytest.approx(0.5)


def test_a_uniform_map_has_the_border_area_as_border_share():
    h, w = 20, 30  # b_h = 2, b_w = 3: 1 − 16·24/600
    assert border_share(np.ones((h, w))) == pytest.approx(1 - 16 * 24 / 600)
    assert border_mask(224, 224).mean() == pytest.approx(1 - (224 - 44) ** 2 / 224 ** 2)  # 0.354 on a 224 crop
    # attribution maps count |A|: a signed map of the same magnitudes says the same
    signs = np.where(np.arange(h * w).reshape(h, w) % 2, 1.0, -1.0)
    assert border_share(signs) == pytest.approx(1 - 16 * 24 / 600)


def test_concentration_of_one_hot_and_uniform_maps():
    one_hot = np.zeros((40, 50))
    one_hot[13, 7] = 0.25
    assert concentration(one_hot) == pytest.approx(1.0)
    assert concentration(np.ones((40, 50))) == pytest.approx(100 / 2000)  # the top 5 %: 100 pixels of 2000
    two = np.zeros((10, 10))
    two[0, 0], two[5, 5] = 3.0, 1.0  # top 5 % = 5 pixels hold both
    assert concentration(two) == pytest.approx(1.0)


def test_box_share_and_empty_maps():
    m = np.zeros((10, 10))
    m[2:4, 2:4] = 1.0
    m[8, 8] = 4.0
    box = np.zeros((10, 10), dtype=bool)
    box[1:5, 1:5] = True
    assert box_share(m, box) == pytest.approx(0.5)
    assert math.isnan(box_share(m, None))
    empty = map_measures(np.zeros((10, 10)), box)
    assert all(math.isnan(v) for v in empty.values())
    with pytest.raises(ValueError, match="box mask"):
        box_share(m, np.ones((5, 5), dtype=bool))


def test_thumbnails_keep_the_mass_and_where_it_is():
    m = np.zeros((224, 224))
    m[:8, :8] = 2.0  # the top-left thumbnail cell (8 × 8 px of 224)
    t = thumbnail(m)
    assert t.shape == (28, 28) and t.sum() == pytest.approx(1.0, rel=1e-6)
    assert t[0, 0] == pytest.approx(1.0, rel=1e-6)
    # sizes that do not divide: pixels are split between cells by overlap, the total stays 1
    odd = np.random.default_rng(0).random((37, 53))
    t = thumbnail(odd)
    assert t.sum() == pytest.approx(1.0, rel=1e-6) and (t > 0).all()
    small = thumbnail(np.ones((14, 14)))  # smaller than the thumbnail: spread evenly
    assert np.allclose(small, 1 / 784, rtol=1e-5)


def test_cosine_distance_to_a_mean():
    a = np.zeros((2, 4, 4))
    a[0, 0, 0] = 1.0
    a[1, 3, 3] = 1.0
    mean = a.mean(axis=0)
    d = cosine_distance(a, mean)
    assert d == pytest.approx([1 - 1 / math.sqrt(2)] * 2)
    assert cosine_distance(a[:1], a[0]) == pytest.approx([0.0], abs=1e-12)
    assert math.isnan(cosine_distance(np.zeros((1, 4, 4)), mean)[0])


def test_distance_to_class_mean_compares_each_map_with_its_own_group_only():
    left, right = np.zeros((4, 4)), np.zeros((4, 4))
    left[:, 0], right[:, 3] = 0.25, 0.25
    thumbs = np.stack([left, left, right, right, left, right])
    groups = [("iba", 1), ("iba", 1), ("iba", 2), ("iba", 2), ("grad", 1), None]
    d = distance_to_class_mean(thumbs, groups)
    assert d[:4] == pytest.approx([0.0, 0.0, 0.0, 0.0], abs=1e-12)  # each like its class's mean
    assert np.isnan(d[4]) and np.isnan(d[5])  # alone in its group; no map
    groups[1] = ("iba", 2)  # a left map among right ones: cos to the mean (1/3 left, 2/3 right) = 1/√5
    d = distance_to_class_mean(thumbs, groups)
    assert d[1] == pytest.approx(1 - 1 / math.sqrt(5), rel=1e-9) and np.isnan(d[0])


@pytest.mark.parametrize("values", [
    np.random.default_rng(1).gamma(0.3, 1e-3, (64, 64)),  # bits per pixel: small, skewed, ≥ 0
    np.random.default_rng(2).normal(0, 1e-9, (64, 64)),  # a signed map of tiny gradients
])
def test_float16_maps_keep_their_sum_and_their_small_values(values):
    stored, scale = encode_map(values)
    assert stored.dtype == np.float16
    back = decode_map(stored, scale)
    assert back.dtype == np.float32 and back.shape == values.shape
    if values.min() >= 0:
        assert back.sum(dtype=np.float64) == pytest.approx(values.sum(), rel=1e-6)
    np.testing.assert_allclose(back, values, rtol=2e-3, atol=np.abs(values).max() * 1e-3)
    zeros, zero_scale = encode_map(np.zeros((3, 3)))
    assert zero_scale == 0.0 and not decode_map(zeros, zero_scale).any()
