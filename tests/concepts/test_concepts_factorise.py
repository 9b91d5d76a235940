"""The factorisation (concepts/factorise.py) on planted data: V = U W with U, W random, sparse and non-negative.
NMF recovers W up to the order and the scale of its rows, the elbow rule finds the planted rank, the coefficients
with W fixed rebuild the rows, MiniBatchNMF streamed over batches comes close."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from iba_core.concepts import factorise

C = 16  # channels


def planted(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(U, W, V = U W): W (k × C) half zeros, each row with one channel of its own raised (so W has full rank);
    U (n × k) 40 % zeros."""
    rng = np.random.default_rng(seed)
    w = rng.random((k, C)) * (rng.random((k, C)) < 0.5)
    w[np.arange(k), rng.choice(C, k, replace=False)] += 1.0
    u = rng.random((n, k)) * (rng.random((n, k)) < 0.6)
    return u, w, u @ w


def matched_cosines(found: np.ndarray, planted_w: np.ndarray) -> np.ndarray:
    """The cosines of the best one-to-one matching of found rows to planted rows (Hungarian): order and scale free."""
    a = found / np.linalg.norm(found, axis=1, keepdims=True)
    b = planted_w / np.linalg.norm(planted_w, axis=1, keepdims=True)
    cos = a @ b.T
    rows, cols = linear_sum_assignment(-cos)
    assert len(rows) == len(planted_w)
    return cos[rows, cols]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nmf_recovers_planted_factors_up_to_order_and_scale(seed):
    u, w, v = planted(400, 4, seed)
    f = factorise.fit(v, 4, seed=0)
    assert f.k == 4 and f.components.shape == (4, C) and f.solver == "NMF"
    assert (f.components >= 0).all()
    assert f.error < 1e-3  # measured 1e-5 … 6e-5: exact rank 4
    assert matched_cosines(f.components, w).min() >= 0.99  # measured ≥ 0.99999
    # a planted factor that is not there: one of three concepts cannot cover four
    assert factorise.fit(v, 3, seed=0).error > 0.05


def test_fit_caps_k_at_the_data_and_reports_its_error():
    rows = np.abs(np.random.default_rng(0).normal(size=(5, 3)))
    f = factorise.fit(rows, 8)
    assert f.k == 3  # at most min(rows, channels)
    u = f.coefficients(rows)
    assert f.error == pytest.approx(factorise.relative_error(rows, u, f.components), abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_choose_k_finds_the_planted_rank(seed):
    _, _, v = planted(400, 4, seed)
    k, curve = factorise.choose_k(v, k_max=8)
    assert k == 4
    assert [kk for kk, _ in curve] == list(range(2, 9))
    errors = dict(curve)
    assert errors[2] > errors[3] > 0.05 and errors[4] < 1e-3


def test_choose_k_stops_at_the_channels():
    _, _, v = planted(200, 2, 0)
    k, curve = factorise.choose_k(v[:, :3], k_max=8)  # three channels: K = 2 and 3 only
    assert [kk for kk, _ in curve] == [2, 3] and k == 2


@pytest.mark.parametrize("curve, expected", [
    ([(2, 1.0), (3, 0.5), (4, 0.1), (5, 0.08), (6, 0.06), (7, 0.05)], 4),  # a clear knee
    ([(2, 0.9), (3, 0.2), (4, 0.18), (5, 0.17), (6, 0.16)], 3),  # the knee at once
    ([(2, 0.5), (3, 0.5), (4, 0.5)], 2),  # flat: the first K
    ([(2, 0.5), (3, 0.6), (4, 0.7)], 2),  # rising (nothing gained): the first K
    ([(2, 0.8), (3, 0.6), (4, 0.4), (5, 0.2)], 2),  # a straight line: no point below the chord (was 3, by rounding)
    ([(2, 0.7), (3, 0.5), (4, 0.3), (5, 0.1)], 2),  # another (was 4, by rounding)
    ([(2, 0.8), (3, 0.75), (4, 0.6), (5, 0.2)], 2),  # bowed up: every point above the chord
    ([(3, 0.4), (4, 0.2)], 3),  # two points: the first K
    ([(5, 0.4)], 5),
])
def test_elbow_on_hand_made_curves(curve, expected):
    assert factorise.elbow(curve) == expected


def test_coefficients_rebuild_rows_made_from_the_concepts():
    u, w, v = planted(300, 4, 7)
    f = factorise.Factors(w.astype(np.float32), 0.0)
    found = f.coefficients(v)
    assert found.shape == (300, 4) and found.dtype == np.float32 and (found >= 0).all()
    assert factorise.relative_error(v, found, w) < 1e-4  # measured 3e-6
    np.testing.assert_allclose(found, u, atol=1e-3)  # W has full rank: U is unique
    # no rows, or all-zero rows: zero coefficients, no solver run
    assert f.coefficients(np.zeros((0, C))).shape == (0, 4)
    assert not f.coefficients(np.zeros((3, C))).any()


def test_relative_error_by_hand():
    v = np.array([[3.0, 4.0]])
    assert factorise.relative_error(v, np.array([[1.0]]), np.array([[3.0, 0.0]])) == pytest.approx(4 / 5, rel=1e-6)
    assert factorise.relative_error(np.zeros((2, 2)), np.zeros((2, 1)), np.zeros((1, 2))) == 0.0


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_stream_finds_components_close_to_the_planted_ones(seed):
    """MiniBatchNMF over 300 batches of 200 rows seen once (as discover streams a large group: a batch of images
    at a time). Measured: cosines ≥ 0.938 (seed 2; others ≥ 0.999), last-batch error ≤ 0.02; the bounds keep a
    margin."""
    _, w, v = planted(60_000, 4, seed)
    f = factorise.stream((v[i:i + 200] for i in range(0, len(v), 200)), 4, seed=0)
    assert f.solver == "MiniBatchNMF" and f.k == 4
    assert matched_cosines(f.components, w).min() >= 0.9
    assert f.error < 0.05


def test_stream_of_nothing_is_refused():
    with pytest.raises(ValueError, match="no rows"):
        factorise.stream(iter([np.zeros((0, C))]), 2)
