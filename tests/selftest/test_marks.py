"""The marks (issue #42, item 2): each kind's recorded box is exactly the bounding box of the pixels that change on
the network's crop (clean vs marked copy, both preprocessed as the network does), on two preprocess geometries with
non-square photos (one shrunk, one enlarged); the clean copy's crop is the photo's own crop; a bad mark is refused in
the user's words."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selftest_fixtures import noise_photo  # noqa: E402

from iba_core.errors import UserError  # noqa: E402
from iba_core.networks.spec import Preprocess  # noqa: E402
from iba_core.selftest import marks  # noqa: E402
from iba_core.selftest.marks import make_mark, place_mark, plant, resize_geometry  # noqa: E402

#: (photo width, height, resize, crop, channels): a photo shrunk to a square crop, one enlarged with a crop smaller
#: than the resize (the crop's offset then non-zero on the short side too), and a gray network's.
GEOMETRIES = [(97, 61, 64, 64, 3), (50, 120, 80, 56, 3), (130, 90, 72, 64, 1)]


def _png_mark(path: Path) -> Path:
    """A PNG mark: an opaque blue disc on a transparent 40 × 30 canvas (a transparent margin round it)."""
    yy, xx = np.mgrid[:30, :40]
    rgba = np.zeros((30, 40, 4), np.uint8)
    disc = (xx - 20) ** 2 + (yy - 15) ** 2 <= 10 ** 2
    rgba[disc] = (0, 0, 255, 255)
    Image.fromarray(rgba, "RGBA").save(path)
    return path


def _changed_box(pre: Preprocess, clean: Image.Image, marked: Image.Image) -> tuple[tuple[int, ...], np.ndarray]:
    """The bounding box (x0, y0, x1, y1) of the crop pixels that differ between the two copies, and their mask."""
    a, b = np.asarray(pre.crop(clean)).astype(int), np.asarray(pre.crop(marked)).astype(int)
    changed = (a != b).any(axis=2)
    rows, cols = np.nonzero(changed)
    return (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1), changed


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=["shrunk", "enlarged", "gray"])
@pytest.mark.parametrize("kind", ["text", "patch", "border", "png", "patch-faint", "text-x,y"])
def test_the_box_is_exactly_the_pixels_that_change_on_the_crop(tmp_path, geometry, kind):
    width, height, resize, crop, channels = geometry
    pre = Preprocess((0.5,) * channels, (0.5,) * channels, resize=resize, crop=crop)
    photo = Image.open(noise_photo(tmp_path / "photo.png", width, height))
    mark = {"text": lambda: make_mark("text"), "patch": lambda: make_mark("patch", where="top-left"),
            "border": lambda: make_mark("border"), "png": lambda: make_mark(_png_mark(tmp_path / "m.png"), "centre"),
            "patch-faint": lambda: make_mark("patch", where="top", size=0.3, opacity=0.2, colour="0,255,255"),
            "text-x,y": lambda: make_mark("text", where="0.3,0.6", size=0.7, colour="white")}[kind]()
    placed = place_mark(mark, crop)
    clean, offset = resize_geometry(photo, pre)
    marked = plant(clean, offset, placed)
    box, changed = _changed_box(pre, clean, marked)
    assert box == placed.box  # exact: 0 px of resampling spread (the copies are at the network's resize geometry)
    assert not (changed & ~placed.region).any()  # nothing changes outside the mark
    if kind == "border":
        assert placed.box == (0, 0, crop, crop)
        if channels == 3:  # red's 255 is never a value of the noise (40–160): every framed pixel changes
            assert (changed == placed.region).all()
        else:  # red in gray is 76, which some noise pixels already have: they stay, inside the frame all the same
            assert 0.95 * placed.region.sum() < changed.sum() < placed.region.sum()
    # the clean copy is what the network sees of the photo itself
    assert np.array_equal(np.asarray(pre.crop(clean)), np.asarray(pre.crop(photo)))


def test_places_are_flush_with_the_crop_edges():
    crop = 64
    assert place_mark(make_mark("patch", where="top-left", size=0.125), crop).box == (0, 0, 8, 8)
    assert place_mark(make_mark("patch", size=0.125), crop).box == (56, 56, 64, 64)  # bottom-right, the default
    assert place_mark(make_mark("patch", where="centre", size=0.25), crop).box == (24, 24, 40, 40)
    assert place_mark(make_mark("patch", where="0.5,0", size=0.25), crop).box == (24, 0, 40, 16)
    text = place_mark(make_mark("text", where="bottom-right", size=0.5), crop)
    assert text.box[2] == crop and text.box[3] == crop and text.box[2] - text.box[0] == 32  # its longer side
    assert 0 < text.share < 0.25 * 0.5  # letters, not a filled box


def test_opacity_blends_and_faint_alpha_is_no_mark():
    placed = place_mark(make_mark("patch", where="top-left", size=0.25, opacity=0.5), 16)
    assert placed.alpha.max() == pytest.approx(0.5)
    clean = Image.fromarray(np.full((16, 16, 3), 100, np.uint8))
    marked = np.asarray(plant(clean, (0, 0), placed))
    assert tuple(marked[0, 0]) == (178, 50, 50) and tuple(marked[8, 8]) == (100, 100, 100)  # ½·red + ½·grey
    assert marks.FAINT_ALPHA * 255 <= 2  # what is dropped moves a colour by at most two levels


@pytest.mark.parametrize("where", ["middle", "1.5,0.2", "0.3", "a,b"])
def test_a_bad_place_is_refused_in_words(where):
    with pytest.raises(UserError, match="neither a place nor x,y between 0 and 1"):
        make_mark("patch", where=where)


def test_bad_sizes_opacities_and_options_are_refused():
    with pytest.raises(UserError, match="size 1.5 is out of range"):
        make_mark("patch", size=1.5)
    with pytest.raises(UserError, match="size 0.6 is out of range"):
        make_mark("border", size=0.6)
    with pytest.raises(UserError, match="opacity 0 is out of range"):
        make_mark("text", opacity=0)
    with pytest.raises(UserError, match="a place does not apply"):
        make_mark("border", where="top-left")
    with pytest.raises(UserError, match="colour 'reddish'"):
        make_mark("patch", colour="reddish")
    with pytest.raises(UserError, match="needs some text"):
        make_mark("text", text="  ")


def test_a_bad_png_mark_is_refused_in_the_users_words(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="was not found"):
        make_mark(tmp_path / "missing.png")
    jpeg = tmp_path / "logo.png"
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(jpeg, format="JPEG")
    with pytest.raises(UserError, match="logo.png is not a PNG \\(it is JPEG\\)"):
        make_mark(jpeg)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"not an image at all")
    with pytest.raises(UserError, match="is not a PNG that can be read"):
        make_mark(garbage)
    clear = tmp_path / "clear.png"
    Image.fromarray(np.zeros((8, 8, 4), np.uint8), "RGBA").save(clear)
    with pytest.raises(UserError, match="clear.png has no pixels: it is transparent everywhere"):
        make_mark(clear)
    big = _png_mark(tmp_path / "big.png")
    monkeypatch.setattr(marks, "MAX_PNG_SIDE", 32)
    with pytest.raises(UserError, match=r"big.png is too large \(40 × 30 pixels"):
        make_mark(big)
    monkeypatch.setattr(marks, "MAX_PNG_BYTES", 10)
    with pytest.raises(UserError, match="big.png is too large .* MiB"):
        make_mark(big)


def test_an_opaque_png_without_alpha_is_a_solid_mark(tmp_path):
    path = tmp_path / "solid.png"
    Image.fromarray(np.full((10, 20, 3), 200, np.uint8)).save(path)
    placed = place_mark(make_mark(path, where="top-left", size=0.5), 40)
    assert placed.box == (0, 0, 20, 10) and placed.region.sum() == 200


def test_the_measures_score_the_marks_box_and_a_borders_frame():
    """Issue #42 defines the localisation ratio on the mark's box: a text's box, not its letters' pixels; a border's
    box is the whole crop, so its frame's pixels."""
    text = place_mark(make_mark("text", where="bottom-right", size=0.5), 64)
    x0, y0, x1, y1 = text.box
    assert text.scored.sum() == (x1 - x0) * (y1 - y0) and text.scored[y0:y1, x0:x1].all()
    assert text.scored_share == pytest.approx((x1 - x0) * (y1 - y0) / 64 ** 2)
    assert text.scored_share > text.share  # the box, not the ink
    border = place_mark(make_mark("border", size=0.05), 64)
    assert border.box == (0, 0, 64, 64) and (border.scored == border.region).all() and border.scored_share < 0.25
    patch = place_mark(make_mark("patch", where="top-left", size=0.125, opacity=0.5), 64)
    assert (patch.scored == patch.region).all() and patch.scored_share == pytest.approx(1 / 64)


