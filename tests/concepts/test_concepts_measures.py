"""A concept's numbers (concepts/measures.py), each checked on arrays small enough to work out by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from iba_core.concepts import measures
from iba_core.concepts.measures import ConceptFigures, shortcut_reasons

# three locations, two concepts: ‖W_0‖₁ = 2, ‖W_1‖₁ = 4
U = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
W = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]])


def test_concept_mass_and_location_shares_by_hand():
    np.testing.assert_allclose(measures.concept_mass(U, W), [[2, 0], [2, 4], [0, 0]], rtol=1e-4)
    shares = measures.location_shares(U, W)
    np.testing.assert_allclose(shares, [[1, 0], [1 / 3, 2 / 3], [0, 0]], rtol=1e-4)
    assert np.isfinite(shares).all()  # nothing reconstructed: 0, not NaN


def test_bits_per_cell_4x4_into_2x2_by_hand():
    bits = np.arange(16, dtype=float).reshape(4, 4)
    cells = measures.bits_per_cell(bits, (2, 2))
    # row-major cells: (0,0) = 0+1+4+5, (0,1) = 2+3+6+7, (1,0) = 8+9+12+13, (1,1) = 10+11+14+15
    np.testing.assert_allclose(cells, [10, 18, 42, 50], rtol=1e-4)
    assert cells.sum() == pytest.approx(bits.sum(), rel=1e-4)


def test_bits_per_cell_5x5_into_2x2_goes_by_pixel_centres():
    """Pixel centres of a 5-px side in 2 cells: 0.2, 0.6 | 1.0, 1.4, 1.8 (in cells): pixels 0–1 in the first cell,
    2–4 in the second (pixel 2's centre lies on the border and goes to the second)."""
    cells = measures.bits_per_cell(np.ones((5, 5)), (2, 2))
    np.testing.assert_allclose(cells, [4, 6, 6, 9], rtol=1e-4)
    spike = np.zeros((5, 5))
    spike[2, 1] = 7.0  # row 2 → cell row 1, column 1 → cell column 0
    np.testing.assert_allclose(measures.bits_per_cell(spike, (2, 2)), [0, 0, 7, 0], rtol=1e-4)
    rng = np.random.default_rng(0)
    for shape, grid in (((5, 5), (2, 2)), ((37, 23), (7, 4)), ((3, 6), (1, 2))):
        bits = rng.random(shape)
        assert measures.bits_per_cell(bits, grid).sum() == pytest.approx(bits.sum(), rel=1e-4)  # sum preserved
    np.testing.assert_allclose(measures.bits_per_cell(np.arange(6.0).reshape(1, 6), (1, 2)), [3, 12], rtol=1e-4)


def test_image_bits_by_hand():
    shares = measures.location_shares(U, W)
    got = measures.image_bits(np.array([1.0, 2.0, 3.0]), shares)
    np.testing.assert_allclose(got, [1 + 2 / 3, 4 / 3], rtol=1e-4)
    assert got.sum() == pytest.approx(3.0, rel=1e-4)  # the bits at the unreconstructed location (3) are no one's


def test_presence_by_hand():
    np.testing.assert_allclose(measures.presence(U, W), [0.5, 0.5], rtol=1e-4)  # masses 2 + 2 and 0 + 4
    np.testing.assert_allclose(measures.presence(np.array([[3.0, 1.0]]), W), [6 / 10, 4 / 10], rtol=1e-4)
    assert not measures.presence(np.zeros((3, 2)), W).any()


def test_area_is_the_share_of_cells_at_half_peak_or_more():
    mass = np.array([[4.0, 0.0], [2.0, 0.0], [1.9, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(measures.area(mass), [0.5, 0.0], rtol=1e-4)  # 4 and 2 (= half of 4) of four cells
    everywhere = np.array([[1.0], [1.0], [0.6], [0.5]])
    np.testing.assert_allclose(measures.area(everywhere), [1.0], rtol=1e-4)


def test_peaks_are_cell_centres_in_the_crop():
    u = np.zeros((6, 2))  # a 2 × 3 grid, row-major
    u[4, 0] = 5.0  # row 1, column 1
    u[[2, 5], 1] = 1.0  # a tie: the first, row 0 column 2
    xs, ys = measures.peaks(u, (2, 3))
    np.testing.assert_allclose(xs, [1.5 / 3, 2.5 / 3], rtol=1e-4)
    np.testing.assert_allclose(ys, [1.5 / 2, 0.5 / 2], rtol=1e-4)
    xs, ys = measures.peaks(np.eye(4)[:, :1], (2, 2))  # the top-left cell
    assert (xs[0], ys[0]) == (0.25, 0.25)


def test_peak_spread_by_hand():
    assert measures.peak_spread([0.0, 1.0], [0.0, 0.0]) == pytest.approx(0.5, rel=1e-4)
    assert measures.peak_spread([0.2, 0.2, 0.2], [0.7, 0.7, 0.7]) == pytest.approx(0.0, abs=1e-12)
    # corners of a square of side 0.2 around (0.5, 0.5): each 0.1·√2 from the mean
    assert measures.peak_spread([0.4, 0.6, 0.4, 0.6], [0.4, 0.4, 0.6, 0.6]) == pytest.approx(0.1 * math.sqrt(2),
                                                                                           rel=1e-4)
    assert math.isnan(measures.peak_spread([], []))


def figures(**changed) -> ConceptFigures:
    """An ordinary concept (large in area, spread out, used by every image, small in bits and effect), changed."""
    base = dict(bits_share=0.1, effect=0.05, area=0.5, spread=0.3, using=10, images=10, bits_rank=1, effect_rank=1)
    return ConceptFigures(**{**base, **changed})


@pytest.mark.parametrize("changed, expected", [
    (dict(area=0.05, bits_share=0.4), ["small (it covers 5% of the crop)", "carries 40% of the bits"]),
    (dict(spread=0.05, effect=0.3), ["at one position in every image", "removing it lowers p(class) by 0.30"]),
    (dict(using=4, bits_share=0.3, bits_rank=2), ["used by 4 of 10 images only", "carries 30% of the bits"]),
    (dict(area=0.05, using=2, bits_share=0.5, effect=0.4, effect_rank=3),
     ["small (it covers 5% of the crop)", "used by 2 of 10 images only", "carries 50% of the bits",
      "removing it lowers p(class) by 0.40"]),
    (dict(area=0.05, bits_share=0.25), ["small (it covers 5% of the crop)", "carries 25% of the bits"]),  # at the bar
    (dict(using=3, kept=0.6, kept_rank=2), ["used by 3 of 10 images only", "alone it keeps 60% of p(class)"]),
    (dict(area=0.05, kept=0.5, kept_rank=3), ["small (it covers 5% of the crop)", "alone it keeps 50% of p(class)"]),
])
def test_shortcut_reasons_for_each_branch(changed, expected):
    assert shortcut_reasons(figures(**changed)) == expected


@pytest.mark.parametrize("changed", [
    dict(bits_share=0.6, effect=0.5),  # large but ordinary: not small, not fixed, used by all
    dict(area=0.1, spread=0.1, using=5, bits_share=0.6),  # each at its bar: not small, not fixed, not a minority
    dict(area=0.05, spread=0.01, using=1),  # odd but carries little
    dict(area=0.05, bits_share=0.4, bits_rank=4, effect=0.3, effect_rank=4),  # large, not in the top 3
    dict(area=0.05, bits_share=float("nan"), bits_rank=0, effect=0.1),  # no bits: NaN is not large
    dict(area=0.05, bits_share=0.4, bits_rank=0),  # a rank of 0 means "no bits ranking"
    dict(spread=float("nan"), bits_share=0.6),  # too few top images to judge the place
    dict(area=0.05, kept=0.49, kept_rank=1),  # keeps less than half alone
    dict(area=0.05, kept=0.9, kept_rank=4),  # keeps much, but not in the top 3
    dict(area=0.05, kept=0.9, kept_rank=0),  # no kept ranking
    dict(area=0.05, kept=float("nan"), kept_rank=1),  # nothing kept decides as much: NaN is not large
])
def test_shortcut_reasons_not_flagged(changed):
    assert shortcut_reasons(figures(**changed)) == []


def test_nan_bits_still_flags_by_effect():
    got = shortcut_reasons(figures(area=0.02, bits_share=float("nan"), bits_rank=0, effect=0.5, effect_rank=1))
    assert got == ["small (it covers 2% of the crop)", "removing it lowers p(class) by 0.50"]
