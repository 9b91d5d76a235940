"""Spectral clustering of thumbnails (SpRAy): groups found, k by the eigengap, seeded, bounded."""
import numpy as np
import pytest

from iba_core.errors import UserError
from iba_core.runs.spectral import spectral_clusters


def blobs(sizes, centres, spread=0.05, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.normal(c, spread, (n, 6)) for n, c in zip(sizes, centres)])


def test_separated_groups_are_found_with_their_number():
    x = blobs((9, 6, 4), (0.0, 2.0, -2.0))
    c = spectral_clusters(x)
    assert c.k == 3 and c.sizes == [9, 6, 4]  # numbered by size
    assert set(c.labels[:9]) == {0} and set(c.labels[9:15]) == {1} and set(c.labels[15:]) == {2}
    assert c.eigenvalues[:3] == pytest.approx([0, 0, 0], abs=1e-6) and c.eigenvalues[3] > 0.5
    assert list(c.members(2)) == [15, 16, 17, 18]


def test_a_tight_group_stands_apart_from_a_spread_out_rest():
    rng = np.random.default_rng(3)
    tight = rng.normal(5.0, 0.01, (5, 6))
    rest = rng.normal(0.0, 1.0, (15, 6))
    c = spectral_clusters(np.concatenate([rest, tight]), seed=1)
    tight_label = c.labels[-1]
    assert set(np.flatnonzero(c.labels == tight_label)) == set(range(15, 20))


def test_one_group_stays_one_and_results_repeat():
    x = np.random.default_rng(4).normal(0, 1, (30, 6))
    assert spectral_clusters(x).k == 1
    y = blobs((7, 7), (0.0, 1.0), spread=0.2, seed=5)
    assert np.array_equal(spectral_clusters(y, seed=2).labels, spectral_clusters(y, seed=2).labels)
    assert spectral_clusters(x[:2]).k == 1 and spectral_clusters(x[:0]).k == 0


def test_max_k_and_the_size_limit():
    x = blobs((4, 4, 4, 4), (0.0, 2.0, 4.0, 6.0))
    assert spectral_clusters(x, max_k=2).k <= 2
    with pytest.raises(UserError, match="at most 4,000 maps"):
        spectral_clusters(np.zeros((4001, 2)))
