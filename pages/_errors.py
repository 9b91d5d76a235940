"""Errors on a page: the user's mistake as its one sentence, anything else as an internal error."""
from __future__ import annotations

import logging

import streamlit as st

from iba_core.errors import USER_ERRORS, user_message

log = logging.getLogger("iba_explorer")

# ---- errors ------------------------------------------------------------------------------------


def show_error(err: BaseException) -> None:
    """A readable st.error instead of a traceback: the message with its app hint (`errors.user_message`);
    unexpected errors are logged."""
    if not isinstance(err, USER_ERRORS):
        log.exception("Unexpected error in IBA Explorer", exc_info=err)
    st.error(user_message(err, "app"), icon=":material/error:")
