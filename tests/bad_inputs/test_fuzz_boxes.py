"""Fuzzing object boxes (issue #40): a box typed as text and a Pascal-VOC annotation (XML, as an upload's bytes
or a box folder's file) give a mask of the crop or one sentence, never another exception; the mask is the crop's
size whatever the numbers say, and an XML with entities (billion laughs) is refused in one sentence, quickly."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from hypothesis import example, given, strategies as st

from bad_input_helpers import assert_one_sentence
from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, long_text, mutated, peak_bytes, result_or_sentence
from iba_core.app.inputs import box_input, parse_box
from iba_core.errors import UserError
from iba_core.metrics.bbox import parse_voc

#: A network's preprocessing as `box_input` reads it (`Network.preprocess`: resize, then a square crop).
PREPROCESS = SimpleNamespace(resize=256, crop_size=224)
#: An annotation that reads (two boxes).
VALID_XML = """<annotation><filename>cat.jpg</filename>
<size><width>500</width><height>375</height><depth>3</depth></size>
<object><name>cat</name><bndbox><xmin>48</xmin><ymin>240</ymin><xmax>195</xmax><ymax>371</ymax></bndbox></object>
<object><name>dog</name><bndbox><xmin>8</xmin><ymin>12</ymin><xmax>352</xmax><ymax>498</ymax></bndbox></object>
</annotation>"""
#: The peak memory of reading one annotation and making its mask: the text parsed (expat and ElementTree take a few
#: hundred bytes an element), and masks of the crop (224 × 224 booleans, a few copies). Measured at most 2 MB for
#: 100,000 characters of XML; the numbers inside (a width of 1e308) must not change it.
BOX_FIXED_BYTES = 4 * 2**20
BOX_BYTES_PER_CHAR = 200


def box_texts() -> st.SearchStrategy[str]:
    numbers = st.one_of(hostile_piece(), st.integers(-10**30, 10**30).map(str), st.floats().map(str))
    four = st.lists(numbers, min_size=0, max_size=6).flatmap(
        lambda parts: st.sampled_from((", ", " ", ";", ",\u2028")).map(lambda sep: sep.join(parts)))
    return st.one_of(four, mutated("50, 40, 170, 170"), hostile_text())


@given(text=box_texts())
@example(text="1e308, 1e308, 1e309, 1e309")
@example(text="nan, 0, 10, 10")
@example(text="50, 40, 170, 170")
@fuzz_settings(examples=300)
def test_any_typed_box_is_a_mask_of_the_crop_or_one_sentence(text) -> None:
    result = result_or_sentence(box_input, text, None, PREPROCESS)
    if result is not None:
        mask, boxes = result
        assert mask.shape == (224, 224) and mask.dtype == bool and mask.any() and len(boxes) == 1
    if text == "50, 40, 170, 170":
        assert parse_box(text, 224) == (50, 40, 170, 170)


def xml_number() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(("1e308", "1e309", "-1", "nan", "inf", "0", "0.5", "1" + "0" * 400, "9" * 5000,
                                      "", " ", "1_0", "٣", "0x10", "&lt;", "<b/>")),
                     st.integers(0, 10**6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(str))


@st.composite
def voc_xml(draw) -> str:
    """An annotation of hostile numbers, names and structure (boxes many or none, size absent, nesting deep)."""
    def number(tag: str) -> str:
        return f"<{tag}>{draw(xml_number())}</{tag}>"

    size = draw(st.sampled_from(("", "<size>" + number("width") + number("height") + "</size>")))
    objects = "".join(
        f"<object><name>{draw(hostile_text(20)).replace('<', '').replace('&', '')}</name><bndbox>"
        + "".join(number(t) for t in ("xmin", "ymin", "xmax", "ymax")) + "</bndbox></object>"
        for _ in range(draw(st.integers(0, 3))))
    depth = draw(st.integers(0, 3000))
    return f"<annotation>{'<a>' * depth}{size}{objects}{'</a>' * depth}</annotation>"


def xml_texts() -> st.SearchStrategy[str]:
    return st.one_of(voc_xml(), mutated(VALID_XML), hostile_text(), long_text(),
                     st.integers(1, 20_000).map(lambda n: "<a>" * n + "</a>" * n))


@given(xml=xml_texts(), as_bytes=st.booleans())
@example(xml=VALID_XML.replace("500", "1e308"), as_bytes=False)  # was an OverflowError from int(inf)
@example(xml='<?xml version="1.0" encoding="utf-16"?>' + VALID_XML, as_bytes=False)
@example(xml="<annotation>" + "<a>" * 100_000 + "</a>" * 100_000 + "</annotation>", as_bytes=True)
@example(xml=VALID_XML, as_bytes=True)
@fuzz_settings(examples=300)
def test_any_annotation_is_a_mask_of_the_crop_or_one_sentence(xml, as_bytes) -> None:
    given_xml = xml.encode("utf-8") if as_bytes else xml
    result = result_or_sentence(box_input, "", given_xml, PREPROCESS)
    if result is not None:
        mask, boxes = result
        assert mask.shape == (224, 224) and mask.dtype == bool and boxes
    if xml == VALID_XML:
        assert result is not None and len(result[1]) == 2


@given(xml=xml_texts())
@fuzz_settings(examples=150)
def test_any_box_file_is_read_or_refused_in_one_sentence(tmp_path_factory, xml) -> None:
    """A box folder's file (the evaluate CLI, folder runs): parse_voc reads it from its path."""
    path = tmp_path_factory.getbasetemp() / "box.xml"
    path.write_text(xml, encoding="utf-8")
    result_or_sentence(parse_voc, path)


@given(xml=st.one_of(voc_xml(), mutated(VALID_XML), long_text()))
@fuzz_settings(examples=40)
def test_an_annotations_reading_takes_memory_bounded_by_its_size(xml) -> None:
    peak = peak_bytes(lambda: box_input("", xml, PREPROCESS))
    assert peak <= BOX_FIXED_BYTES + BOX_BYTES_PER_CHAR * len(xml), f"{peak:,} bytes for {len(xml):,} characters"


def billion_laughs(levels: int = 10) -> str:
    """The classic entity bomb: each entity ten of the one before, 10^levels "lol"s from a few hundred bytes."""
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, levels))
    return (f'<?xml version="1.0"?><!DOCTYPE annotation [{entities}]><annotation><size>'
            f"<width>&lol{levels - 1};</width><height>1</height></size></annotation>")


@pytest.mark.parametrize("xml", [
    billion_laughs(),
    # the quadratic blow-up: one large entity referred to many times (no nesting for a depth limit to catch)
    '<!DOCTYPE a [<!ENTITY x "' + "x" * 50_000 + '">]><annotation><name>' + "&x;" * 50_000 + "</name></annotation>",
    # an external entity: a file of the server read into the annotation
    '<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]><annotation><name>&x;</name></annotation>',
    "<!doctype annotation><annotation/>",
], ids=["billion-laughs", "quadratic", "external", "doctype"])
def test_an_annotation_with_a_doctype_or_entities_is_refused_quickly(xml) -> None:
    start = time.perf_counter()
    for given_xml in (xml, xml.encode("utf-8")):
        with pytest.raises(UserError, match="DOCTYPE") as err:
            box_input("", given_xml, PREPROCESS)
        assert_one_sentence(err.value.message)
    peak = peak_bytes(lambda: box_input("", xml, PREPROCESS))
    assert time.perf_counter() - start < 2.0
    assert peak <= BOX_FIXED_BYTES + BOX_BYTES_PER_CHAR * len(xml)
