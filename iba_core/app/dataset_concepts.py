"""The Dataset page's concept atlas (issue #41), with no Streamlit: a run's concept set (`concepts.open_concepts`)
read for the page and the report — per class its concepts in order (bits share, else effect), their numbers in
words, the strip of each concept's top crops with its concept map over them, the shortcut candidates that lead
"What stands out", and a concept's images for the table and gallery (its map outlined over each overlay).

    concepts = run_concepts(run)                         # None: the run has no concept set yet
    rows = ordered_concepts(concepts.concepts, "class-0")  # most bits share first
    cells = concept_strip(run, concepts, rows.iloc[0], trust)  # PNGs of its top crops, the concept map over them
    images = concept_images(concepts, "class-0", 2)      # those that use it, best first: the table and gallery

Pictures are drawn from the image as the network saw it (`dataset_gallery.network_crop`): only where the app's
trust rules let it read the file, so a concept set cannot make the app show a file it may not read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from ..concepts.crops import peak_box
from ..render.text import count_of, shown_name
from ..runs.tables import Run
from ..trust import Trust
from .dataset import is_missing, result_rows
from .dataset_gallery import network_crop

if TYPE_CHECKING:
    import pandas as pd

#: Top crops in a concept's strip (the page's and the report's).
STRIP_IMAGES = 6
#: Concepts per group whose strips the report draws besides the flagged ones (the others: their numbers only).
REPORT_STRIPS = 3
#: Side of a strip's picture in pixels.
STRIP_PX = 96
#: The concept maps' colour map: not the bits maps' (inferno), so a concept is never read as bits.
CONCEPT_CMAP = "viridis"
#: The concept map's opacity where it is largest; less where it is weaker, none where it is zero (the photo shows).
CONCEPT_OPACITY = 0.85
#: Where a gallery overlay outlines the focused concept: its map at this share of its maximum in the image, or more.
OUTLINE_SHARE = 0.5
#: A change of p below this reads as none (it would be written "by 0.00").
SAME_P = 0.005
#: The group of the whole run (`concepts` contract); a class's group is "class-<target>".
WHOLE_RUN = "all"


# ---- the concept set of a run ---------------------------------------------------------------------


def run_concepts(run: Run):
    """The run's newest concept set (`concepts.open_concepts`), or None when it has none yet."""
    from ..concepts import list_sets, open_concepts

    if not list_sets(run.path):
        return None
    return open_concepts(run.path)


def set_stamp(run: Run) -> tuple | None:
    """What changes when the run's newest concept set does (its name, the times of its folder and of its groups'
    folder, which a finished group or a healed part touches); None when the run has no set. A page keeps the set
    it opened while its stamp stays (opening one checks every file's checksum)."""
    from ..concepts import list_sets
    from ..concepts.store import CONCEPTS, GROUPS

    sets = list_sets(run.path)
    if not sets:
        return None
    folder = Path(run.path) / CONCEPTS / sets[0]
    return (sets[0], *(p.stat().st_mtime_ns for p in (folder, folder / GROUPS) if p.exists()))


def set_text(concepts) -> str:
    """What a concept set was made with, in one sentence (its concepts.json): layer, K, the bits' method, the
    transform."""
    info = concepts.info if isinstance(concepts.info, dict) else {}
    k = f"K = {info['k']} per group" if info.get("k") else (
        f"K per group at the elbow of the reconstruction error (up to {info.get('k_max') or '?'})")
    bits = f"the bits of {info['method']}" if info.get("method") else "no bits (the run has no bottleneck method)"
    return (f"Concept set {Path(str(concepts.path)).name}: layer {info.get('layer', '?')}, {k}, {bits}, "
            f"the layer's {info.get('transform', 'activations')} factorised.")


def group_name(group: str, class_name: object = None) -> str:
    """A group in words: "class marked" (or "class 3" without a name), "the whole run"."""
    if group == WHOLE_RUN:
        return "the whole run"
    if isinstance(class_name, str) and class_name:
        return f"class {shown_name(class_name)}"
    return f"class {group.removeprefix('class-')}"


