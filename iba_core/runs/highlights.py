"""What stands out across a whole folder run, before anyone picks a class: the first thing the Dataset page and the
HTML report show (issue #28).

    run = open_run("runs/val")
    found = run_highlights(run)                 # RunHighlights: plain data, drawn by the page and the report
    for h in found.items: print(h.title, h.images)

Four kinds of highlight, each a group of images of one method with a one-line title and a sentence:

- **needs very few bits** (`few_bits_mask`): an image whose decision passes through far fewer bits than the run's
  typical image. On a log scale: total_bits < Q₇₅ / FEW_BITS_FACTOR, i.e. at least one decade below the upper
  quartile Q₇₅ of the method's total bits over the whole run. The upper quartile, not the median: once half the
  images carry a shortcut (a watermark that alone decides the class), the median falls between the two groups or
  inside the shortcut group, while Q₇₅ stays with the ordinary images for up to three quarters of the run. Only maps
  in bits (the bottlenecks) have total bits; a method with fewer than FEW_BITS_MIN_ROWS maps flags nothing.
- **flagged clusters** of every class (SpRAy, `per_class.map_clusters`): a cluster whose maps put BORDER_FLAG or
  more of their mass in the border, or whose images mostly need very few bits.
- **class means that concentrate** (`concentration_region`): the class's mean map (from the thumbnails, weighted by
  each map's total, so it is the mean map's own distribution) puts at least REGION_FACTOR times a region's area
  share, and at least REGION_MIN_SHARE, in one corner (a quarter of each side) or one band (the outer
  BAND_FRACTION of a side), or BORDER_FLAG in the border.
- **outliers by distance to the class mean**: distance_to_class_mean > max(OUTLIER_DISTANCE, the class's median +
  OUTLIER_MADS · 1.4826 · MAD), in classes of at least OUTLIER_MIN_ROWS maps (a robust z-score above 3).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .measures import BORDER_FRACTION, TOP_FRACTION
from .per_class import class_rows, map_clusters
from .spectral import MAX_ITEMS

if TYPE_CHECKING:
    import pandas as pd

    from .tables import Run

#: The unit of the bottlenecks' maps (`Method.unit`): only these have total bits.
BITS_UNIT = "bits/pixel"


def methods_bits_first(info: dict) -> list[str]:
    """The method keys of a run's run.json (`info`), the bottlenecks (maps in BITS_UNIT) first, each group in key
    order: the default method of every view of a run (the first one)."""
    methods = info.get("methods", {})
    return sorted(methods, key=lambda k: (str(methods[k].get("unit", "")) != BITS_UNIT, k))


#: A map with at least this share of its mass in the outer 10 % of the image (36 % of its area) is flagged:
#: the network takes most of its information from the border, where a ruler, a watermark or a corner mark sits.
BORDER_FLAG = 0.5
#: "Needs very few bits": total bits at least this factor (one decade) below the run's upper quartile.
FEW_BITS_FACTOR = 10.0
#: The fewest maps of a method for its quartile to mean anything.
FEW_BITS_MIN_ROWS = 4
#: A class mean concentrates in a corner or band holding this many times the region's area share …
REGION_FACTOR = 3.0
#: … and at least this share of the mean map.
REGION_MIN_SHARE = 0.3
#: A corner is this fraction of each side; a band the outer BAND_FRACTION of one side.
CORNER_FRACTION = 0.25
BAND_FRACTION = 0.15
#: Outliers: distance to the class mean above this, and above the class's median by OUTLIER_MADS robust deviations.
#: Thumbnails are non-negative, so even maps on disjoint places keep some cosine to a class mean that includes them:
#: one map of eight on a corner, the rest spread, lies about 0.37 from its class's mean.
OUTLIER_DISTANCE = 0.3
OUTLIER_MADS = 3.0
OUTLIER_MIN_ROWS = 5
#: Maps are "nearly flat" when their top TOP_FRACTION of pixels holds less than this share (a uniform map holds
#: exactly TOP_FRACTION): the bottleneck found no place worth keeping more than another.
FLAT_CONCENTRATION = 2 * TOP_FRACTION
#: At most this many images named in a highlight's sentence (it holds them all: a filter takes every one).
NAMED_IMAGES = 24


@dataclass(frozen=True)
class Highlight:
    """A group of images that stands out: `kind` ("few_bits", "cluster", "class_mean", "outliers"), a one-line
    `title`, a `detail` sentence, the `method` key, the class (`target`, None: across classes) and the `images`
    (keys of the run's table), most striking first."""

    kind: str
    title: str
    detail: str
    method: str
    target: int | None
    images: tuple[str, ...]


@dataclass
class RunHighlights:
    """Everything that stands out in one method's maps of a run, in the order the page and the report show it:
    the images that need very few bits, flagged clusters of every class, class means that concentrate, outliers.
    `reference_bits` is the run's upper quartile of total bits (None without bits); `cluster_scale` the
    clusters' one colour scale; `checked` says in words what
    was looked at, for the "nothing stands out" case."""

    method: str
    items: list[Highlight] = field(default_factory=list)
    reference_bits: float | None = None
    checked: str = ""
    #: The largest value of any cluster's mean map (`mass_thumbnails`), over every class: the clusters' one scale.
    cluster_scale: float = 0.0

    @property
    def images(self) -> set[str]:
        """Every image named by a highlight."""
        return {image for h in self.items for image in h.images}

    def same_images_as(self, i: int) -> int | None:
        """The first earlier highlight naming exactly the images of highlight `i` (its pictures are then not drawn
        again: one cue often shows as few bits, a flagged cluster and a class mean at once), else None."""
        images = set(self.items[i].images)
        return next((j for j in range(i) if set(self.items[j].images) == images), None)


def few_bits_reference(bits: np.ndarray) -> float | None:
    """The typical total of a run's maps that the few-bits flag compares with: the upper quartile of the finite,
    positive totals; None with fewer than FEW_BITS_MIN_ROWS of them."""
    bits = np.asarray(bits, dtype=np.float64)
    bits = bits[np.isfinite(bits) & (bits > 0)]
    if bits.size < FEW_BITS_MIN_ROWS:
        return None
    return float(np.exp(np.quantile(np.log(bits), 0.75)))  # the quartile of log bits: a log-scale measure


def few_bits_mask(table: "pd.DataFrame", units: dict[str, str]) -> np.ndarray:
    """(len(table),) bool: the result rows of a bits method whose total bits lie at least FEW_BITS_FACTOR below the
    upper quartile of that method's totals over the run (module docstring); False elsewhere (other methods, errors,
    NaN)."""
    out = np.zeros(len(table), dtype=bool)
    if not len(table):
        return out
    bits = table["total_bits"].to_numpy(dtype=np.float64, na_value=np.nan)
    ok = table["error"].isna().to_numpy() if "error" in table else np.ones(len(table), dtype=bool)
    methods = table["method"].to_numpy()
    for method, unit in units.items():
        if unit != BITS_UNIT:
            continue
        where = (methods == method) & ok
        reference = few_bits_reference(bits[where])
        if reference is not None:
            out |= where & (bits < reference / FEW_BITS_FACTOR)
    return out


def _regions(size: int) -> dict[str, np.ndarray]:
    """The regions a class mean may concentrate in, as (size, size) masks on the thumbnail grid."""
    c, b = max(1, round(CORNER_FRACTION * size)), max(1, round(BAND_FRACTION * size))
    masks = {}
    for name, rows, cols in (("top-left corner", slice(0, c), slice(0, c)),
                             ("top-right corner", slice(0, c), slice(size - c, size)),
                             ("bottom-left corner", slice(size - c, size), slice(0, c)),
                             ("bottom-right corner", slice(size - c, size), slice(size - c, size)),
                             ("top band", slice(0, b), slice(None)), ("bottom band", slice(size - b, size), slice(None)),
                             ("left band", slice(None), slice(0, b)), ("right band", slice(None), slice(size - b, size))):
        mask = np.zeros((size, size), dtype=bool)
        mask[rows, cols] = True
        masks[name] = mask
    return masks


def border_cells(size: int) -> np.ndarray:
    """(size, size) bool: the border of the thumbnail grid (the outer BORDER_FRACTION on each side)."""
    n = max(1, round(BORDER_FRACTION * size))
    mask = np.ones((size, size), dtype=bool)
    mask[n:size - n, n:size - n] = False
    return mask


def concentration_region(mean: np.ndarray) -> tuple[str, float, float] | None:
    """Where a class's mean map concentrates, as (region, its share of the map, its share of the area): the corner
    or band with the largest share-to-area ratio among those holding at least REGION_FACTOR × their area and
    REGION_MIN_SHARE of the map, else the border when it holds BORDER_FLAG; None when the map is spread (or empty).
    `mean` is any non-negative map (a mean thumbnail)."""
    m = np.abs(np.asarray(mean, dtype=np.float64))
    total = m.sum()
    if m.ndim != 2 or not total > 0 or not math.isfinite(total):
        return None
    size = m.shape[0]
    best = None
    for name, mask in _regions(size).items():
        share, area = float(m[mask].sum() / total), float(mask.mean())
        if share >= max(REGION_FACTOR * area, REGION_MIN_SHARE) and (best is None or share / area > best[1] / best[2]):
            best = (name, share, area)
    if best is None:
        mask = border_cells(size)
        share = float(m[mask].sum() / total)
        if share >= BORDER_FLAG:
            best = ("border", share, float(mask.mean()))
    return best


def mass_thumbnails(thumbs: np.ndarray, rows: "pd.DataFrame", bits: bool) -> np.ndarray:
    """The maps' own amounts per thumbnail cell, so a mean over maps is the thumbnail of their mean map (not of their
    mean shape): for maps in bits, share × total bits ÷ the cell's pixels (bits per pixel, averaged over the cell);
    otherwise the shares themselves (such maps have no common unit)."""
    thumbs = np.asarray(thumbs, dtype=np.float64)
    if not bits:
        return thumbs
    totals = rows["total_bits"].to_numpy(dtype=np.float64, na_value=np.nan)
    pixels = (rows["height"].to_numpy(dtype=np.float64, na_value=np.nan)
              * rows["width"].to_numpy(dtype=np.float64, na_value=np.nan)) / (thumbs.shape[1] * thumbs.shape[2])
    per_cell = np.where(np.isfinite(totals) & np.isfinite(pixels) & (pixels > 0), totals / pixels, 0.0)
    return thumbs * per_cell[:, None, None]


def _names(images) -> tuple[str, ...]:
    return tuple(str(i) for i in images)


def named(images: tuple[str, ...], limit: int = NAMED_IMAGES) -> str:
    """The images as a list in words: the first `limit` (each `shown_name`: isolated, its invisible characters
    said), then how many more."""
    from ..render.text import shown_name

    more = f" and {len(images) - limit:,} more" if len(images) > limit else ""
    return ", ".join(shown_name(i) for i in images[:limit]) + more


def _class_name(rows: "pd.DataFrame", target: int) -> str:
    from ..render.text import shown_name

    names = rows["class_name"].dropna()
    return shown_name(names.iloc[0]) if len(names) else f"class {target}"


def _bits_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _flat_words(group: "pd.DataFrame") -> str:
    """A sentence when the maps of `group` are nearly flat (median concentration below FLAT_CONCENTRATION), else "".
    Then the class survives with every feature replaced by the bottleneck's noise, so the maps cannot show where the
    cue is; a cue present in the images the statistics came from rides along in that noise (its mean)."""
    if "concentration" not in group:
        return ""
    share = float(np.nanmedian(group["concentration"].to_numpy(dtype=np.float64, na_value=np.nan))) \
        if group["concentration"].notna().any() else float("nan")
    if not (math.isfinite(share) and share < FLAT_CONCENTRATION):
        return ""
    return (f" Their maps are nearly flat (the top {TOP_FRACTION:.0%} of pixels hold {share:.0%} of a map): the class "
            "survives with the features replaced by noise, so the maps cannot show where the cue is. If the images "
            "the feature statistics came from carry the cue, the noise, drawn around their mean, may carry it too: estimate the statistics on "
            "images without it and run again.")


def _cluster_highlight(members: "pd.DataFrame", c: int, k: int, name: str, few_set: set, method: str,
                       target: int) -> Highlight | None:
    """A cluster's highlight when its maps put BORDER_FLAG or more in the border, or most of its images need very
    few bits; else None."""
    border = float(np.nanmean(members["border_share"].to_numpy(dtype=np.float64, na_value=np.nan))) \
        if members["border_share"].notna().any() else float("nan")
    few_share = float(members["image"].isin(few_set).mean()) if few_set else 0.0
    reasons = []
    if math.isfinite(border) and border >= BORDER_FLAG:
        reasons.append(f"their maps put {border:.0%} of their mass in the border")
    if few_share > 0.5:
        reasons.append(f"{few_share:.0%} of them need very few bits")
    if not reasons:
        return None
    # one cluster is the whole class: said so, not dressed up as a group found inside it
    which = f"all {len(members)} images (one cluster)" if k == 1 else f"cluster {c + 1} of {k}, {len(members)} images"
    return Highlight("cluster", f"Class {name}, {which}: {'; '.join(reasons)}",
                     "A group of similar maps (spectral clustering) that points at one cue the network uses for this "
                     "class.", method, target, _names(members.sort_values("total_bits")["image"]))


def _few_bits_highlight(rows, few_set: set, method: str, reference_bits: float | None) -> Highlight:
    """The highlight of the images in `few_set` (those that need very few bits) among `rows`."""
    group = rows[rows["image"].isin(few_set)].sort_values("total_bits")
    rest = rows[~rows["image"].isin(few_set)]["total_bits"]
    return Highlight(
        "few_bits", f"{len(group)} of {len(rows)} images need very few bits",
        f"Their decisions pass through a median of {_bits_text(float(group['total_bits'].median()))} bits, "
        f"against {_bits_text(float(rest.median()))} for the other images (flagged: at least "
        f"{FEW_BITS_FACTOR:.0f}× below the run's upper quartile, {_bits_text(reference_bits)} bits). A "
        "network that needs almost nothing from an image often decides by one small cue (a mark, a watermark)."
        + _flat_words(group),
        method, None, _names(group["image"]))


def _cluster_highlights(run: "Run", method: str, target: int, name: str, amounts: np.ndarray, thumbnails,
                        few_set: set, found: RunHighlights) -> list[Highlight]:
    """The flagged clusters of one class's maps; widens `found.cluster_scale` to every cluster's mean map."""
    groups = map_clusters(run, method, target, thumbnails=thumbnails)  # rows in the class's mapped order
    items = []
    for c in range(groups.k):
        where = (groups.rows["cluster"] == c).to_numpy()
        found.cluster_scale = max(found.cluster_scale, float(amounts[where].mean(axis=0).max()))
        item = _cluster_highlight(groups.members(c), c, groups.k, name, few_set, method, target)
        if item is not None:
            items.append(item)
    return items


def _class_mean_highlight(members, name: str, amounts: np.ndarray, method: str, target: int) -> Highlight | None:
    """The highlight of a class whose mean map concentrates in one region (`concentration_region`), if it does."""
    region = concentration_region(amounts.mean(axis=0))
    if region is None:
        return None
    where, share, area = region
    top = members.sort_values("border_share", ascending=False)
    return Highlight(
        "class_mean", f"Class {name}: its mean map puts {share:.0%} in the {where} ({area:.0%} of the image)",
        f"Over its {len(members)} images the maps of this class concentrate in the {where}; an object "
        "rarely sits in the same place in every image, a mark or a frame does.", method, target,
        _names(top["image"]))


def _class_outliers(members):
    """The rows of one class whose map lies far from the class's mean map (module docstring), or None when the
    class has too few maps to say."""
    distances = members["distance_to_class_mean"].to_numpy(dtype=np.float64, na_value=np.nan)
    finite = distances[np.isfinite(distances)]
    if finite.size < OUTLIER_MIN_ROWS:
        return None
    median = float(np.median(finite))
    spread = 1.4826 * float(np.median(np.abs(finite - median)))
    limit = max(OUTLIER_DISTANCE, median + OUTLIER_MADS * spread)
    return members[distances > limit]


def _outliers_highlight(outlier_rows: list, method: str) -> Highlight | None:
    """The highlight of every class's outliers together, if there are any."""
    import pandas as pd

    if not outlier_rows:
        return None
    outliers = pd.concat(outlier_rows).sort_values("distance_to_class_mean", ascending=False)
    if not len(outliers):
        return None
    return Highlight(
        "outliers", f"{len(outliers)} images unlike the rest of their class",
        f"Their maps lie far from their class's mean map (distance to the class mean above "
        f"{OUTLIER_DISTANCE:g} and {OUTLIER_MADS:g} robust deviations above the class's median): the "
        "network looks elsewhere in these images.", method, None, _names(outliers["image"]))


def _checked_text(maps: int, classes: int, bits: bool, unclustered: list[str]) -> str:
    """What `run_highlights` looked at, in one sentence (and the classes too large to cluster)."""
    skipped = (f" Classes with more than {MAX_ITEMS:,} maps were not clustered: {', '.join(unclustered)}."
               if unclustered else "")
    return (f"Checked {maps} maps of {classes} classes: total bits"
            f"{'' if bits else ' (none: this method is not in bits)'}, clusters of similar maps, where each "
            f"class's mean map lies, and each map's distance to its class's mean.{skipped}")


def run_highlights(run: "Run", method: str, units: dict[str, str]) -> RunHighlights:
    """What stands out in `method`'s maps across every class of `run` (module docstring); `units` maps method keys to
    their unit (run.json's)."""
    import pandas as pd

    table = run.table
    rows = class_rows(run, method)
    rows = rows[rows["error"].isna()]
    found = RunHighlights(method)
    if rows.empty:
        found.checked = "The run has no map of this method."
        return found
    bits = units.get(method) == BITS_UNIT
    few = few_bits_mask(table, units) & (table["method"] == method).to_numpy()
    few_set = set(table["image"][few])
    if bits:
        found.reference_bits = few_bits_reference(rows["total_bits"].to_numpy(dtype=np.float64, na_value=np.nan))
    items: list[Highlight] = [_few_bits_highlight(rows, few_set, method, found.reference_bits)] if few_set else []
    cluster_items, mean_items, outlier_rows, unclustered = [], [], [], []
    targets = sorted(int(t) for t in rows["target"].dropna().unique())
    # every thumbnail read once (one file per part), then handed to each class's clustering
    mapped = class_rows(run, method)
    thumbnails = pd.Series(list(run.thumbnails(mapped)), index=mapped.index)
    for target in targets:
        members = rows[rows["target"] == target]
        name = _class_name(members, target)
        mapped_class = mapped[mapped["target"] == target]
        amounts = mass_thumbnails(np.stack(thumbnails.loc[mapped_class.index].to_list()), mapped_class, bits)
        if len(mapped_class) > MAX_ITEMS:  # clustering compares every pair: such a class is left unclustered, said
            unclustered.append(name)
        else:
            cluster_items += _cluster_highlights(run, method, target, name, amounts, thumbnails, few_set, found)
        mean_items += [h for h in [_class_mean_highlight(members, name, amounts, method, target)] if h is not None]
        outlier_rows += [o for o in [_class_outliers(members)] if o is not None]
    items += cluster_items + mean_items
    outliers = _outliers_highlight(outlier_rows, method)
    found.items = items + ([outliers] if outliers is not None else [])
    found.checked = _checked_text(len(rows), len(targets), bits, unclustered)
    return found
