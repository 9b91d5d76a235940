"""The Dataset page's "compare with another run" (issue #42, item 1), with no Streamlit: the second run opened
under the same trust rules as the first, the two runs paired image by image (`runs.paired.pair_runs`), and what the
page draws of it — the counts in one sentence, the table, the most changed images' two maps beside their signed
difference (one scale for every difference), the per-class means, and the downloads, with the runs' folders named
as a visitor may see them (`trust.visitor_path`: `Paired.summary` holds absolute paths).

    run_b = open_other_run("/data/runs/marked", trust)     # a NotTrustedError or UserError in one sentence
    paired = compare_runs(run_a, run_b, "iba_10", "iba_10")
    counts_sentence(paired)                                # "12 images matched · 0 only in A · …"
    cells = top_cells(paired, trust)                        # image, A, B and B − A as PNGs
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..render.paired import signed_map_png
from ..render.text import count_of, shown_name
from ..runs.highlights import BITS_UNIT
from ..runs.paired import Paired, pair_runs, report_html
from ..runs.tables import Run
from ..trust import Trust, visitor_path
from .dataset import method_names, methods_bits_first, open_run_folder
from .dataset_gallery import THUMB_PX, map_png, network_crop

if TYPE_CHECKING:
    import pandas as pd

#: The most changed images the page draws (the table lists them all).
TOP_SHOWN = 6
#: The table's columns as the page shows them (the downloads hold every column of `Paired.table`).
TABLE_COLUMNS = ["image", "class_name", "changed", "predicted_name_a", "predicted_name_b", "p_a", "p_b", "delta_p",
                 "score_a", "score_b", "delta_score", "map_change"]


def open_other_run(text: str, trust: Trust) -> Run:
    """The run to compare with, typed on the server: checked as the first run is (`dataset.open_run_folder`)."""
    return open_run_folder(text, trust)


def method_choices(run: Run) -> tuple[list[str], dict[str, str]]:
    """The run's method keys (bits first: the comparison's default is the first) and their display names."""
    return methods_bits_first(run), method_names(run)


def compare_runs(run_a: Run, run_b: Run, method_a: str | None, method_b: str | None) -> Paired:
    """`run_b` against `run_a` image by image (`pair_runs`); nothing matched, a missing method or maps of two
    sizes: a UserError in one sentence."""
    return pair_runs(run_a, run_b, method_a, method_b)


def score_word(paired: Paired) -> str:
    """What Δscore is in: bits (both maps in bits per pixel) or the maps' positive mass."""
    return "bits" if paired.score == "total_bits" else "positive mass"


def difference_label(paired: Paired) -> str:
    """The legend of a difference map: B − A in the maps' unit, or in shares of each map where the units differ."""
    unit = (paired.unit_a or "attribution") if paired.basis == "values" else "share of the map"
    return f"B − A, {unit}"


def _mean_text(values, word: str) -> str:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return f"mean Δ{word} {float(v.mean()):+.3g}" if v.size else ""


def counts_sentence(paired: Paired) -> str:
    """The comparison's counts in one line: matched, only in A, only in B, failed, changed predictions, and the
    mean changes of p(target) and of the score."""
    c = paired.counts
    parts = [f"{count_of(c['matched'], 'image')} matched", f"{c['only_a']} only in A", f"{c['only_b']} only in B"]
    if c["failed"]:
        parts.append(f"{c['failed']} without a map in one run")
    parts.append(f"{count_of(c['changed'], 'prediction')} changed")
    parts += [t for t in (_mean_text(paired.table["delta_p"], "p(target)"),
                          _mean_text(paired.table["delta_score"], score_word(paired))) if t]
    return " · ".join(parts)


def runs_sentence(paired: Paired, trust: Trust) -> str:
    """Which run is A and which B, with their methods, the folders as a visitor may see them."""
    return (f"A: {visitor_path(paired.run_a.path, trust)} ({paired.name_a}); "
            f"B: {visitor_path(paired.run_b.path, trust)} ({paired.name_b}).")


def shown_table(paired: Paired) -> "pd.DataFrame":
    """The table as the page lists it: every matched image, most changed first, its main columns."""
    return paired.table[TABLE_COLUMNS]


@dataclass(frozen=True)
class TopCell:
    """One of the most changed images: its caption, its crop (None where the trust rules or a missing file keep it
    from the page), A's and B's maps and their signed difference B − A (PNGs with their legends)."""

    image: str
    caption: str
    photo: bytes | None
    map_a: bytes
    map_b: bytes
    difference: bytes