def groups(concepts: "pd.DataFrame") -> list[tuple[str, str]]:
    """(group, its name in words) of a concept table: the classes in target order, then the whole run."""
    firsts = concepts.drop_duplicates("group")
    classes = firsts[firsts["group"] != WHOLE_RUN]
    classes = classes.iloc[np.argsort(classes["target"].to_numpy(dtype=np.float64, na_value=np.inf), kind="stable")]
    out = [(str(r["group"]), group_name(str(r["group"]), r["class_name"])) for _, r in classes.iterrows()]
    if (firsts["group"] == WHOLE_RUN).any():
        out.append((WHOLE_RUN, group_name(WHOLE_RUN)))
    return out


#: The orders the atlas offers: bits share (ties and a run without bits: effect), or effect (ties: bits share).
ORDERS = ("bits share", "effect")


def ordered_concepts(concepts: "pd.DataFrame", group: str, by: str = "bits share") -> "pd.DataFrame":
    """The concepts of `group`, the largest bits share first; where the run has no bits (bits_share NaN) or two
    shares tie, the larger effect first. by="effect": the largest effect first (a cue the maps cannot show, such as
    one the class keeps through pure noise, may carry few bits yet all of the effect), ties by bits share."""
    if by not in ORDERS:
        raise ValueError(f"Order concepts by one of {ORDERS}, not {by!r}.")
    rows = concepts[concepts["group"] == group]
    share = np.nan_to_num(-rows["bits_share"].to_numpy(dtype=np.float64, na_value=np.nan), nan=np.inf)
    effect = np.nan_to_num(-rows["effect"].to_numpy(dtype=np.float64, na_value=np.nan), nan=np.inf)
    # lexsort sorts by its last key first; a NaN, negated to +inf, comes last
    order = np.lexsort((effect, share) if by == "bits share" else (share, effect))
    return rows.iloc[order]


def flagged_first(concepts: "pd.DataFrame", group: str) -> "pd.DataFrame":
    """The concepts of `group` in `ordered_concepts`' order, the shortcut candidates moved to the front."""
    rows = ordered_concepts(concepts, group)
    flagged = rows["flagged"].fillna(False).to_numpy(dtype=bool)
    return rows.iloc[np.argsort(~flagged, kind="stable")]


# ---- a concept's numbers in words -----------------------------------------------------------------


def concept_title(row) -> str:
    """"Concept 2" (the table counts from 0, people from 1)."""
    return f"Concept {int(row['concept']) + 1}"


def _number(value) -> float:
    return float("nan") if is_missing(value) else float(value)


def share_text(row) -> str:
    """"34 % of the bits" of its group (where it is active, coefficient-weighted), or "" without a bits method."""
    share = _number(row["bits_share"])
    return "" if not math.isfinite(share) else f"{share:.0%} of the bits"


def effect_text(row) -> str:
    """The causal check in words: p(target) with and without the concept's part of the layer, and with it alone."""
    full, without, only = (_number(row[c]) for c in ("p_full", "p_without", "p_only"))
    effect = _number(row["effect"])
    if not math.isfinite(effect):
        return ""
    if abs(effect) < SAME_P:
        text = f"removing it leaves p at {full:.2f}"
    elif effect > 0:
        text = f"removing it drops p by {effect:.2f} ({full:.2f} → {without:.2f})"
    else:
        text = f"removing it raises p by {-effect:.2f} ({full:.2f} → {without:.2f})"
    return text + (f"; alone it keeps p at {only:.2f}" if math.isfinite(only) else "")


def used_text(row) -> str:
    """"used by 7 of 10 images" (an image uses it where it holds at least the contract's share of the bits)."""
    return f"used by {int(row['images_using'])} of {count_of(int(row['images']), 'image')}"


def concept_caption(row) -> str:
    """A concept's numbers in one line: its bits share, its effect, how many images use it."""
    return " · ".join(p for p in (share_text(row), effect_text(row), used_text(row)) if p)


