import numpy as np
import pytest
from PIL import Image

from iba_core.errors import UserError
from iba_core.metrics.bbox import (
    Annotation,
    Box,
    bbox_ratio,
    box_mask,
    boxes_on_crop,
    crop_geometry,
    find_annotation,
    format_table,
    parse_voc,
)
from iba_core.networks.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess

VOC = """<annotation>
  <folder>val</folder><filename>ILSVRC2012_val_00000001</filename>
  <size><width>{w}</width><height>{h}</height><depth>3</depth></size>
  {objects}
</annotation>"""
OBJ = "<object><name>n01751748</name><bndbox><xmin>{}</xmin><ymin>{}</ymin><xmax>{}</xmax><ymax>{}</ymax></bndbox></object>"


def voc(w, h, *boxes) -> str:
    return VOC.format(w=w, h=h, objects="".join(OBJ.format(*b) for b in boxes))


def test_map_equal_to_the_box_scores_one_and_its_inverse_zero():
    mask = np.zeros((224, 224), dtype=bool)
    mask[40:100, 60:150] = True
    assert bbox_ratio(mask.astype(float), mask) == 1.0
    assert bbox_ratio(-mask.astype(float), mask) == 0.0
    # A flat map is no better than chance: ties are broken at random, not in raster order.
    assert bbox_ratio(np.zeros((224, 224)), mask) == pytest.approx(mask.mean(), abs=0.03)
    # Half of the top-n pixels inside → 0.5.
    half = np.zeros((224, 224))
    half[40:70, 60:150] = 1.0  # 30·90 inside
    half[150:180, 0:90] = 1.0  # 30·90 outside
    assert bbox_ratio(half, mask) == pytest.approx(0.5)


def test_parse_voc_and_map_through_resize_and_centre_crop():
    ann = parse_voc(voc(512, 256, (144, 16, 256, 128)))
    assert (ann.width, ann.height, len(ann.boxes)) == (512, 256, 1)
    assert ann.boxes[0] == Box("n01751748", 144, 16, 256, 128)
    assert crop_geometry(512, 256) == (1.0, 1.0, 144, 16)
    mask = box_mask(ann)
    assert mask.sum() == 112 * 112 and mask[0, 0] and mask[111, 111] and not mask[112, 112]
    # Several boxes: their union.
    two = box_mask(parse_voc(voc(512, 256, (144, 16, 256, 128), (300, 200, 368, 240))))
    assert two.sum() > mask.sum() and two[200, 200]


@pytest.mark.parametrize("size", [(300, 200), (200, 333), (640, 427)])
def test_box_mask_matches_the_real_preprocessing(size):
    w, h = size
    box = (int(w * 0.3), int(h * 0.25), int(w * 0.6), int(h * 0.7))
    img = np.zeros((h, w, 3), dtype=np.uint8)
    img[box[1]:box[3], box[0]:box[2]] = 255
    crop = np.asarray(Preprocess(IMAGENET_MEAN, IMAGENET_STD).crop(Image.fromarray(img)))[..., 0] > 127
    mask = box_mask(Annotation(w, h, [Box("x", *box)]))
    iou = (mask & crop).sum() / (mask | crop).sum()
    assert iou > 0.97, iou


@pytest.mark.parametrize("size", [(500, 375), (300, 451)])
def test_boxes_on_crop_follow_the_networks_own_preprocessing(size):
    """Resize 220, crop 192 (a model card of its own): the mask is where that preprocessing puts the box."""
    w, h = size
    box = (int(w * 0.3), int(h * 0.25), int(w * 0.6), int(h * 0.7))
    img = np.zeros((h, w, 3), dtype=np.uint8)
    img[box[1]:box[3], box[0]:box[2]] = 255
    preprocess = Preprocess(IMAGENET_MEAN, IMAGENET_STD, resize=220, crop=192)
    crop = np.asarray(preprocess.crop(Image.fromarray(img)))[..., 0] > 127
    mask, boxes = boxes_on_crop(Annotation(w, h, [Box("x", *box)]), preprocess)
    assert mask.shape == crop.shape == (192, 192) and len(boxes) == 1
    assert (mask & crop).sum() / (mask | crop).sum() > 0.97


def test_the_skipped_note_counts_each_reason():
    """Issue #40, item 7: every skipped image counted by its reason (a box file that cannot be read by its name)."""
    recs = [{"metric": "bbox", "image": "a", "method": "m", "setting": "s", "model": "net", "ratio": 1.0},
            {"metric": "bbox", "image": "c", "method": "*", "setting": "s", "model": "net",
             "skipped": "boxes over 33% of the crop"},
            *({"metric": "bbox", "image": i, "method": "*", "setting": "s", "model": "net",
               "skipped": "no annotation"} for i in ("d", "e")),
            {"metric": "bbox", "image": "f", "method": "*", "setting": "s", "model": "net",
             "skipped": "f.xml unreadable: Not a readable VOC XML annotation: no element found: line 1, column 0"}]
    assert ("4 image(s) skipped: no annotation (2); boxes over 33% of the crop (1); f.xml unreadable: Not a "
            "readable VOC XML annotation: no element found: line 1, column 0 (1).") in format_table(recs)


def test_find_annotation_and_table(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.xml").write_text(voc(10, 10, (0, 0, 5, 5)))
    assert find_annotation(tmp_path, "cls/a.JPEG") == tmp_path / "sub" / "a.xml"
    assert find_annotation(tmp_path, "b.jpg") is None
    recs = [
        {"metric": "bbox", "image": "a", "method": "m", "method_name": "M", "setting": "s", "model": "net", "ratio": 1.0},
        {"metric": "bbox", "image": "b", "method": "m", "setting": "s", "model": "net", "ratio": 0.5},
        {"metric": "bbox", "image": "c", "method": "*", "setting": "s", "model": "net", "skipped": "box covers 50%"},
    ]
    table = format_table(recs)
    assert "| M " in table and "0.750" in table and "1 image(s) skipped" in table


@pytest.mark.parametrize("size, box, words", [
    ("<width>0</width><height>10</height>", "1 1 5 5", "from 1 to 20,000 pixels a side"),
    ("<width>1e308</width><height>10</height>", "1 1 5 5", "from 1 to 20,000 pixels a side"),
    ("<width>inf</width><height>10</height>", "1 1 5 5", "finite"),
    ("<width>10</width><height>10</height>", "1 nan 5 5", "finite"),
    ("<width>10</width><height>10</height>", "1 x 5 5", "not a number"),
])
def test_a_bad_voc_annotation_gets_a_sentence(size, box, words) -> None:
    from iba_core.metrics.bbox import parse_voc

    x0, y0, x1, y1 = box.split()
    xml = (f"<annotation><size>{size}</size><object><name>cat</name><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
           f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object></annotation>")
    with pytest.raises(UserError, match=words):
        parse_voc(xml)
