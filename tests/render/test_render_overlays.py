"""iba_core.render.overlays: the heatmap over the photo, the "not needed" view, boxes, PNG bytes."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.render import colours, overlays
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


@pytest.mark.parametrize("size", [(451, 300), (300, 451), (1000, 200), (20, 10), (224, 224), (641, 480)])
def test_centre_crop_box_is_where_the_network_looks(size) -> None:
    """Cropping the original at the box and resizing to 224 gives what preprocessing gives."""
    from iba_core.networks.spec import Preprocess

    rng = np.random.default_rng(1)
    # Smooth content, so resampling differences stay small and the comparison tests position.
    small = rng.integers(0, 256, (max(size[1] // 8, 2), max(size[0] // 8, 2), 3), dtype=np.uint8)
    original = Image.fromarray(small).resize(size, Image.Resampling.BICUBIC)
    pre = Preprocess((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    box = overlays.centre_crop_box(size, pre.resize, pre.crop_size)
    assert 0 <= box[0] < box[2] <= size[0] and 0 <= box[1] < box[3] <= size[1]
    ours = np.asarray(original.crop(box).resize((224, 224), Image.Resampling.BILINEAR), dtype=float)
    theirs = np.asarray(pre.crop(original), dtype=float)
    assert np.abs(ours - theirs).mean() < 12, np.abs(ours - theirs).mean()
    shifted = np.asarray(original.crop((box[0] + (box[2] - box[0]) // 4, box[1], box[2], box[3]))
                         .resize((224, 224)), dtype=float)
    if size[0] >= 224:  # a wrong box is clearly worse
        assert np.abs(shifted - theirs).mean() > np.abs(ours - theirs).mean()


def test_full_resolution_overlay_has_the_original_size() -> None:
    original = Image.new("RGB", (900, 500), (200, 30, 30))
    box = overlays.centre_crop_box(original.size, 256, 224)
    # 900 × 500 → 460 × 256, crop (118, 16)–(342, 240), back × 500/256: a 438-pixel square in the middle
    assert box == (231, 31, 669, 469)
    out = overlays.full_resolution_overlay(original, blob(), box, opacity=0.6)
    assert out.size == original.size and out.mode == "RGB"
    arr = np.asarray(out).astype(int)
    r, g, b = arr[250, 20]  # outside the crop: grey and dimmed
    assert abs(r - g) <= 2 and abs(g - b) <= 2 and r < 0.6 * 200
    assert (np.all(arr[box[1]:box[3], box[0] - 1] == overlays.OUTLINE_RGB, axis=-1)).all()  # crop outlined
    # Inside: the 224 heatmap over the crop, the hottest place where blob() puts it (row 80, col 150 of 224).
    inside = arr[box[1] + 1:box[3] - 1, box[0] + 1:box[2] - 1].sum(axis=-1)
    y, x = np.unravel_index(inside.argmax(), inside.shape)
    scale = (box[2] - box[0]) / 224
    assert abs(y / scale - 80) < 6 and abs(x / scale - 150) < 6
    # With opacity 0 the crop keeps the photo's colours.
    plain = np.asarray(overlays.full_resolution_overlay(original, blob(), box, opacity=0.0)).astype(int)
    assert tuple(plain[250, 450]) == (200, 30, 30)
    with pytest.raises(ValueError):
        overlays.full_resolution_overlay(original, blob(), (0, 0, 1000, 10))
    with pytest.raises(ValueError):
        overlays.full_resolution_overlay(original, blob(), box, opacity=2.0)


def test_full_resolution_overlay_matches_the_crop_overlay() -> None:
    img = photo(224)
    full = np.asarray(overlays.full_resolution_overlay(img, blob(), (0, 0, 224, 224), opacity=0.6)).astype(int)
    crop = np.asarray(overlays.overlay_image(img, blob(), opacity=0.6)).astype(int)
    assert np.abs(full[2:-2, 2:-2] - crop[2:-2, 2:-2]).max() <= 3  # same colours (the outline aside)


def test_bits_below_sums_the_greyed_regions() -> None:
    heat = blob()
    below = overlays.bits_below(heat, 0.05)
    assert below == pytest.approx(float(heat[heat < 0.05].sum()), rel=1e-5)
    assert 0 < below < heat.sum()
    assert overlays.bits_below(heat, 0.0) == 0.0
    assert overlays.bits_below(heat, 10.0) == pytest.approx(float(heat.sum()), rel=1e-5)


def test_png_bytes_without_optimisation_round_trip() -> None:
    img = photo(32)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(overlays.png_bytes(img, optimize=False)))),
                          np.asarray(img))


def test_overlay_on_a_runs_scale_keeps_few_bits_dark() -> None:
    """A map with few bits on the run's scale looks dark: no stretching to its own maximum (which drew a map of
    35 bits in all as a bright eye)."""
    img = Image.new("RGB", (224, 224), (128, 128, 128))
    faint = blob() * 0.01  # at most 0.02 bits / pixel
    own = np.asarray(overlays.overlay_image(img, faint, opacity=1.0)).astype(int)
    run = np.asarray(overlays.overlay_image(img, faint, opacity=1.0, top=2.0)).astype(int)
    assert own[80, 150].sum() > 600 and run[80, 150].sum() < 60
    zero = np.asarray(overlays.overlay_image(img, np.zeros((224, 224)), opacity=1.0, top=2.0)).astype(int)
    assert zero.max() < 20  # inferno's first colour everywhere
    # Above a top the user set: the top colour (clipped), like the other views.
    clipped = np.asarray(overlays.overlay_image(img, blob(), opacity=1.0, top=0.5)).astype(int)
    assert tuple(clipped[80, 150]) == tuple(colours.colour_lut("inferno")[255])


def test_overlays_carry_a_legend_of_the_scale() -> None:
    img = photo(224)
    plain = overlays.overlay_image(img, blob(), top=3.0)
    with_legend = overlays.overlay_image(img, blob(), top=3.0, legend=True)
    assert with_legend.width == 224 and with_legend.height > 224 + 15
    assert np.array_equal(np.asarray(with_legend)[:224], np.asarray(plain))  # the picture keeps its pixels
    legend = np.asarray(with_legend)[224:].astype(int)
    assert (legend.sum(axis=-1) < 150).any() and (legend.sum(axis=-1) > 700).any()  # a gradient and text on white
    original = Image.new("RGB", (900, 500), (200, 30, 30))
    box = overlays.centre_crop_box(original.size, 256, 224)
    full = overlays.full_resolution_overlay(original, blob(), box, top=3.0, legend=True)
    assert full.width == 900 and full.height > 500 + 20
    bare = overlays.full_resolution_overlay(original, blob(), box, top=3.0)
    assert np.array_equal(np.asarray(full)[:500], np.asarray(bare))


def test_a_small_picture_is_enlarged_by_a_whole_factor_so_its_legend_fits() -> None:
    """A 96 px tile's legend could not hold "107 bits / pixel": the picture grows 3× (blocks kept) to 288 px."""
    import numpy as np
    from PIL import Image

    from iba_core.render.overlays import LEGEND_MIN_WIDTH, with_legend

    tile = Image.fromarray(np.arange(96 * 96 * 3, dtype=np.uint8).reshape(96, 96, 3))
    out = with_legend(tile, np.full((96, 96), 50.0), 107.0)
    assert out.width == 288 >= LEGEND_MIN_WIDTH and out.height > 288
    blocks = np.asarray(out)[:288]
    assert (blocks[::3, ::3] == np.asarray(tile)).all() and (blocks[2::3, 2::3] == np.asarray(tile)).all()
    assert with_legend(Image.new("RGB", (500, 400)), np.zeros((4, 4)), 1.0).width == 500  # large: as it is


