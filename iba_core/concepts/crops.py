"""Crops around a concept's peak: the square of the network's view of an image that a concept strip shows and that
words for concepts are matched with (`peak_box`, `concept_crops`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pandas as pd
    from PIL import Image

#: A crop's side as a share of the shorter side of the network's crop: big enough to show what is around a peak,
#: small enough that one concept fills much of it.
CROP_SHARE = 1 / 3


def peak_box(peak_x: float, peak_y: float, width: int, height: int,
             share: float = CROP_SHARE) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) in pixels: a square of `share` of the shorter side centred on the peak (0–1 of the
    crop, clamped to it), moved inside the crop where it would cross an edge."""
    side = max(1, min(width, height, round(share * min(width, height))))
    x = min(max(float(peak_x), 0.0), 1.0) * width
    y = min(max(float(peak_y), 0.0), 1.0) * height
    left = min(max(round(x - side / 2), 0), width - side)
    top = min(max(round(y - side / 2), 0), height - side)
    return left, top, left + side, top + side


def concept_crops(run, network, rows: "pd.DataFrame", limit: int = 5) -> list["Image.Image"]:
    """The crops around the peaks of image × concept `rows` (the network's view of each image, as the run made it),
    at most `limit`; an image that cannot be read now is left out. For the command line (the local user's files):
    the app reads a run's images through its trust rules (`app.dataset_gallery.network_crop`)."""
    pre = network.preprocess
    crops = []
    for _, row in rows.head(limit).iterrows():
        try:
            view = pre.crop(pre.load(run.image_path(row))).convert("RGB")
        except Exception:  # noqa: BLE001 - a file moved or changed since the run: no crop, never a traceback
            continue
        crops.append(view.crop(peak_box(float(row["peak_x"]), float(row["peak_y"]), *view.size)))
    return crops


def words_table(run, network, found, clip_network, prompts: Sequence[str] = (), limit: int = 5) -> "pd.DataFrame":
    """Words for every concept of a concept set (`words.words_for_concepts`, the concepts of one group scored
    together): one row per (group, concept, word) with its score and rank (1: best) — every word tried, so a tool
    can look up any of them."""
    import pandas as pd

    from .words import DEFAULT_WORDS, words_for_concepts

    rows = []
    for group, concepts in found.concepts.groupby("group", sort=False):
        target = None if pd.isna(concepts["target"].iloc[0]) else int(concepts["target"].iloc[0])
        crops = {int(c): concept_crops(run, network, found.image_rows(target, int(c)), limit)
                 for c in concepts["concept"]}
        crops = {c: v for c, v in crops.items() if v}
        if not crops:
            continue
        every = len(DEFAULT_WORDS) + len(prompts)
        for concept, words in words_for_concepts(clip_network, crops, prompts, top=every).items():
            rows += [{"group": group, "concept": concept, "word": w, "score": float(s), "rank": i + 1}
                     for i, (w, s) in enumerate(words)]
    return pd.DataFrame(rows, columns=["group", "concept", "word", "score", "rank"])