def _caption(paired: Paired, row) -> str:
    parts = [shown_name(row["image"]), shown_name(row["class_name"])]
    if row["delta_score"] == row["delta_score"]:
        parts.append(f"Δ{score_word(paired)} {float(row['delta_score']):+.3g}")
    if row["delta_p"] == row["delta_p"]:
        parts.append(f"Δp {float(row['delta_p']):+.3f}")
    if row["changed"]:
        parts.append(f"prediction {shown_name(row['predicted_name_a'])} → {shown_name(row['predicted_name_b'])}")
    return " · ".join(parts)


def _photo(run: Run, row_index, trust: Trust) -> bytes | None:
    from PIL import Image

    from ..render.overlays import png_bytes

    crop = network_crop(run, run.table.loc[row_index], trust)
    return None if crop is None else png_bytes(crop.resize((2 * THUMB_PX, 2 * THUMB_PX),
                                                           Image.Resampling.BILINEAR), optimize=False)


def _side_label(unit: str) -> str:
    return "bits / pixel" if unit == BITS_UNIT else (unit or "attribution")


def top_cells(paired: Paired, trust: Trust, n: int = TOP_SHOWN) -> tuple[list[TopCell], str]:
    """The `n` most changed images: A's and B's maps (on one scale where both are in one unit: the largest value
    of the maps shown; else each side on its own), and B − A on the comparison's one scale (`Paired.scale`);
    with a sentence that states the scales."""
    rows = paired.table.head(n)
    maps = [(paired.run_a.heatmap(int(r["row_a"])), paired.run_b.heatmap(int(r["row_b"]))) for _, r in rows.iterrows()]
    top_a = max((float(np.abs(a).max()) for a, _ in maps if a.size), default=0.0)
    top_b = max((float(np.abs(b).max()) for _, b in maps if b.size), default=0.0)
    if paired.comparable:
        top_a = top_b = max(top_a, top_b)
    label_a, label_b = _side_label(paired.unit_a), _side_label(paired.unit_b)
    cells = []
    for (_, r), (a, b) in zip(rows.iterrows(), maps):
        # a signed method's map is drawn as |map|, as the gallery does: the colour map runs from 0
        shown_a = a if paired.unit_a == BITS_UNIT else np.abs(a)
        shown_b = b if paired.unit_b == BITS_UNIT else np.abs(b)
        cells.append(TopCell(str(r["image"]), _caption(paired, r), _photo(paired.run_a, int(r["row_a"]), trust),
                             map_png(shown_a, label_a, top=top_a), map_png(shown_b, label_b, top=top_b),
                             signed_map_png(paired.difference(r), paired.scale, difference_label(paired))))
    sides = (f"A's and B's maps on one scale, 0 – {top_a:.3g} {label_a}" if paired.comparable else
             f"A's maps on 0 – {top_a:.3g} {label_a}, B's on 0 – {top_b:.3g} {label_b} (different units)")
    return cells, (f"{sides}; every difference B − A on one scale, ±{paired.scale:.3g} (the largest change of any "
                   "matched image): blue where B is lower, white unchanged, red where B is higher.")


def class_cells(paired: Paired) -> list[dict]:
    """Per class of A: its name, images, changed predictions, mean Δp(target) and its mean difference map (PNG) on
    the class means' one scale (`Paired.class_scale`)."""
    cells = []
    for _, c in paired.classes.iterrows():
        delta_p = "" if c["mean_delta_p"] != c["mean_delta_p"] else f" · mean Δp {float(c['mean_delta_p']):+.3f}"
        cells.append({"name": str(c["class_name"]), "images": int(c["images"]), "changed": int(c["changed"]),
                      "caption": f"{shown_name(c['class_name'])} · {count_of(int(c['images']), 'image')} · "
                                 f"{count_of(int(c['changed']), 'changed prediction')}{delta_p}",
                      "png": signed_map_png(paired.class_maps[int(c["target"])], paired.class_scale,
                                            difference_label(paired))})
    return cells


class _ShownRun:
    """A run under another name: the run itself for its maps, its folder as a visitor may see it (for the report,
    whose summary names both runs)."""

    def __init__(self, run: Run, shown: str) -> None:
        self._run, self.path = run, shown

    def __getattr__(self, name: str):
        return getattr(self._run, name)


def report_bytes(paired: Paired, trust: Trust) -> bytes:
    """The comparison's HTML report (`runs.paired.report_html`), its runs' folders named as a visitor may see them
    (the whole path for the machine's own user)."""
    shown = dataclasses.replace(paired, run_a=_ShownRun(paired.run_a, visitor_path(paired.run_a.path, trust)),
                                run_b=_ShownRun(paired.run_b, visitor_path(paired.run_b.path, trust)))
    return report_html(shown)