def words_text(concepts, row, top: int = 3) -> str:
    """A concept's words (a CLIP model's closest prompts to its top crops, `concepts.crops.words_table`) with their
    scores, or "" when the set has none."""
    import pandas as pd

    target = None if pd.isna(row["target"]) else int(row["target"])
    words = concepts.words_of(target, int(row["concept"]))[:top]
    if not words:
        return ""
    return "Looks like (CLIP, score above the other concepts'): " + ", ".join(f"“{w}” {s:+.3f}" for w, s in words)


#: Where a set has no words, how to get them (the app has no CLIP model of its own to name concepts with).
WORDS_HOW = ("Words for the concepts come from a CLIP model: `python -m iba_core concepts RUN_DIR --words-model "
             "clip:FOLDER [--prompt WORDS …]` adds them to this set.")


def flag_text(row) -> str:
    """Why a concept is a shortcut candidate (its `flag_reasons`), or "" when it is not flagged."""
    if not bool(row["flagged"]) or is_missing(row["flag_reasons"]):
        return ""
    return str(row["flag_reasons"])


# ---- a concept's top crops ------------------------------------------------------------------------


def concept_rows(concepts, group: str, concept: int) -> "pd.DataFrame":
    """The image × concept rows of one concept (`ConceptSet.images`), its top image first (rank 1)."""
    images = concepts.images
    rows = images[(images["group"] == group) & (images["concept"] == int(concept))]
    return rows.sort_values("rank", kind="stable")


def image_row(run: Run, image: str):
    """A result row of the run for `image` (any method: the crop is the same), or None where it has none."""
    rows = result_rows(run.table)
    rows = rows[rows["image"] == image]
    return None if rows.empty else rows.iloc[0]


@dataclass
class StripCell:
    """One picture of a concept's strip: the image's key, the PNG (None where the image cannot be read here) and a
    caption (the image and its share of the concept)."""

    image: str
    png: bytes | None
    caption: str


def concept_strip(run: Run, concepts, row, trust: Trust, n: int = STRIP_IMAGES, whole: bool = False
                  ) -> list[StripCell]:
    """The concept's top `n` images (by presence), each a crop around the concept's peak (`concepts.crops.peak_box`) of the image
    as the network saw it, with the concept map over it on one scale for the strip (`CONCEPT_CMAP`, its opacity
    growing with its value: the photo shows where the concept is absent). whole: the
    network's whole crop instead, the crop box outlined: where in the image the concept sits."""
    from ..render.overlays import draw_boxes, overlay_image, png_bytes

    members = concept_rows(concepts, str(row["group"]), int(row["concept"])).head(n)
    crops, maps = [], []
    for _, member in members.iterrows():
        source = image_row(run, str(member["image"]))
        crop = None if source is None else network_crop(run, source, trust)
        crops.append(crop)
        maps.append(None if crop is None else concepts.concept_map(member, size=(crop.height, crop.width)))
    top = max((float(m.max()) for m in maps if m is not None and m.size), default=0.0)
    cells = []
    for (_, member), crop, values in zip(members.iterrows(), crops, maps):
        png = None
        if crop is not None:
            box = peak_box(member["peak_x"], member["peak_y"], crop.width, crop.height)
            picture = overlay_image(crop, values, CONCEPT_OPACITY, CONCEPT_CMAP, top=max(top, 1e-12), weighted=True)
            picture = draw_boxes(picture, [box]) if whole else picture.crop(box)
            png = png_bytes(picture.resize((STRIP_PX, STRIP_PX), Image.Resampling.BILINEAR), optimize=False)
        cells.append(StripCell(str(member["image"]), png, f"{shown_name(member['image'])} · "
                                                       f"{_number(member['presence']):.0%} of its activations"))
    return cells


# ---- shortcut candidates: the first of "What stands out" ---------------------------------------------


@dataclass
class ConceptHighlight:
    """A flagged concept (a shortcut candidate) as "What stands out" shows it: a title, why it is flagged, its
    numbers, the concept's row and its images (those that use it, best first)."""

    title: str
    reasons: str
    caption: str
    row: "pd.Series"
    images: tuple[str, ...]


