"""Shared pieces of the property-based fuzz tests (tests/bad_inputs/test_fuzz_*.py): hostile text strategies, one
settings profile, and the property every reader of user text must keep.

The property: a reader given any text returns a result or raises a `UserError` whose message is one sentence
(`assert_one_sentence`), never an exception of another kind; where a reader could allocate from a number in its
input, its peak memory stays under a stated bound (`peak_bytes`).

Determinism: every fuzz test runs with `derandomize=True` and `database=None` (FUZZ below), so CI draws the same
examples on every run and machine (the seed comes from the test's own name), and no example database is written.
"""
from __future__ import annotations

import tracemalloc
from typing import Any, Callable

from hypothesis import HealthCheck, settings, strategies as st

from bad_input_helpers import assert_one_sentence
from iba_core.errors import UserError

#: The longest text a strategy makes: a pasted page is longer than anything a field or file here needs, and
#: long enough to find a reader that is quadratic in its input or echoes it whole.
MAX_TEXT = 100_000


def fuzz_settings(examples: int) -> settings:
    """The profile of every fuzz test: `examples` examples, the same ones on every run (derandomized, no
    database), no deadline (the two CI cores are shared, so a per-example time limit would flake)."""
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


#: Pieces a careless or hostile user types: control and bidi characters, line breaks Python splits at, numbers
#: that overflow or are not finite, digits that are not ASCII, markup, a path, an integer too long for `int()`.
HOSTILE_PIECES = (
    "\x00", "\x1b[31m", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\t", " ", "\ufeff",
    "\u202e", "\u2066", "\u2069", "\u200b", "\u200d", "\ud7ff", "\U0001f600", "ﬁ", "İ", "ß",
    "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e308", "1e309", "-1e308", "1e-200", "5e-324", "-0", "0",
    "-1", "1", "7", "0x10", "1_000", "1,5", "٣", "²", "①", "𝟗", "9" * 30, "9" * 5000, "1" + "0" * 400,
    "<", ">", "&", "&amp;", "]]>", "<!--", "\"", "'", "\\", ":", "::", ";", ",", "=", "[", "]", "{", "}", "#",
    "../../etc/passwd", "/", "~", "*", "%", "%s", "{0}", "$(x)",
)


def hostile_piece() -> st.SearchStrategy[str]:
    return st.sampled_from(HOSTILE_PIECES)


def hostile_text(max_size: int = 200) -> st.SearchStrategy[str]:
    """Short text mixing any Unicode (controls and bidi marks included) with hostile pieces; now and then one
    piece repeated up to MAX_TEXT characters."""
    mixed = st.lists(st.one_of(hostile_piece(), st.text(max_size=20)), max_size=12).map("".join)
    short = st.one_of(st.text(max_size=max_size), mixed, hostile_piece())
    return st.one_of(short, long_text())


def long_text() -> st.SearchStrategy[str]:
    """One piece (hostile or a letter) repeated to between 1,000 and MAX_TEXT characters."""
    piece = st.one_of(hostile_piece(), st.sampled_from(("a", "9", "é", "a:b\n")))
    return st.builds(lambda p, n: (p * (n // max(len(p), 1) + 1))[:n], piece, st.integers(1_000, MAX_TEXT))


@st.composite
def mutated(draw: Callable, valid: str) -> str:
    """`valid` with a few edits: a hostile piece inserted, a slice deleted or doubled, a character replaced."""
    text = valid
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        end = draw(st.integers(at, min(len(text), at + 20)))
        kind = draw(st.sampled_from(("insert", "delete", "double", "replace")))
        if kind == "insert":
            text = text[:at] + draw(st.one_of(hostile_piece(), st.text(max_size=5))) + text[at:]
        elif kind == "delete":
            text = text[:at] + text[end:]
        elif kind == "double":
            text = text[:end] + text[at:end] + text[end:]
        else:
            text = text[:at] + draw(st.characters()) + text[at + 1:]
    return text


def result_or_sentence(read: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`read(*args, **kwargs)`'s result, or None after checking that it raised a UserError of one sentence; any
    other exception propagates (the property's failure)."""
    try:
        return read(*args, **kwargs)
    except UserError as err:
        assert_one_sentence(err.message)
        return None


def peak_bytes(read: Callable[[], Any]) -> int:
    """The peak of memory Python allocated while `read()` ran (tracemalloc), its UserError allowed."""
    return traced(read)[0]


def traced(read: Callable[[], Any]) -> tuple[int, UserError | None]:
    """(the peak of memory Python allocated while `read()` ran, by tracemalloc; its UserError or None)."""
    tracemalloc.start()
    try:
        try:
            read()
        except UserError as err:
            return tracemalloc.get_traced_memory()[1], err
        return tracemalloc.get_traced_memory()[1], None
    finally:
        tracemalloc.stop()