def test_a_part_of_the_total_never_reads_larger_than_the_total() -> None:
    from iba_core.render.overlays import part_of_total_text

    # The page once said "120.4 bits of the 120": the part with a decimal, the total without.
    assert part_of_total_text(120.4, 120.45) == ("120.4", "120.5")
    assert part_of_total_text(120.4, 120.41) == ("120.4", "120.4")
    assert part_of_total_text(120.43, 120.41) == ("120.4", "120.4")  # a float sum over a subset overshooting
    assert part_of_total_text(1234.6, 7541.8) == ("1,235", "7,542")
    for part, total in [(0.04, 0.05), (99.96, 99.97), (999.9, 999.96), (5000.4, 5000.45)]:
        shown_part, shown_total = part_of_total_text(part, total)
        assert float(shown_part.replace(",", "")) <= float(shown_total.replace(",", ""))
        assert len(shown_part.split(".")[-1]) == len(shown_total.split(".")[-1])  # the same decimals


def test_the_few_bits_sentence_says_few_only_when_few_pass() -> None:
    from iba_core.render.overlays import FEW_SHARE, few_bits_text

    few = few_bits_text(0.07, 188.0, 7535.0, 0.05)
    assert "7% of the crop, below 0.05 bits / pixel" in few and "188.0 bits" not in few and "**188 bits** of the 7,535" in few
    assert few.endswith("few, but not zero.")
    most = few_bits_text(1.0, 7535.0, 7535.0, 1.0)  # the walkthrough's threshold 1.0: every bit below it
    assert "few, but not zero" not in most and "100% of them" in most and "below 1 bit / pixel" in most
    edge = few_bits_text(0.5, FEW_SHARE * 1000 * 1.01, 1000.0, 0.2)
    assert "few, but not zero" not in edge
    assert few_bits_text(0.0, 0.0, 7535.0, 0.05).startswith("No part of the crop is below 0.05 bits / pixel")


