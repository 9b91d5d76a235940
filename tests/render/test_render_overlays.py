"""iba_core.render.overlays: the heatmap over the photo, the "not needed" view, boxes, PNG bytes."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.render import overlays
from render_helpers import blob, photo


def test_overlay_image_size_and_blend() -> None:
    img = photo()
    heat = blob()
    out = overlays.overlay_image(img, heat, opacity=0.6)
    assert out.size == img.size and out.mode == "RGB"
    assert np.array_equal(np.asarray(overlays.overlay_image(img, heat, opacity=0.0)), np.asarray(img))
    full = np.asarray(overlays.overlay_image(img, heat, opacity=1.0)).astype(int)
    # With full opacity, the hottest pixel is the colour map's top (inferno: pale yellow), a cold one near black.
    assert full[80, 150].sum() > 600 and full[0, 0].sum() < 60
    with pytest.raises(ValueError):
        overlays.overlay_image(img, heat, opacity=1.5)


def test_overlay_resizes_a_smaller_heatmap_to_the_image() -> None:
    img = photo(224).resize((300, 200))
    out = overlays.overlay_image(img, blob(28, (10, 18)), opacity=0.5)
    assert out.size == (300, 200)


def test_not_needed_outline_greys_and_outlines_low_bit_regions() -> None:
    img = Image.new("RGB", (224, 224), (200, 30, 30))
    heat = blob()
    out = np.asarray(overlays.not_needed_outline(img, heat, threshold_bits=0.05)).astype(int)
    assert out.shape == (224, 224, 3)
    assert tuple(out[80, 150]) == (200, 30, 30)  # needed region untouched
    r, g, b = out[5, 5]
    assert abs(r - g) < 3 and abs(g - b) < 3  # not needed: grey
    assert (np.all(out == overlays.OUTLINE_RGB, axis=-1)).sum() > 50  # an outline was drawn
    frac = overlays.not_needed_fraction(heat, 0.05)
    assert 0.5 < frac < 1.0
    assert overlays.not_needed_fraction(heat, 10.0) == 1.0 and overlays.not_needed_fraction(heat, 0.0) == 0.0


def test_png_bytes_round_trip() -> None:
    img = photo(32)
    data = overlays.png_bytes(img)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))), np.asarray(img))


def test_draw_boxes_outlines_the_box() -> None:
    out = np.asarray(overlays.draw_boxes(Image.new("RGB", (224, 224)), [(10, 10, 50, 50)]))
    assert tuple(out[10, 30]) == overlays.OUTLINE_RGB and tuple(out[30, 30]) == (0, 0, 0)