def shortcut_highlights(concepts) -> list[ConceptHighlight]:
    """The flagged concepts of every group, most telling first: the larger of their bits share and effect, highest
    first (ties: the classes in target order, then the whole run; in a group, `ordered_concepts`' order); [] for a
    set without a flagged concept."""
    table = concepts.concepts
    out, weights = [], []
    for group, name in groups(table):
        rows = ordered_concepts(table, group)
        for _, row in rows[rows["flagged"].fillna(False).to_numpy(dtype=bool)].iterrows():
            title = f"{name[0].upper()}{name[1:]}, {concept_title(row).lower()}: a shortcut candidate"
            out.append(ConceptHighlight(title, flag_text(row), concept_caption(row), row,
                                        concept_images(concepts, group, int(row["concept"]))))
            weights.append(max(np.nan_to_num(_number(row["bits_share"])), np.nan_to_num(_number(row["effect"]))))
    return [out[i] for i in np.argsort(-np.asarray(weights, dtype=np.float64), kind="stable")]


# ---- a concept's images: the table and gallery's filter ------------------------------------------------


def concept_images(concepts, group: str, concept: int) -> tuple[str, ...]:
    """The images that use the concept (`uses`: at least the contract's share of their bits where it is active),
    best first (by presence: its rank in the group)."""
    rows = concept_rows(concepts, group, concept)
    return tuple(str(i) for i in rows[rows["uses"].fillna(False).to_numpy(dtype=bool)]["image"])


@dataclass(frozen=True)
class ConceptFocus:
    """The concept the table and gallery are narrowed to: its set, group and number (page state: plain values)."""

    set_name: str
    group: str
    concept: int


def focus_title(row) -> str:
    """The filter's name for the images of a concept: "concept 2 of class marked (7 images using it)"."""
    return (f"{concept_title(row).lower()} of {group_name(str(row['group']), row['class_name'])} "
            f"({count_of(int(row['images_using']), 'image')} using it)")


def outline_masks(concepts, focus: ConceptFocus, rows: "pd.DataFrame", sizes: dict) -> dict:
    """For the gallery: {row index: (H, W) bool} where the focused concept's map is at OUTLINE_SHARE of its maximum
    in that image or more, for each of `rows` (result rows) whose image the concept set covers; `sizes`
    {row index: (H, W)} the crop size each overlay is drawn at."""
    members = concept_rows(concepts, focus.group, focus.concept).set_index("image", drop=False)
    masks = {}
    for index, row in rows.iterrows():
        image = str(row["image"])
        if image not in members.index or index not in sizes:
            continue
        values = concepts.concept_map(members.loc[image], size=sizes[index])
        top = float(values.max()) if values.size else 0.0
        if top > 0:
            masks[index] = values >= OUTLINE_SHARE * top
    return masks


# ---- the report's section -----------------------------------------------------------------------------


def report_concepts(run: Run, trust: Trust, n: int = STRIP_IMAGES) -> dict | None:
    """The report's concept section (`render.report.dataset_report_html`'s `concepts`): per group its concepts,
    the shortcut candidates first, each with its numbers in words and (the flagged ones and the group's first
    REPORT_STRIPS) its strip of top crops; None for a run without a concept set."""
    concepts = run_concepts(run)
    if concepts is None:
        return None
    out = []
    for group, name in groups(concepts.concepts):
        items = []
        for place, (_, row) in enumerate(flagged_first(concepts.concepts, group).iterrows()):
            drawn = bool(row["flagged"]) or place < REPORT_STRIPS  # the report's size: a run may have many classes
            cells = concept_strip(run, concepts, row, trust, n) if drawn else []
            items.append({"title": concept_title(row), "caption": concept_caption(row), "flag": flag_text(row),
                          "flagged": bool(row["flagged"]),
                          "cells": [{"image": c.image, "caption": c.caption, "png": c.png} for c in cells]})
        out.append({"name": name[:1].upper() + name[1:], "group": group, "concepts": items})
    return {"set": set_text(concepts), "groups": out, "missing": concepts.missing or ""}
