"""The Per-Sample page's "Plant a mark" (issue #42, item 3, teaching), with no Streamlit: a mark planted on the
current run's crop at the crop's coordinates (`selftest.marks`: the self-test's own placing and blending), the same
bottleneck run on the clean and the marked crop (one method, one set of statistics, one seed), and what the page draws
of the pair: the two maps on one bits scale, their difference, and the share of each map's bits on the mark.

    mark = make_mark("patch")                                 # bottom-right, an eighth of the crop side
    pair = planted_pair(network, method, record.cropped, record.result.target, mark)   # in the network's turn
    pair_sentence(pair)                                       # bits, p(target) and the mark's share, without → with
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import UserError
from ..selftest.marks import Mark, Placed, place_mark, plant
from ..selftest.scores import mass_share, region_weights

if TYPE_CHECKING:
    from PIL import Image

    from ..methods.bottlenecks import BottleneckMethod
    from ..results import AttributionResult


@dataclass(frozen=True)
class PlantedPair:
    """One run's crop without and with a mark: the bottleneck's result on each, the marked crop, the mark as placed
    on the crop (its box and pixels), and the run it belongs to (`RunRecord.run_id`)."""

    clean: "AttributionResult"
    marked: "AttributionResult"
    marked_crop: "Image.Image"
    placed: Placed
    run_id: str

    @property
    def top(self) -> float:
        """The one bits scale of both maps: the larger of their largest values."""
        return max(float(np.max(self.clean.heatmap)), float(np.max(self.marked.heatmap)), 1e-12)

    def shares(self) -> tuple[float, float]:
        """The share of each map's bits on the mark's pixels (without, with)."""
        weights = region_weights(self.placed.region, self.clean.heatmap.shape)
        return mass_share(self.clean.heatmap, weights), mass_share(self.marked.heatmap, weights)

    def difference(self) -> np.ndarray:
        """With − without, bits per pixel."""
        return self.marked.heatmap.astype(np.float32) - self.clean.heatmap.astype(np.float32)


def planted_crop(cropped: "Image.Image", mark: Mark) -> tuple["Image.Image", Placed]:
    """The crop with `mark` blended in at the crop's coordinates (the self-test's `place_mark` and `plant`), and the
    mark as placed. A crop that is not square (no network crop) is a UserError."""
    width, height = cropped.size
    if width != height:
        raise UserError(f"A mark is planted on the network's square crop; this picture is {width} × {height}.")
    placed = place_mark(mark, width)
    return plant(cropped.convert("RGB"), (0, 0), placed), placed


def check_plantable(network) -> None:
    """The marks are drawn on RGB crops and explain a class: a UserError for a CLIP model or a network of more than
    three bands (the self-test's own limits)."""
    from ..networks.clip_models import is_clip

    if is_clip(network):
        raise UserError("Plant a mark explains a class; a CLIP model's text prompts are not supported yet.")
    if network.preprocess.channels > 3:
        raise UserError(f"Plant a mark draws on photos; this network reads {network.preprocess.channels} bands.")


def planted_pair(network, method: "BottleneckMethod", cropped: "Image.Image", target: int, mark: Mark,
                 run_id: str = "") -> PlantedPair:
    """The bottleneck `method` (its statistics ready) on the crop and on the crop with `mark`, explaining `target`
    both times; call it in the network's turn."""
    check_plantable(network)
    marked, placed = planted_crop(cropped, mark)
    results = []
    for picture in (cropped, marked):
        x = network.preprocess.normalise(picture)
        results.append(method.bottleneck(network).attribute(x, target=int(target)))
    return PlantedPair(results[0], results[1], marked, placed, run_id)


def pair_sentence(pair: PlantedPair, class_name: str) -> str:
    """The pair in one line: total bits, p(target) and the share of the bits on the mark, without → with."""
    before, after = pair.shares()
    c, m = pair.clean, pair.marked
    return (f"Without → with the mark: {c.total_bits:,.1f} → {m.total_bits:,.1f} bits; p({class_name}) "
            f"{c.p_without:.3f} → {m.p_without:.3f}; share of the bits on the mark {before:.1%} → {after:.1%} (it "
            f"covers {pair.placed.share:.1%} of the crop: the share a map spread evenly would put there).")
