"""Fuzzing metric settings (issue #40): any value of the yardsticks' options (--step, --blur-kernel, --blur-sigma,
--deletion-baseline, --noise, --removed, --tolerance) is refused by the command line in one line, or read into
options the metrics accept or refuse in one sentence (`cli.common.yardstick_options`), before any network loads;
what is accepted has a finite cost (`forward_passes`) and a protocol sentence."""
from __future__ import annotations

import argparse
import contextlib
import io
import math

from hypothesis import example, given, strategies as st

from bad_input_helpers import MAX_MESSAGE_CHARS
from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, result_or_sentence
from iba_core.cli.common import Parser, add_yardstick_args, yardstick_options
from iba_core.metrics import registry

#: The crop the cost is estimated for (224 × 224, the usual), and a crop of the largest size a card allows.
CROPS = (224 * 224, 1024 * 1024)


def parser() -> argparse.ArgumentParser:
    """The commands' own parser class (`cli.common.Parser`: it shortens a refused value) with the yardsticks'
    options, as `evaluate` and a folder run add them."""
    p = Parser(prog="evaluate")
    add_yardstick_args(p)
    return p


def option_values() -> st.SearchStrategy[str]:
    numbers = st.one_of(st.integers(-10**40, 10**40).map(str), st.floats().map(repr),
                        st.sampled_from(("1e-200", "1e308", "1e309", "nan", "-inf", "0", "1", "3", "11", "51", "99.9",
                                         "100", "9" * 30, "9" * 5000, "0x10", "1_000", "٣")))
    return st.one_of(numbers, hostile_piece(), hostile_text(60))


def argvs() -> st.SearchStrategy[list[str]]:
    option = st.sampled_from(("--step", "--blur-kernel", "--blur-sigma", "--noise", "--removed", "--tolerance",
                              "--deletion-baseline", "--protocol"))
    pair = st.builds(lambda o, v: [o, v], option, option_values())
    return st.lists(pair, max_size=4).map(lambda pairs: [a for pair in pairs for a in pair])


@given(argv=argvs())
@example(argv=["--step", "9" * 30])  # was an OverflowError (exit 70) before #40
@example(argv=["--blur-sigma", "1e-200"])
@example(argv=["--noise", "1e308"])
@example(argv=["--blur-kernel", "9" * 5000])
@example(argv=["--removed", "nan"])
@example(argv=["--deletion-baseline", "\x00" * 1000])  # argparse quoted the refused choice whole: 4,095 characters
@example(argv=["--protocol", "coiba", "--step", "224"])
@fuzz_settings(examples=300)
def test_any_metric_setting_is_refused_in_one_line_or_gives_options_of_finite_cost(argv) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            args = parser().parse_args(argv)
        except SystemExit as exit_:
            args = None
            assert exit_.code == 2
    if args is None:  # argparse's own refusal: usage, then one line naming the option
        line = err.getvalue().strip().splitlines()[-1]
        assert line.startswith("evaluate: error: ") and len(line) <= MAX_MESSAGE_CHARS, line[:300]
        return
    options = result_or_sentence(yardstick_options, args)
    if options is None:
        return
    for metric in registry.per_map():
        identity = metric.identity(options)
        sentence = metric.protocol_sentence(identity)
        assert sentence is None or sentence.endswith(".")
        for pixels in CROPS:
            passes = metric.forward_passes(pixels, options)
            assert isinstance(passes, int) and 0 <= passes < 10**8, (metric.name, passes)
    assert math.isfinite(options.road_noise) and all(0 < p < 100 for p in options.road_removed)
    if argv == ["--protocol", "coiba", "--step", "224"]:
        assert options.protocol.step == 224 and options.protocol.name == "coiba, modified"
