"""iba_core.render.text: numbers as short texts."""
from __future__ import annotations

from iba_core.render.text import format_beta, format_probability, format_seconds


def test_format_probability() -> None:
    assert format_probability(0.35544) == "35.5 %"
    assert format_probability(0.0000123) == "0.0012 %"
    assert format_probability(1.0) == "100.0 %"


def test_format_seconds() -> None:
    assert format_seconds(0.25) == "250 ms"
    assert format_seconds(12.34) == "12.3 s"
    assert format_seconds(90) == "1.5 min"


def test_format_beta() -> None:
    assert format_beta(10.0) == "10" and format_beta(0.01) == "0.01" and format_beta(1000.0) == "1000"


# ---- names shown as written (issue #40, item 4) ----------------------------------------------------------------


def test_a_plain_name_is_shown_unchanged_and_a_right_to_left_one_is_isolated() -> None:
    from iba_core.render.text import isolated, shown_name

    assert shown_name("img 05.png") == "img 05.png"
    assert isolated("\u05e9\u05dc\u05d5\u05dd.png") == "\u2068\u05e9\u05dc\u05d5\u05dd.png\u2069"  # Hebrew letters
    assert isolated("line\nbreak\x1b[31m") == "line break [31m"  # one line; a terminal's escape cannot act


def test_a_name_cannot_end_its_isolate_early_nor_leave_a_direction_open() -> None:
    from iba_core.render.text import isolated

    # a stray POP DIRECTIONAL ISOLATE would close the isolate around the name: dropped; an override left open
    # is closed (PDF) before the isolate ends, an isolate opened inside is closed (PDI)
    assert isolated("a\u2069b\u202ec") == "\u2068ab\u202ec\u202c\u2069"
    assert isolated("\u2067x\u202by") == "\u2068\u2067x\u202by\u202c\u2069\u2069"
    assert isolated("\u202ex\u202c\u202cy") == "\u2068\u202ex\u202cy\u2069"  # the second PDF closes nothing


def test_the_note_names_each_invisible_character() -> None:
    from iba_core.render.text import invisible_note, shown_name

    assert shown_name("photo\u202egpj.png") == ("\u2068photo\u202egpj.png\u202c\u2069 "
                                                "[holds an invisible character: U+202E (right-to-left override)]")
    assert invisible_note("a\u200bb\tc") == ("holds invisible characters: U+200B (zero width space), "
                                             "U+0009 (a control character)")
    assert invisible_note("ordinary name.png") == "" and shown_name("x\u200dy", note=False) == "x\u200dy"