def test_token_strip_colours_each_word_by_its_bits() -> None:
    """M2IB's text side drawn: each word's chip in the colour of its bits on 0 – the largest word's (inferno), the
    legend below; a prompt's text is only drawn."""
    from iba_core.render.colours import colour_lut
    from iba_core.render.overlays import token_strip

    picture = np.asarray(token_strip([("<b>a</b>", 0.0), ("cat", 8.0)], font_size=18))
    lut = colour_lut("inferno")
    assert tuple(picture[8, 8]) == tuple(int(c) for c in lut[0][:3])  # the first chip's corner: 0 bits
    row = picture[8]
    top = tuple(int(c) for c in lut[-1][:3])
    assert any(tuple(px) == top for px in row)  # the largest word in the top colour
    assert picture.shape[1] >= 320 and picture.shape[0] > 60


def test_a_weighted_overlay_leaves_the_photo_where_the_map_is_zero() -> None:
    """Issue #41's concept maps: the opacity grows with the value, so the photo shows as it is where a concept is
    absent and the colour map's top covers it where the concept is at the scale's top."""
    img = photo(64)
    heat = np.zeros((64, 64), dtype=np.float32)
    heat[:8, :8] = 2.0
    out = np.asarray(overlays.overlay_image(img, heat, 1.0, "viridis", top=2.0, weighted=True)).astype(int)
    base = np.asarray(img.convert("RGB")).astype(int)
    assert np.array_equal(out[20:, 20:], base[20:, 20:])  # no concept: the photo unchanged
    top = (np.array(overlays.colorize(np.ones((1, 1)), "viridis", vmax=1.0))[0, 0]).astype(int)
    assert np.abs(out[2, 2] - top).max() <= 1  # at the top: the colour map's top colour, nothing of the photo
    plain_blend = np.asarray(overlays.overlay_image(img, heat, 1.0, "viridis", top=2.0)).astype(int)
    assert not np.array_equal(plain_blend[20:, 20:], base[20:, 20:])  # unweighted: the colour covers everything


def test_outline_region_draws_only_the_edge_of_the_mask() -> None:
    picture = Image.new("RGB", (40, 40), (0, 0, 0))
    mask = np.zeros((10, 10), dtype=bool)
    mask[2:6, 2:6] = True  # 8 … 24 px once resized to the picture
    out = np.asarray(overlays.outline_region(picture, mask, width=1))
    edge = (out == overlays.OUTLINE_RGB).all(axis=-1)
    assert edge[8, 8:24].all() and edge[8:24, 8].all() and not edge[12:20, 12:20].any() and not edge[30:, 30:].any()
