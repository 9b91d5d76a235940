"""A class of a run on the Dataset page, with no Streamlit: its mean map and its clusters of similar maps (SpRAy),
the clusters drawn on one scale across the run, and the sentence for a cluster whose maps hold almost no bits.

    view = class_view(run, "iba_10", target=207)        # mean map, clusters largest first
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UserError
from ..render.colours import BITS_LABEL
from ..runs.highlights import BITS_UNIT, BORDER_FLAG, mass_thumbnails
from ..runs.per_class import class_mean_map, map_clusters
from ..runs.tables import Run
from .dataset import FEW_BITS_COLUMN, method_units, result_rows, with_flags

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class ClusterView:
    """One cluster of similar maps: its members (rows of the table), where their maps put their mass (`mean_map`:
    the mean of the members' maps on the thumbnail grid, in bits per pixel for the bottlenecks, else in shares of
    each map), the members' mean border share, whether that flags a border shortcut, their median total bits, and
    whether their maps hold almost no bits (`near_zero`: the median needs very few bits, as the run's flag says)."""

    cluster: int
    members: "pd.DataFrame"
    mean_map: np.ndarray  # THUMBNAIL × THUMBNAIL
    border_share: float
    flagged: bool
    median_bits: float = float("nan")
    near_zero: bool = False


@dataclass
class ClassView:
    """A class of one method: its mean map (bits per pixel for the bottlenecks), its clusters, and the clusters'
    one colour scale (`cluster_scale`, in `cluster_unit`: the largest cluster mean over every class of the run, so a
    cluster whose maps hold few bits looks dark, never stretched to full colour)."""

    method: str
    target: int
    class_name: str
    images: int
    mean_map: np.ndarray
    clusters: list[ClusterView] = field(default_factory=list)
    cluster_scale: float = 0.0
    cluster_unit: str = "share of the map"


def class_targets(run: Run, method: str) -> list[tuple[int, str]]:
    """(target, class name) of the classes with maps of `method`, in target order."""
    rows = result_rows(run.table)
    rows = rows[(rows["method"] == method) & rows["target"].notna()]
    pairs = rows.groupby("target")["class_name"].first()
    return [(int(t), str(n) if isinstance(n, str) else f"class {int(t)}") for t, n in pairs.items()]


def class_view(run: Run, method: str, target: int, cluster_scale: float | None = None) -> ClassView:
    """The class's mean map and its clusters of similar maps (`runs.map_clusters`: SpRAy), largest first, each
    cluster's mean map on one scale: `cluster_scale` (the run's, `RunHighlights.cluster_scale`), else this class's
    largest cluster mean."""
    names = dict(class_targets(run, method))
    if int(target) not in names:
        raise UserError(f"The run has no {method} map of class {target}.")
    bits = method_units(run).get(method) == BITS_UNIT
    mean = class_mean_map(run, method, int(target))
    groups = map_clusters(run, method, int(target))
    amounts = mass_thumbnails(groups.thumbnails, groups.rows, bits)
    few = with_flags(run, groups.rows)[FEW_BITS_COLUMN]
    clusters = []
    for c in range(groups.k):
        where = (groups.rows["cluster"] == c).to_numpy()
        members = groups.members(c)
        border = float(np.nanmean(members["border_share"].to_numpy(dtype=np.float64, na_value=np.nan))) \
            if members["border_share"].notna().any() else float("nan")
        median = float(members["total_bits"].median()) if bits and members["total_bits"].notna().any() \
            else float("nan")
        clusters.append(ClusterView(c, members, amounts[where].mean(axis=0).astype(np.float32), border,
                                    bool(math.isfinite(border) and border >= BORDER_FLAG), median,
                                    bool(bits and few[where].mean() > 0.5)))
    top = max((float(c.mean_map.max()) for c in clusters), default=0.0)
    # The run's scale is the largest of these same means, summed in another order and dtype: a top above it by
    # float rounding only must not give this class a scale of its own (every class is drawn on one scale).
    scale = cluster_scale if cluster_scale and top <= cluster_scale * (1 + 1e-5) else max(top, cluster_scale or 0.0)
    return ClassView(method, int(target), names[int(target)], len(groups.rows), mean, clusters,
                     scale, BITS_LABEL if bits else "share of the map")


def cluster_words(cluster: ClusterView, reference_bits: float | None) -> str:
    """A sentence on a cluster's bits: that its maps hold almost no bits (median against the run's upper quartile),
    so their picture is dark on the common scale; "" for a cluster with ordinary bits or maps not in bits."""
    if not cluster.near_zero:
        return ""
    ref = f" (the run's upper quartile: {reference_bits:,.1f})" if reference_bits else ""
    return (f"These maps hold almost no bits: a median of {cluster.median_bits:.3g} bits per image{ref}, so their "
            "picture is dark on the common scale; the network needs next to nothing from these images.")
