"""iba_core.render.sanity: the sanity check's strip as a PNG."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from iba_core.app.evaluation import SanityStrip
from iba_core.metrics.sanity import normalise_heatmap
from iba_core.render.sanity import sanity_strip_png


def test_sanity_strip_png_has_one_panel_per_map() -> None:
    rng = np.random.default_rng(0)
    maps = [rng.random((32, 32)) for _ in range(4)]
    strip = SanityStrip("Saliency", maps[0], ["logits", "block7", "block6"], maps[1:], [0.9, 0.5, 0.1])
    png = Image.open(io.BytesIO(sanity_strip_png(strip, normalise_heatmap)))
    short = SanityStrip("Saliency", maps[0], ["logits"], maps[1:2], [0.9])
    short_png = Image.open(io.BytesIO(sanity_strip_png(short, normalise_heatmap)))
    assert png.format == "PNG" and png.size[0] > short_png.size[0] * 1.5 and png.size[1] == short_png.size[1]


def test_sanity_strip_png_draws_every_map_through_the_callers_normalisation() -> None:
    rng = np.random.default_rng(1)
    maps = [rng.random((16, 16)) for _ in range(3)]
    seen: list[np.ndarray] = []

    def normalise(h: np.ndarray) -> np.ndarray:
        seen.append(h)
        return normalise_heatmap(h)

    sanity_strip_png(SanityStrip("Saliency", maps[0], ["logits", "block7"], maps[1:], [0.9, 0.5]), normalise)
    assert len(seen) == 3 and all(a is b for a, b in zip(seen, maps))
