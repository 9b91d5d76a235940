"""A folder run's log of bugs: the text of a row that failed, and RUN_DIR/errors.log for the rows a bug failed.

A row that failed by the user's mistake (a `UserError`: an unreadable file, a class the network lacks) keeps that
sentence. A row that failed by anything else is a bug: the row says so in one sentence
(`errors.internal_message`) with a reference, and errors.log, in the run folder, holds that reference beside the
traceback. The log lives in the run folder because a folder run has two front ends (the CLI, the Dataset page's
background job) and torchrun ranks: the run folder is the one place all of them write to and a person reading the
rows has at hand. The row names the log relative to the run folder, never by the machine's path (a run's report
may be served to others).

One bug usually fails many rows alike (every image of a method): its traceback is written once per process and
later rows give the first one's reference, so a run of 100,000 images cannot fill the disk with copies.
"""
from __future__ import annotations

import os
import threading
import time
import traceback
import uuid
from pathlib import Path

from ..errors import UserError, internal_message

#: The log of bugs in a run folder (beside run.json).
ERROR_LOG = "errors.log"
#: How a row names the log: relative to the run folder, which the reader has open.
LOG_PLACE = f"{ERROR_LOG} in the run folder"

# (log file, the bug's type and the places it passed) → the reference its traceback was written under
_LOGGED: dict[tuple[str, str, tuple], str] = {}
_LOCK = threading.Lock()


def _signature(err: BaseException) -> tuple:
    """The bug's type and the lines it passed through: alike for one bug on many images."""
    frames = traceback.extract_tb(err.__traceback__)
    return type(err).__qualname__, tuple((f.filename, f.lineno) for f in frames)


def log_bug(run_dir: str | os.PathLike, err: BaseException, where: str = "") -> str:
    """Write `err`'s traceback into the run's errors.log under a new reference (or give the reference of the same
    bug written before by this process) and return the reference. where: which row it failed ("image · method").
    A log that cannot be written leaves the reference in the row alone (a read-only folder fails the rows' parts
    anyway)."""
    path = Path(run_dir) / ERROR_LOG
    key = (str(path), *_signature(err))
    with _LOCK:
        first = _LOGGED.get(key)
        reference = uuid.uuid4().hex[:8]
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        if first is not None:
            entry = f"{stamp} reference {reference} ({where}): the same bug as reference {first}: {err!r}\n"
        else:
            trace = "".join(traceback.format_exception(type(err), err, err.__traceback__))
            entry = f"{stamp} reference {reference} ({where}, process {os.getpid()}):\n{trace}\n"
        try:
            with open(path, "a", encoding="utf-8") as log:  # one write per entry: ranks append whole entries
                log.write(entry)
        except OSError:
            return reference
        if first is None:
            _LOGGED[key] = reference
    return reference


def row_error(err: BaseException, run_dir: str | os.PathLike, where: str = "") -> str:
    """The sentence a failed row stores: a user's mistake as its message; a bug as "Internal error … this is a bug
    … errors.log in the run folder" with its reference, its traceback logged (`log_bug`)."""
    if isinstance(err, UserError):
        return err.message
    return internal_message(err, LOG_PLACE, log_bug(run_dir, err, where))


__all__ = ["ERROR_LOG", "LOG_PLACE", "log_bug", "row_error"]
