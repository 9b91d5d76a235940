"""Fuzzing model cards and class lists (issue #40): any TOML text a card file holds, and any text a class list
holds (one name a line, JSON or CSV), is read into a card or a list of names, or refused in one sentence
(`ModelCardError`), never another exception; the memory a reader takes is bounded by the file's size."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, strategies as st

from fuzz_helpers import (fuzz_settings, hostile_piece, hostile_text, long_text, mutated, peak_bytes,
                          result_or_sentence, traced)
from bad_input_helpers import assert_one_sentence
from iba_core.networks import ModelCardError, read_card, read_class_list

#: A card that reads: every entry, its files beside it (short paths, so a message quoting one stays short).
VALID_CARD = """arch = "resnet50"
weights = "w.pth"
classes = "classes.txt"
layer = "layer3"
stats_images = "photos"
name = "mynet"
title = "My ResNet-50"
head = "softmax"
channels = 3
display_bands = [2, 1, 0]

[arch_args]
width = 64
sizes = [1, 2, [3, 4]]

[preprocess]
resize = 256
crop = 224
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]
interpolation = "bilinear"
"""
#: The peak memory a card's reading may take: a fixed part (tomllib's and pathlib's own work) and a part per
#: character of the card (the parsed tables hold at most a few Python objects per character). Measured: at most
#: 0.6 MB and 75 bytes a character (10,000 [arch_args] entries of small lists); the bound leaves room.
CARD_FIXED_BYTES = 4 * 2**20
CARD_BYTES_PER_CHAR = 400


@pytest.fixture(scope="module")
def card_folder():
    """A short folder (messages quote the card's path) holding the files VALID_CARD names."""
    folder = Path(tempfile.mkdtemp(prefix="card"))
    (folder / "w.pth").write_bytes(b"")
    (folder / "classes.txt").write_text("cat\ndog\n")
    (folder / "photos").mkdir()
    yield folder
    shutil.rmtree(folder)


def toml_values() -> st.SearchStrategy[str]:
    """TOML right-hand sides, sound and hostile: numbers out of every range, NaN and inf, deep nesting, huge arrays."""
    numbers = st.sampled_from(("nan", "inf", "-inf", "1e308", "-1", "0", "3", "65", "1_000_000_000_000", "1.5",
                               "9" * 30, "true", "0x7fffffffffffffff"))
    nested = st.integers(1, 20_000).flatmap(
        lambda n: st.sampled_from(("[" * n + "]" * n, "{a=" * n + "1" + "}" * n, "[" * n + "1" + "]" * n)))
    huge = st.integers(1, 20_000).map(lambda n: "[" + ", ".join(["1"] * n) + "]")
    text = hostile_text(60).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return st.one_of(numbers, nested, huge, text)


def card_texts() -> st.SearchStrategy[str]:
    """A card's text: the valid card mutated, an entry of it given a hostile value, or any text at all."""
    keys = st.sampled_from(("arch", "weights", "classes", "layer", "stats_images", "name", "title", "head",
                            "channels", "display_bands", "model_folder", "unknown"))
    table_keys = st.sampled_from(("[arch_args]\nwidth", "[arch_args]\nnum_classes", "[arch_args]\na.b.c",
                                  "[preprocess]\nresize", "[preprocess]\ncrop", "[preprocess]\nmean",
                                  "[preprocess]\nstd", "[preprocess]\ninterpolation", "[preprocess]\nother"))
    entry = st.builds(lambda k, v: f"arch = \"resnet50\"\n{k} = {v}\n", st.one_of(keys, table_keys), toml_values())
    return st.one_of(mutated(VALID_CARD), entry, hostile_text(), long_text())


@given(text=card_texts())
@example(text="a = " + "[" * 50_000 + "]" * 50_000)  # was a RecursionError inside tomllib
@example(text="a = " + "{b=" * 5_000 + "1" + "}" * 5_000)
@example(text=VALID_CARD)
@fuzz_settings(examples=300)
def test_any_card_text_is_read_or_refused_in_one_sentence(card_folder, text) -> None:
    card = card_folder / "c.toml"
    card.write_text(text, encoding="utf-8")
    result = result_or_sentence(read_card, card)
    if text == VALID_CARD:
        assert result is not None and result.name == "mynet" and result.preprocess["mean"] == (0.485, 0.456, 0.406)


@given(text=st.one_of(card_texts(), toml_values().map(lambda v: f"a = {v}\n")))
@fuzz_settings(examples=40)
def test_a_cards_reading_takes_memory_bounded_by_its_size(card_folder, text) -> None:
    card = card_folder / "m.toml"
    card.write_text(text, encoding="utf-8")
    peak = peak_bytes(lambda: read_card(card))
    assert peak <= CARD_FIXED_BYTES + CARD_BYTES_PER_CHAR * len(text), f"{peak:,} bytes for {len(text):,} characters"


def test_a_deeply_nested_card_is_one_sentence(card_folder) -> None:
    card = card_folder / "deep.toml"
    card.write_text("arch = \"resnet50\"\n[arch_args]\nsizes = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ModelCardError, match="nests") as err:
        read_card(card)
    assert "deep.toml" in str(err.value)


# ---- class lists --------------------------------------------------------------------------------------

#: The peak memory a class list's reading may take, by the file's size: its text is decoded whole (the bytes and the
#: string: 2 bytes a byte of ASCII; a JSON list of one-letter names becomes a list of pointers, 5 bytes a byte in
#: all), and text and CSV lines are read one at a time and stop at MAX_CLASS_LINES (a CSV row, a list of two
#: strings, takes about 100 bytes), so a file of millions of tiny lines never becomes millions of strings.
#: Measured: 86 MB for a JSON list of 4 million names at the 16 MB size cap, 21 MB for a CSV of 10⁶ tiny rows.
CLASS_LIST_BYTES_PER_BYTE = 6
CLASS_LIST_FIXED_BYTES = 40 * 2**20


def class_list_bound(size: int) -> int:
    """The stated peak memory of reading a class list of `size` bytes."""
    return CLASS_LIST_FIXED_BYTES + CLASS_LIST_BYTES_PER_BYTE * size


def class_list_texts() -> st.SearchStrategy[str]:
    line = st.one_of(hostile_text(40), hostile_piece())
    lines = st.lists(line, max_size=30).map("\n".join)
    json_like = st.one_of(
        st.lists(st.one_of(st.text(max_size=10), st.integers(), st.none(), st.floats()), max_size=10).map(repr),
        st.dictionaries(st.one_of(hostile_piece(), st.integers().map(str)), st.text(max_size=10), max_size=10)
        .map(lambda d: "{" + ", ".join(f'"{k}": "{v}"' for k, v in d.items()) + "}"),
        mutated('["cat", "dog"]'), mutated('{"0": "cat", "1": "dog"}'))
    csv_like = st.one_of(mutated("index,name\n0,cat\n1,dog\n"),
                         st.lists(st.builds(lambda a, b: f"{a},{b}", hostile_piece(), hostile_text(20)), max_size=20)
                         .map("\n".join))
    return st.one_of(lines, json_like, csv_like, long_text())


@given(text=class_list_texts(), suffix=st.sampled_from((".txt", ".json", ".csv", "")))
@example(text="0,cat\n" + "9" * 5000 + ",dog\n", suffix=".csv")  # an index too long for int()
@example(text='{"²": "cat"}', suffix=".json")  # a digit int() does not read
@example(text="[" * 5_000, suffix=".json")  # was a RecursionError inside json
@fuzz_settings(examples=300)
def test_any_class_list_is_read_or_refused_in_one_sentence(card_folder, text, suffix) -> None:
    path = card_folder / f"classes{suffix}"
    path.write_text(text, encoding="utf-8")
    names = result_or_sentence(read_class_list, path)
    if names is not None:
        assert names and all(isinstance(n, str) for n in names)


@pytest.mark.parametrize("suffix", [".txt", ".csv", ".json"])
def test_a_class_list_of_a_million_tiny_names_is_refused_within_its_memory_bound(card_folder, suffix) -> None:
    """A file of a million one-letter names (10 times MAX_CLASSES): refused in one sentence, in memory bounded by
    its size (the lines of a text or CSV list were all made strings before their count was checked)."""
    path = card_folder / f"millions{suffix}"
    count = 1_000_000
    path.write_text('["' + '","'.join(["c"] * count) + '"]' if suffix == ".json" else "0,c\n" * count)
    peak, err = traced(lambda: read_class_list(path))
    assert isinstance(err, ModelCardError) and "more than the 100,000" in err.message
    assert_one_sentence(err.message)
    size = path.stat().st_size
    assert peak <= class_list_bound(size), f"{peak:,} bytes for {size:,} bytes"


@given(text=st.one_of(class_list_texts(), st.integers(1, 200_000).map(lambda n: "ab\n" * n)))
@fuzz_settings(examples=30)
def test_a_class_lists_reading_takes_memory_bounded_by_its_size(card_folder, text) -> None:
    path = card_folder / "sized.txt"
    path.write_text(text, encoding="utf-8")
    size = path.stat().st_size
    peak = peak_bytes(lambda: read_class_list(path))
    assert peak <= class_list_bound(size), f"{peak:,} bytes for {size:,} bytes"

