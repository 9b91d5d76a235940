"""Per class of a run: its rows, its mean map, and clusters of similar maps (SpRAy, Lapuschkin et al. 2019).

A class is the explained class (`target`) of one method's rows that have a map; `target=None` takes every class
of the method at once (a shortcut shared by several classes then shows as one cluster).

    run = open_run("runs/val")
    mean = class_mean_map(run, "iba_10", 285)             # bits per pixel, averaged over the class's images
    groups = map_clusters(run, "iba_10", 285)             # SpRAy: clusters of similar thumbnails
    groups.members(0)                                     # the table's rows of the largest cluster
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UserError
from .spectral import MAX_CLUSTERS, spectral_clusters

if TYPE_CHECKING:
    import pandas as pd

    from .tables import Run


def class_rows(run: "Run", method: str, target: int | None = None) -> "pd.DataFrame":
    """The rows of `method` with a map (no error), of class `target` (None: every class)."""
    table = run.table
    rows = table[(table["method"] == method) & (table["map_index"] >= 0)]
    if target is not None:
        rows = rows[rows["target"] == int(target)]
    return rows


def class_mean_map(run: "Run", method: str, target: int) -> np.ndarray:
    """The mean (H, W) map of a class's images (bits per pixel for the bottlenecks); a UserError when the run has
    no map of that class."""
    rows = class_rows(run, method, target)
    if rows.empty:
        raise UserError(f"The run has no {method} map of class {target}.")
    total = None
    for _, row in rows.iterrows():
        values = run.heatmap(row).astype(np.float64)
        total = values if total is None else total + values
    return (total / len(rows)).astype(np.float32)


@dataclass
class MapClusters:
    """Clusters of similar maps: `rows` are the clustered rows of the table with a `cluster` column (0 = the
    largest cluster), `k` clusters, the Laplacian's smallest `eigenvalues` (their largest gap chose k)."""

    rows: "pd.DataFrame"
    k: int
    eigenvalues: np.ndarray
    thumbnails: np.ndarray  # (n, 28, 28) of `rows`, in order

    def members(self, cluster: int) -> "pd.DataFrame":
        """The rows in `cluster`."""
        return self.rows[self.rows["cluster"] == cluster]

    def mean_thumbnail(self, cluster: int) -> np.ndarray:
        """The cluster's mean thumbnail (where its maps put their mass)."""
        return self.thumbnails[(self.rows["cluster"] == cluster).to_numpy()].mean(axis=0)


def map_clusters(run: "Run", method: str, target: int | None = None, max_k: int = MAX_CLUSTERS,
                 seed: int = 0, thumbnails: "pd.Series | None" = None) -> MapClusters:
    """Spectral clusters of the thumbnails of one class's maps (`spectral.spectral_clusters`; k by the eigengap,
    at most max_k); target None clusters every map of the method. `thumbnails`: the thumbnails already read, one
    array per row label (a Series over the table's index), so a caller going through every class reads each part
    of the run once, not once per class."""
    rows = class_rows(run, method, target)
    if rows.empty:
        which = f"class {target}" if target is not None else "any class"
        raise UserError(f"The run has no {method} map of {which} to cluster.")
    thumbs = run.thumbnails(rows) if thumbnails is None else np.stack(thumbnails.loc[rows.index].to_list())
    clusters = spectral_clusters(thumbs, max_k=max_k, seed=seed)
    return MapClusters(rows.assign(cluster=clusters.labels), clusters.k, clusters.eigenvalues, thumbs)
