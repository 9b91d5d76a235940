"""The app's log of internal errors: a bug's traceback goes to a file in the cache folder, the page shows one
sentence saying where (`errors.internal_message`: the log's path for the machine's own user, "the app's error
log" and the reference for a served app's visitor); a user's mistake (`UserError`) shows its own sentence.

The log is `IBA_CACHE_DIR/logs/app.log` (`app_log_file`), kept to a few megabytes (`MAX_LOG_BYTES`, one older
file beside it), so visitors who run into the same bug again and again cannot fill the server's disk.
"""
from __future__ import annotations

import logging
import logging.handlers
import os
import threading
import uuid
from pathlib import Path

from ..errors import UserError, internal_message, user_message
from ..settings import cache_dir
from ..trust import ANY, Trust, visitor_text

#: The logger the app writes internal errors to (its records also reach the server's console).
LOGGER_NAME = "iba_explorer"
#: How a served app's visitor hears of the log: no path of the server (issue #40); the reference finds the entry.
SERVED_LOG_PLACE = "the app's error log (logs/app.log in its cache folder)"
#: Largest size of the log file before it is rotated (one older file, app.log.1, is kept).
MAX_LOG_BYTES = 5_000_000

# Adding the file handler must happen once per file, also when two sessions' runs fail at the same moment.
_HANDLER_LOCK = threading.Lock()


def app_log_file() -> Path:
    """Where the app logs internal errors: IBA_CACHE_DIR/logs/app.log."""
    return cache_dir() / "logs" / "app.log"


def _file_logger(path: Path) -> logging.Logger | None:
    """The app's logger with its one file handler writing to `path` (a handler for another file, left by an
    earlier cache folder, is closed); None where the folder cannot be made (then the record still reaches the
    server's console)."""
    logger = logging.getLogger(LOGGER_NAME)
    with _HANDLER_LOCK:
        target = os.path.abspath(path)  # as logging stores it (baseFilename), symlinks not followed
        ours = [h for h in logger.handlers if getattr(h, "iba_app_log", False)]
        if any(h.baseFilename == target for h in ours):
            return logger
        for old in ours:
            logger.removeHandler(old)
            old.close()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_LOG_BYTES, backupCount=1,
                                                           encoding="utf-8")
        except OSError:
            return None
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        handler.iba_app_log = True  # type: ignore[attr-defined]  # marks the handler this module owns
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger


def log_internal_error(err: BaseException, trust: Trust | None = None) -> str:
    """Log `err` with its traceback in the app's log (`app_log_file`) and return the sentence for the page:
    an internal error, its reference and where the log is: its path only for the machine's own user (`trust`'s
    server_paths ANY), else "the app's error log" (default: a visitor, who never sees the server's paths)."""
    reference = uuid.uuid4().hex[:8]
    path = app_log_file()
    logger = _file_logger(path)
    (logger or logging.getLogger(LOGGER_NAME)).error("Internal error, reference %s", reference, exc_info=err)
    local = trust is not None and trust.server_paths == ANY
    place = (f"the log at {path}" if local else SERVED_LOG_PLACE) if logger is not None else "the server's console"
    return internal_message(err, place, reference)


def error_text(err: BaseException, trust: Trust | None = None) -> str:
    """The one sentence a page shows for `err`: a user's mistake with its app hint (a path inside the allowed
    folders named relative to them for `trust`'s visitor); a bug logged with its
    traceback (`log_internal_error`, which names the log's path to `trust`'s local user only) and named an
    internal error."""
    if isinstance(err, UserError):  # its paths in the allowed folders as a visitor sees them (`visitor_text`)
        return visitor_text(user_message(err, "app"), trust) if trust is not None else user_message(err, "app")
    return log_internal_error(err, trust)


__all__ = ["LOGGER_NAME", "MAX_LOG_BYTES", "SERVED_LOG_PLACE", "app_log_file", "error_text", "log_internal_error"]
