"""Non-negative factorisation of a layer's location vectors with scikit-learn: V (rows × C) ≈ U W, U ≥ 0, W ≥ 0
(`fit`), the number of concepts by the reconstruction error's elbow (`choose_k`), and U for new rows with W fixed
(`Factors.coefficients`).

scikit-learn's `NMF` (coordinate descent, NNDSVDa start: deterministic for a seed) fits a bounded sample of rows;
`MiniBatchNMF` learns from batches streamed through `partial_fit` where a group is too large to sample once
(`stream`). scikit-learn names the factors the other way round (X ≈ W H, H = `components_`); here W is always the
concepts (K × C) and U the coefficients.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import warnings
from contextlib import contextmanager
from typing import Iterable, Iterator

import numpy as np

#: The fewest and the most concepts the elbow rule considers.
K_MIN, K_MAX = 2, 8
#: Rows the elbow rule fits on (a seeded subsample of the fit's rows): each K is one NMF fit.
ELBOW_ROWS = 10_000
#: Iterations of a fit (NMF's default, 200, leaves the error still falling on 16-channel toys).
MAX_ITER = 400


@dataclass
class Factors:
    """The concepts W (K × C) of a group, with what chose and fitted them."""

    components: np.ndarray  # W, float32 (K, C)
    error: float  # relative reconstruction error ‖V − UW‖_F / ‖V‖_F on the rows fitted
    #: (K, relative error) of the elbow rule's fits; empty when the K was given
    curve: list[tuple[int, float]] = field(default_factory=list)
    solver: str = "NMF"

    @property
    def k(self) -> int:
        return int(self.components.shape[0])

    def coefficients(self, rows: np.ndarray) -> np.ndarray:
        """U (rows × K) ≥ 0 minimising ‖rows − U W‖_F with W fixed (scikit-learn's `non_negative_factorization`
        with update_H=False: the same solver as the fit)."""
        from sklearn.decomposition import non_negative_factorization

        rows = np.asarray(rows, dtype=np.float32)
        if not len(rows) or not rows.any():
            return np.zeros((len(rows), self.k), dtype=np.float32)
        with _quiet():
            u, _, _ = non_negative_factorization(rows, H=self.components, n_components=self.k, init="custom",
                                                 update_H=False, solver="cd", max_iter=MAX_ITER, tol=1e-5)
        return u.astype(np.float32)


@contextmanager
def _quiet() -> Iterator[None]:
    """scikit-learn warns when a fit stops at MAX_ITER; the relative error it reaches is recorded instead."""
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        yield


def relative_error(rows: np.ndarray, u: np.ndarray, w: np.ndarray) -> float:
    """‖V − U W‖_F / ‖V‖_F (0 for an all-zero V)."""
    rows = np.asarray(rows, dtype=np.float64)
    norm = float(np.linalg.norm(rows))
    return float(np.linalg.norm(rows - u.astype(np.float64) @ w.astype(np.float64)) / norm) if norm > 0 else 0.0


def fit(rows: np.ndarray, k: int, seed: int = 0) -> Factors:
    """NMF of `rows` (n × C, non-negative) into k concepts."""
    from sklearn.decomposition import NMF

    rows = np.asarray(rows, dtype=np.float32)
    k = max(1, min(int(k), *rows.shape))
    model = NMF(n_components=k, init="nndsvda", solver="cd", max_iter=MAX_ITER, tol=1e-5, random_state=seed)
    with _quiet():
        u = model.fit_transform(rows)
    w = model.components_.astype(np.float32)
    return Factors(w, relative_error(rows, u, w))


def elbow(curve: list[tuple[int, float]]) -> int:
    """The K of the curve's elbow: the point farthest below the straight line from its first to its last point,
    both axes scaled to 0–1 (Kneedle's rule); the first K when the curve is flat, has no point below the chord (a
    straight line) or has fewer than three points."""
    if len(curve) < 3:
        return curve[0][0]
    ks = np.array([k for k, _ in curve], dtype=np.float64)
    es = np.array([e for _, e in curve], dtype=np.float64)
    span = es[0] - es[-1]
    if not span > 1e-9:
        return int(ks[0])
    x = (ks - ks[0]) / (ks[-1] - ks[0])
    y = (es - es[-1]) / span  # 1 at the first K, 0 at the last
    below = (1 - x) - y  # the chord minus the curve: positive where the curve bends below it
    if not below.max() > 1e-9:  # a straight line (or bowed up) has no elbow; rounding noise must not pick one
        return int(ks[0])
    return int(ks[int(np.argmax(below))])


def choose_k(rows: np.ndarray, k_max: int = K_MAX, seed: int = 0) -> tuple[int, list[tuple[int, float]]]:
    """(K, curve): the elbow of the relative reconstruction error over K = K_MIN … k_max (each an NMF fit on at
    most ELBOW_ROWS rows of `rows`, seeded)."""
    rows = np.asarray(rows, dtype=np.float32)
    if len(rows) > ELBOW_ROWS:
        rows = rows[np.random.default_rng(seed).choice(len(rows), ELBOW_ROWS, replace=False)]
    top = max(K_MIN, min(k_max, rows.shape[1], len(rows)))
    curve = [(k, fit(rows, k, seed).error) for k in range(K_MIN, top + 1)]
    return elbow(curve), curve


def stream(batches: Iterable[np.ndarray], k: int, seed: int = 0, batch_size: int = 4096) -> Factors:
    """MiniBatchNMF learnt from row batches streamed once (`partial_fit`): for groups too large to sample into one
    fit. The error is that of the last batch."""
    from sklearn.decomposition import MiniBatchNMF

    model = MiniBatchNMF(n_components=k, init="nndsvda", batch_size=batch_size, random_state=seed, max_iter=MAX_ITER)
    last = None
    for rows in batches:
        rows = np.asarray(rows, dtype=np.float32)
        if len(rows):
            with _quiet():
                model.partial_fit(rows)
            last = rows
    if last is None:
        raise ValueError("no rows to factorise")
    w = model.components_.astype(np.float32)
    u = model.transform(last)
    return Factors(w, relative_error(last, u, w), solver="MiniBatchNMF")
