"""iba_core.app.inputs: images and object boxes as users give them."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.app import inputs
from iba_core.errors import UserError
from iba_core.images import ImageError
from iba_core.networks.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess

#: ImageNet's preprocessing: short side to 256, centre crop 224.
IMAGENET = Preprocess(IMAGENET_MEAN, IMAGENET_STD, resize=256, crop=224)
#: A network of its own: short side to 220, centre crop 192.
SMALL = Preprocess(IMAGENET_MEAN, IMAGENET_STD, resize=220, crop=192)

VOC = """<annotation><size><width>448</width><height>448</height></size>
<object><name>cat</name><bndbox><xmin>64</xmin><ymin>64</ymin><xmax>192</xmax><ymax>192</ymax></bndbox></object>
</annotation>"""


def test_upload_input_refuses_too_large_and_corrupt_files() -> None:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (1, 2, 3)).save(buf, format="PNG")
    ok = inputs.upload_input("x.png", buf.getvalue())
    assert ok.image.size == (40, 30) and ok.name == "x.png"
    assert ok.digest == inputs.upload_input("y.png", buf.getvalue()).digest  # content, not name
    with pytest.raises(ImageError, match="limited to 1 MB"):
        inputs.upload_input("big.png", bytes(2 * 1024 * 1024), max_mb=1)
    with pytest.raises(ImageError, match="^The file bad.png is not a readable image"):
        inputs.upload_input("bad.png", b"not an image")
    with pytest.raises(ImageError, match="^The file empty.png is empty"):
        inputs.upload_input("empty.png", b"")


def test_sample_input_names_the_photo() -> None:
    chosen = inputs.sample_input("chelsea")
    assert chosen.name == "chelsea" and chosen.digest == "sample:chelsea" and chosen.image.mode == "RGB"


def test_parse_box() -> None:
    assert inputs.parse_box("10, 20, 100, 200", 224) == (10, 20, 100, 200)
    assert inputs.parse_box("0, 0, 192, 192", 192) == (0, 0, 192, 192)  # the whole of this network's crop
    for bad in ("1, 2, 3", "a, b, c, d", "5, 5, 5, 9", "1, 2, inf, 4", "nan, 2, 3, 4"):
        with pytest.raises(UserError):
            inputs.parse_box(bad, 224)
    with pytest.raises(UserError, match=r"four numbers .*\(you gave 3 entries\)"):
        inputs.parse_box("1, 2, 3", 224)
    with pytest.raises(UserError, match=r"you gave 1 entry\)"):
        inputs.parse_box("abc", 224)
    # typos are said, never turned into another box: swapped corners, corners outside the crop
    with pytest.raises(UserError, match="x1 > x0"):
        inputs.parse_box("100 200 10 20", 224)
    for outside in ("-5, 0, 300, 224", "0, 0, 200, 200 ", "1e9, 0, 2, 2"):
        with pytest.raises(UserError, match="inside the 192 × 192 crop"):
            inputs.parse_box(outside, 192)


def test_a_long_bad_box_is_not_echoed() -> None:
    pasted = "1, 2, " + "x" * 5000
    with pytest.raises(UserError) as err:
        inputs.parse_box(pasted, 224)
    assert "xxxx" not in str(err.value) and len(str(err.value)) < 120


def test_crop_box_mask() -> None:
    mask = inputs.crop_box_mask((10, 20, 110, 70), 224)
    assert mask.shape == (224, 224) and mask.sum() == 100 * 50
    assert mask[20, 10] and not mask[19, 10] and not mask[20, 110]
    assert inputs.crop_box_mask((10, 20, 110, 70), 192).shape == (192, 192)


def test_voc_boxes_map_to_the_crop() -> None:
    mask, boxes = inputs.voc_boxes(VOC.encode(), IMAGENET)
    # 448 → 256 (×4/7), crop offset 16: 64 → 20.57, 192 → 93.71
    assert boxes[0] == pytest.approx((64 * 4 / 7 - 16, 64 * 4 / 7 - 16, 192 * 4 / 7 - 16, 192 * 4 / 7 - 16))
    assert mask.shape == (224, 224) and mask.any()
    with pytest.raises(UserError, match="not XML"):
        inputs.voc_boxes(b"not xml", IMAGENET)
    with pytest.raises(UserError, match="no <object>"):
        inputs.voc_boxes("<annotation><size><width>9</width><height>9</height></size></annotation>", IMAGENET)


def test_voc_boxes_follow_the_networks_own_preprocessing() -> None:
    mask, boxes = inputs.voc_boxes(VOC, SMALL)
    # 448 → 220 (×55/112), crop offset round(14.0) = 14: 64 → 17.43, 192 → 80.29
    s = 220 / 448
    assert boxes[0] == pytest.approx((64 * s - 14, 64 * s - 14, 192 * s - 14, 192 * s - 14), rel=1e-6)
    assert mask.shape == (192, 192)
    # pixel centres i + 0.5 inside [17.43, 80.29]: rows and columns 17 … 79
    assert mask.sum() == 63 * 63 and mask[17, 17] and mask[79, 79] and not mask[16, 17] and not mask[80, 79]


def test_box_input_prefers_the_annotation() -> None:
    mask, boxes = inputs.box_input("10, 20, 110, 70", None, IMAGENET)
    assert boxes == [(10, 20, 110, 70)] and mask.sum() == 100 * 50
    from_xml, xml_boxes = inputs.box_input("not even a box", VOC, IMAGENET)
    assert len(xml_boxes) == 1 and np.array_equal(from_xml, inputs.voc_boxes(VOC, IMAGENET)[0])
    with pytest.raises(UserError):
        inputs.box_input("1, 2", None, IMAGENET)
    typed, _ = inputs.box_input("10, 20, 110, 192", None, SMALL)  # typed in this network's 192 crop
    assert typed.shape == (192, 192) and typed.sum() == 100 * (192 - 20)
    with pytest.raises(UserError, match="inside the 192 × 192 crop"):
        inputs.box_input("10, 20, 110, 300", None, SMALL)


def _gif(frames: int) -> bytes:
    pictures = [Image.new("RGB", (60, 40), (40 * i, 100, 200)) for i in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, format="GIF", save_all=True, append_images=pictures[1:], duration=80, loop=0)
    return buf.getvalue()


def test_gif_upload_says_the_first_frame_is_used() -> None:
    animated = inputs.upload_input("anim.gif", _gif(4))
    assert animated.image.size == (60, 40) and animated.image.getpixel((1, 1)) == (0, 100, 200)
    assert animated.format_note == "GIF: the network sees the first frame of its 4 frames, as an RGB photo."
    assert "first frame" in inputs.upload_input("still.gif", _gif(1)).format_note
    buf = io.BytesIO()
    Image.new("RGB", (40, 30)).save(buf, format="PNG")
    assert inputs.upload_input("x.png", buf.getvalue()).format_note is None
    assert inputs.sample_input("chelsea").format_note is None


def test_size_warnings_for_tiny_and_extreme_images() -> None:
    assert inputs.size_warnings((451, 300), 256) == []
    assert inputs.size_warnings((1000, 250), 256) == []  # 4 : 1 is still fine
    tiny = inputs.size_warnings((20, 24), 256)
    assert len(tiny) == 1 and "20 × 24" in tiny[0] and "upscaled 13×" in tiny[0]
    wide = inputs.size_warnings((2000, 300), 256)
    assert len(wide) == 1 and "6.7 : 1" in wide[0] and "cropped away" in wide[0]
    # (224/256)² / 6.67 of the picture survives the crop
    assert f"{(224 / 256) ** 2 / (2000 / 300):.0%}" in wide[0]
    both = inputs.size_warnings((10, 200), 256)
    assert len(both) == 2
