"""iba_core.app.inputs: images and object boxes as users give them."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.app import inputs
from iba_core.images import ImageError

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
    with pytest.raises(ImageError):
        inputs.upload_input("bad.png", b"not an image")


def test_sample_input_names_the_photo() -> None:
    chosen = inputs.sample_input("chelsea")
    assert chosen.name == "chelsea" and chosen.digest == "sample:chelsea" and chosen.image.mode == "RGB"


def test_parse_box() -> None:
    assert inputs.parse_box("10, 20, 100, 200") == (10, 20, 100, 200)
    assert inputs.parse_box("100 200 10 20") == (10, 20, 100, 200)
    assert inputs.parse_box("-5, 0, 300, 224") == (0, 0, 224, 224)
    for bad in ("1, 2, 3", "a, b, c, d", "5, 5, 5, 9"):
        with pytest.raises(ValueError):
            inputs.parse_box(bad)
    with pytest.raises(ValueError, match="four numbers"):
        inputs.parse_box("1, 2, 3")


def test_crop_box_mask() -> None:
    mask = inputs.crop_box_mask((10, 20, 110, 70))
    assert mask.shape == (224, 224) and mask.sum() == 100 * 50
    assert mask[20, 10] and not mask[19, 10] and not mask[20, 110]


def test_voc_boxes_map_to_the_crop() -> None:
    mask, boxes = inputs.voc_boxes(VOC.encode())
    # 448 → 256 (×4/7), crop offset 16: 64 → 20.57, 192 → 93.71
    assert boxes[0] == pytest.approx((64 * 4 / 7 - 16, 64 * 4 / 7 - 16, 192 * 4 / 7 - 16, 192 * 4 / 7 - 16))
    assert mask.shape == (224, 224) and mask.any()
    with pytest.raises(ValueError, match="not XML"):
        inputs.voc_boxes(b"not xml")
    with pytest.raises(ValueError, match="no <object>"):
        inputs.voc_boxes("<annotation><size><width>9</width><height>9</height></size></annotation>")


def test_box_input_prefers_the_annotation() -> None:
    mask, boxes = inputs.box_input("10, 20, 110, 70")
    assert boxes == [(10, 20, 110, 70)] and mask.sum() == 100 * 50
    from_xml, xml_boxes = inputs.box_input("not even a box", VOC)
    assert len(xml_boxes) == 1 and np.array_equal(from_xml, inputs.voc_boxes(VOC)[0])
    with pytest.raises(ValueError):
        inputs.box_input("1, 2")
