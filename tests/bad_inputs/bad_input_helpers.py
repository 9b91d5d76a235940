"""Helpers shared by the bad-input tests: run the CLI in-process, run a page, check a user-facing message.

Import them by name (`from bad_input_helpers import run_cli, page_errors, assert_one_sentence`); the folder's
conftest.py adds the fixtures (`open_page`). Each area of bad inputs has one test file here that sends the same
bad input through the CLI, the library and the app, and checks each answer is one clear sentence.
"""
from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from streamlit.testing.v1 import AppTest

#: The app under test.
APP = Path(__file__).resolve().parents[2] / "app.py"
#: Seconds an AppTest script run may take; generous because CI machines vary.
PAGE_TIMEOUT = 180
#: Longest message a user should have to read; longer ones echo input or pile up reasons.
MAX_MESSAGE_CHARS = 400


@dataclass
class CliResult:
    """What one CLI call gave back: its exit status and everything it printed."""

    code: int
    out: str
    err: str


def run_cli(argv: Sequence[str]) -> CliResult:
    """Run `python -m iba_core ARGV` in this process; argparse's own refusals (exit 2) are captured too."""
    from iba_core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse exits instead of returning
            code = exit_.code if isinstance(exit_.code, int) else 1
    return CliResult(code, out.getvalue(), err.getvalue())


def cli_error(result: CliResult) -> str:
    """The message of a refused CLI call, without the `error: ` prefix; fails if the call did not fail."""
    assert result.code != 0, f"the command should have failed; it printed {result.out[:300]!r}"
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines, "a refused command must say why on stderr"
    last = lines[-1]
    return last.split("error: ", 1)[1] if "error: " in last else last


def page_errors(at: AppTest) -> list[str]:
    """The st.error texts of the last run of a page; fails on an uncaught exception (st.exception)."""
    assert not at.exception, [e.value for e in at.exception]
    return [e.value for e in at.error]


def new_app() -> AppTest:
    """A fresh AppTest of app.py, run once (the Home page)."""
    return AppTest.from_file(str(APP), default_timeout=PAGE_TIMEOUT).run()


def assert_one_sentence(text: str) -> None:
    """A message a user may see: one clear sentence, not a traceback, not an echo of their input, not cut off."""
    assert text and text.strip(), "the message is empty"
    text = text.strip()
    assert "Traceback" not in text and 'File "' not in text, f"a traceback reached the user: {text!r}"
    assert len(text) <= MAX_MESSAGE_CHARS, f"the message is {len(text)} characters long: {text[:200]!r}…"
    assert text[-1] in ".!?)", f"the message does not end as a sentence: {text!r}"
    assert not re.search(r"\w(…|\.\.\.)\s*$", text), f"the message is cut mid-word: {text!r}"
