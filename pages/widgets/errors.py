"""Errors on a page: the user's mistake as its one sentence, anything else as an internal error whose traceback
goes to the app's log (`iba_core.app.error_log`), never as the user's fault."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from iba_core.app.error_log import error_text
from pages.widgets.page import app_trust


def show_error(err: BaseException, where: DeltaGenerator | None = None) -> None:
    """`err` as one st.error (in `where`, default the page): a mistake's sentence with its app hint, or a bug
    logged with its traceback and named an internal error (`error_log.error_text`: the log's path for the app's
    local user only)."""
    (where or st).error(error_text(err, app_trust()), icon=":material/error:")


@dataclass
class Outcome:
    """What happened inside `shown_errors`: the error shown, if any."""

    error: BaseException | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


@contextmanager
def shown_errors(where: DeltaGenerator | None = None) -> Iterator[Outcome]:
    """Run the block; an exception ends it and is shown as one st.error (`show_error`) instead of a traceback.
    The page goes on: check `outcome.failed` after the block to skip what needed its result.

    Streamlit's own stop and rerun pass through (they are not Exceptions), and so does KeyboardInterrupt.
    """
    outcome = Outcome()
    try:
        yield outcome
    except Exception as err:  # noqa: BLE001 - every error a page's work raises is shown, none as a traceback
        outcome.error = err
        show_error(err, where)