def test_text_too_small_to_read_is_refused_saying_how_long_a_text_fits():
    long_text = "a watermark far too long for its size"
    with pytest.raises(UserError, match=r"would be [0-3] px high on the 64-px crop, too small to read \(at least 4 "
                                        r"px\): at the size 0.2 a text of at most (\d+) characters fits") as err:
        place_mark(make_mark("text", size=0.2, text=long_text), 64)
    fits = int(re.search(r"at most (\d+) characters", str(err.value)).group(1))
    assert 0 < fits < len(long_text)
    shorter = place_mark(make_mark("text", size=0.2, text=long_text[:fits]), 64)  # that many fit, as said
    assert shorter.box[3] - shorter.box[1] >= 4
    with pytest.raises(UserError, match="not even one character fits"):
        place_mark(make_mark("text", size=0.01, text="ab"), 64)


def test_characters_the_font_lacks_are_named_in_one_sentence():
    with pytest.raises(UserError, match=r"The text mark's font has no '日', '本', which would be drawn as a box"):
        make_mark("text", text="© 日本 sample")
    with pytest.raises(UserError, match=r"font has no '–',"):  # the subset of Aileron has no en dash
        make_mark("text", text="© 2024 – ok")
    assert make_mark("text", text="© Sample 2024 - ok!").text  # Latin letters, digits, ©, - and ! are drawn
