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
