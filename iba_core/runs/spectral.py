"""Spectral clustering of small normalised maps, as SpRAy does it (Lapuschkin et al. 2019), with numpy and scipy.

1. Distances d_ij = ‖t_i − t_j‖₂ between the flattened thumbnails (each sums to 1: `measures.thumbnail`).
2. Affinities W_ij = exp(−d_ij² / (σ_i σ_j)), W_ii = 0, σ_i = the distance from item i to its K-th nearest
   neighbour, K = min(7, round(√n)) but at least 2 (self-tuning scales, Zelnik-Manor & Perona 2004): a tight
   group of near-identical maps (a shortcut) links strongly inside and hardly to a spread-out rest.
3. The normalised Laplacian L = I − D^{-1/2} W D^{-1/2} (D = diag(Σ_j W_ij)), eigenvalues λ_1 ≤ λ_2 ≤ … .
4. k = the k ≤ max_k with the largest eigengap λ_{k+1} − λ_k (one cluster when no gap stands out).
5. The first k eigenvectors as rows, each scaled to length 1 (Ng, Jordan & Weiss 2002), grouped by k-means
   (k-means++ starts, several restarts, seeded: the same input gives the same clusters).

Clusters are numbered by size, largest first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import UserError

#: The most clusters the eigengap may choose.
MAX_CLUSTERS = 8
#: k-means restarts (the best by within-cluster sum of squares is kept).
RESTARTS = 10
#: The neighbour whose distance sets an item's scale (Zelnik-Manor & Perona 2004 use the 7th; fewer for few items).
NEIGHBOURS = 7
#: The most items clustered at once: the affinities are an n × n matrix (4,000: 128 MB).
MAX_ITEMS = 4000


@dataclass
class Clusters:
    """A clustering of n items: `labels[i]` is item i's cluster (0 = the largest), `k` clusters."""

    labels: np.ndarray  # (n,) int
    k: int
    eigenvalues: np.ndarray  # the smallest eigenvalues of the normalised Laplacian (for the eigengap)

    def members(self, cluster: int) -> np.ndarray:
        """Indices of the items in `cluster`."""
        return np.flatnonzero(self.labels == cluster)

    @property
    def sizes(self) -> list[int]:
        """The number of items in each cluster, largest first."""
        return [int((self.labels == c).sum()) for c in range(self.k)]


def affinities(features: np.ndarray) -> np.ndarray:
    """W (n, n): W_ij = exp(−d_ij² / (σ_i σ_j)) with σ_i the distance from item i to its K-th nearest neighbour
    (self-tuning scales, module docstring); zero diagonal."""
    x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
    sq = (x * x).sum(axis=1)
    d2 = np.clip(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0, None)
    np.fill_diagonal(d2, 0.0)
    n = len(x)
    k = min(NEIGHBOURS, n - 1, max(2, round(math.sqrt(n))))
    sigma = np.sqrt(np.sort(d2, axis=1)[:, k])
    # identical maps have no scale of their own: a tiny one, so they link to each other, not to the rest
    floor = max(float(np.sqrt(d2.max())) * 1e-6, 1e-12)
    sigma = np.maximum(sigma, floor)
    w = np.exp(-d2 / (sigma[:, None] * sigma[None, :]))
    np.fill_diagonal(w, 0.0)
    return w


def _kmeans(points: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Lloyd's k-means from a k-means++ start: (labels, within-cluster sum of squares)."""
    n = len(points)
    centres = [points[rng.integers(n)]]
    for _ in range(1, k):
        d2 = np.min(((points[:, None, :] - np.array(centres)[None]) ** 2).sum(-1), axis=1)
        total = d2.sum()
        centres.append(points[rng.choice(n, p=d2 / total)] if total > 0 else points[rng.integers(n)])
    centres = np.array(centres)
    labels = np.full(n, -1)
    for _ in range(100):
        d2 = ((points[:, None, :] - centres[None]) ** 2).sum(-1)
        new = d2.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(k):
            if (labels == c).any():
                centres[c] = points[labels == c].mean(axis=0)
    inertia = float(((points - centres[labels]) ** 2).sum())
    return labels, inertia


def spectral_clusters(features: np.ndarray, max_k: int = MAX_CLUSTERS, seed: int = 0) -> Clusters:
    """Cluster n items (rows of `features`, e.g. thumbnails (n, s, s)); k chosen by the eigengap up to max_k."""
    from scipy.linalg import eigh

    n = len(features)
    if n > MAX_ITEMS:
        raise UserError(f"Clustering compares every pair of maps, so it takes at most {MAX_ITEMS:,} maps at a time "
                        f"(here {n:,}); cluster one class, or a sample of the maps.")
    if n < 3:  # too few to tell groups apart
        return Clusters(np.zeros(n, dtype=int), 1 if n else 0, np.zeros(min(n, 1)))
    w = affinities(features)
    degree = w.sum(axis=1)
    inv_sqrt = np.where(degree > 0, 1.0 / np.sqrt(np.where(degree > 0, degree, 1.0)), 0.0)
    laplacian = np.eye(n) - inv_sqrt[:, None] * w * inv_sqrt[None, :]
    top = min(n, max_k + 1)
    values, vectors = eigh(laplacian, subset_by_index=[0, top - 1])
    gaps = np.diff(values)  # gaps[k-1] = λ_{k+1} − λ_k
    k = int(np.argmax(gaps[: max_k])) + 1 if len(gaps) else 1
    if k == 1:
        return Clusters(np.zeros(n, dtype=int), 1, values)
    embedding = vectors[:, :k]
    norms = np.linalg.norm(embedding, axis=1, keepdims=True)
    embedding = embedding / np.where(norms > 0, norms, 1.0)
    rng = np.random.default_rng(seed)
    labels, _ = min((_kmeans(embedding, k, rng) for _ in range(RESTARTS)), key=lambda r: r[1])
    # number the clusters by size, largest first (ties: by first member), and drop empty ones
    used = sorted(set(labels.tolist()), key=lambda c: (-(labels == c).sum(), np.flatnonzero(labels == c)[0]))
    renumber = {c: i for i, c in enumerate(used)}
    return Clusters(np.array([renumber[c] for c in labels]), len(used), values)
