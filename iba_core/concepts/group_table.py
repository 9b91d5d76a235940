"""A group's concept table from its image × concept rows: each concept's bits share, effect, reach, area and
place, ordered by bits share (by effect where the run has no bits), with the shortcut-candidate flag."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np

from . import measures

if TYPE_CHECKING:
    import pandas as pd

#: The top images kept per concept (by presence), whose peaks judge whether it sits at one position.
TOP_IMAGES = 8


def _kept(rows: "pd.DataFrame") -> float:
    """What a concept keeps alone: (p_only − p_none) / (p_full − p_none), class means; NaN where p(target) with
    nothing kept is as high as with everything (the layer's positive activations do not decide the class)."""
    full, none, only = (float(rows[c].mean()) for c in ("p_full", "p_none", "p_only"))
    return (only - none) / (full - none) if full - none > 1e-6 else float("nan")


def _figures(rows: "pd.DataFrame", images: int, total_bits: float) -> dict:
    """One concept's numbers from its image rows (one per image of the group)."""
    using = rows[rows["uses"]]
    top = rows[rows["presence"] > 0].sort_values("presence", ascending=False, kind="stable").head(TOP_IMAGES)
    spread = measures.peak_spread(top["peak_x"], top["peak_y"]) if len(top) >= measures.FIXED_IMAGES else float("nan")
    return {
        "images": images, "images_using": int(len(using)),
        "bits_share": float(rows["bits"].sum() / total_bits) if total_bits > 0 else float("nan"),
        "p_full": float(rows["p_full"].mean()), "p_without": float(rows["p_without"].mean()),
        "p_only": float(rows["p_only"].mean()), "effect": float((rows["p_full"] - rows["p_without"]).mean()),
        "p_none": float(rows["p_none"].mean()), "kept": _kept(rows),
        # the area where it is used; a concept no image uses: where it is strongest
        "area": float((using if len(using) else top)["area"].mean()) if len(rows) else float("nan"),
        "peak_spread": spread, "top_images": json.dumps(list(top["image"])),
    }


def group_table(rows: "pd.DataFrame", group: str, target: int | None, class_name: str, fit: dict) -> "pd.DataFrame":
    """The concept rows of a group: `rows` its image × concept rows, `fit` what chose its concepts (k,
    negative_share). Concept 0 carries the most bits (the largest effect where the run has no bits)."""
    import pandas as pd

    k = int(fit["k"])
    per_image = rows.drop_duplicates("image")
    images, total_bits = len(per_image), float(per_image["total_bits"].sum())
    table = pd.DataFrame([{"fit_index": i, **_figures(rows[rows["fit_index"] == i], images, total_bits)}
                          for i in range(k)])
    has_bits = bool(np.isfinite(table["bits_share"]).any())
    order = table.sort_values(["bits_share" if has_bits else "effect", "effect"], ascending=False, kind="stable")
    table = order.reset_index(drop=True)
    table["concept"] = np.arange(k)
    bits_rank = table["bits_share"].rank(ascending=False, method="first").fillna(0).astype(int) if has_bits else 0
    table["bits_rank"] = bits_rank
    table["effect_rank"] = table["effect"].rank(ascending=False, method="first").astype(int)
    table["kept_rank"] = table["kept"].rank(ascending=False, method="first").fillna(0).astype(int)
    reasons = [measures.shortcut_reasons(measures.ConceptFigures(
        r.bits_share, r.effect, r.area, r.peak_spread, r.images_using, r.images, int(r.bits_rank),
        int(r.effect_rank), r.kept, int(r.kept_rank))) for r in table.itertuples()]
    table["flagged"] = [bool(r) for r in reasons]
    table["flag_reasons"] = ["; ".join(r) for r in reasons]
    table["target"] = target
    table["class_name"] = class_name
    table["group"] = group
    table["k"] = k
    table["negative_share"] = float(fit.get("negative_share", 0.0))
    table["fit_error"] = float(fit.get("error", float("nan")))
    return table
