"""Fuzzing classes as users name them (issue #40): a typed target (--target, the app's class field), a class folder's
name, a label file's or class map's text and an image folder listed with one give a class index or one sentence
(`UserError`, `DataError`), never another exception."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st
from PIL import Image

from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, long_text, mutated, result_or_sentence
from iba_core.classes import resolve_class
from iba_core.image_folders import list_items
from iba_core.labels import LabelResolver, read_class_map, read_label_file

#: A label file that reads: image rows and wnid rows.
VALID_LABELS = "# image, label\ncat.jpg,0\ndog.png,dog\nn01440764 2\nn01443537\t3\n"


@pytest.fixture(scope="module")
def folder():
    """An image folder: two class folders and an image at the top (short paths: messages quote them)."""
    root = Path(tempfile.mkdtemp(prefix="cls"))
    for rel in ("cat/a.png", "dog/b.png", "c.png"):
        (root / rel).parent.mkdir(exist_ok=True)
        Image.new("RGB", (4, 4)).save(root / rel)
    yield root
    shutil.rmtree(root)


def class_names() -> st.SearchStrategy[list[str]]:
    name = st.one_of(st.sampled_from(("cat", "dog", "crane", "Crane", "tabby cat", "n01440764", "0", "7")),
                     hostile_text(30))
    return st.lists(name, max_size=12)


def targets() -> st.SearchStrategy[object]:
    return st.one_of(hostile_text(), mutated("cat"), mutated("12"), st.integers(-10**30, 10**30),
                     st.sampled_from(("9" * 5000, "+0", "-0", "٣", "²", "n01440764", " crane ", "CRANE")))


@given(categories=class_names(), target=targets())
@example(categories=["cat", "dog"], target="9" * 5000)  # was a ValueError: int() of 5,000 digits
@example(categories=["crane", "crane"], target="crane")
@example(categories=["cat", "dog"], target="dog")
@fuzz_settings(examples=200)
def test_any_typed_class_is_an_index_or_one_sentence(categories, target) -> None:
    index = result_or_sentence(resolve_class, categories, target)
    assert index is None or (isinstance(index, int) and (not categories or 0 <= index < len(categories)))
    if (categories, target) == (["cat", "dog"], "dog"):
        assert index == 1


@given(categories=class_names(), label=targets().map(str))
@example(categories=[], label="9" * 5000)
@fuzz_settings(examples=150)
def test_any_class_folders_name_is_an_index_or_one_sentence(categories, label) -> None:
    index = result_or_sentence(LabelResolver(categories), label)
    assert index is None or isinstance(index, int)


def label_texts() -> st.SearchStrategy[str]:
    row = st.builds(lambda a, sep, b: f"{a}{sep}{b}", st.one_of(hostile_piece(), st.just("n01440764"), hostile_text(20)),
                    st.sampled_from((",", "\t", " ", ";")), st.one_of(hostile_piece(), hostile_text(20)))
    json_like = st.one_of(mutated('{"0": ["n01440764", "tench"], "1": ["n01443537", "goldfish"]}'),
                          st.integers(1, 5_000).map(lambda n: "[" * n), hostile_text())
    return st.one_of(mutated(VALID_LABELS), st.lists(row, max_size=20).map("\n".join), json_like, long_text())


@given(text=label_texts(), name=st.sampled_from(("labels.txt", "labels.csv", "map.json", "LOC_synset_mapping.txt")),
       raw=st.one_of(st.none(), st.binary(max_size=50)))
@example(text="n01440764 ²\n", name="labels.txt", raw=None)  # was a ValueError: int("²")
@example(text="", name="labels.txt", raw=b"\xff\xfe\x00cat")  # was a UnicodeDecodeError
@example(text="[" * 5_000, name="map.json", raw=None)  # was a RecursionError
@example(text=VALID_LABELS, name="labels.txt", raw=None)
@fuzz_settings(examples=150)
def test_any_label_file_is_read_or_refused_in_one_sentence(folder, text, name, raw) -> None:
    path = folder / name
    if raw is None:
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(raw)
    labels = result_or_sentence(read_label_file, path)
    result_or_sentence(read_class_map, path)
    items = result_or_sentence(list_items, folder, path, categories=["cat", "dog", "tench"])
    if items is not None:
        assert [i.key for i in items] == ["c.png", "cat/a.png", "dog/b.png"]
        assert all(i.label is None or 0 <= i.label < 3 for i in items)
    if text == VALID_LABELS and raw is None and name.endswith(".txt"):
        assert labels.wnids == {"n01440764": 2, "n01443537": 3} and labels.images["cat.jpg"] == "0"
    path.unlink()
