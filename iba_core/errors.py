"""Errors written for users: one type (`UserError`) that speaks to each front end, and the sentence to show.

The library says what is wrong (`message`, no front-end words); the CLI and the app each add what to do in
their own words (`cli_hint`: flags and commands; `app_hint`: menus, fields, uploads). `user_message` puts
them together for one front end. This module imports nothing from iba_core, so any module can raise these.

The rule that tells a mistake from a bug: a condition the user can fix raises `UserError` (or a subclass);
anything else (a bare ValueError, TypeError, RuntimeError, …) is a bug. The front ends show a mistake as its
sentence, and a bug as an internal error (`internal_message`) with its traceback in a log, never as the user's fault.
"""
from __future__ import annotations

import re
from numbers import Integral, Real
from typing import Literal

FrontEnd = Literal["cli", "app"]


class UserError(Exception):
    """A mistake a user can fix, with what to do in each front end's words.

    message: what is wrong, in words that hold everywhere (no flags, no menus).
    cli_hint / app_hint: what to do on the command line / in the app (either may be empty).
    Deliberately not a ValueError: a bug (a library's ValueError on data the program made) can then never be
    caught by an `except` meant for the user's mistakes, nor shown as one. A parser of user text turns a
    library's ValueError into a UserError where it reads the text (`raise UserError(...) from err`).
    """

    def __init__(self, message: str, *, cli_hint: str = "", app_hint: str = ""):
        super().__init__(message)
        self.message, self.cli_hint, self.app_hint = message, cli_hint, app_hint

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # keep the hints across processes (DataLoader workers, pickled results)
        return _rebuild, (type(self), self.message, self.cli_hint, self.app_hint)


def _rebuild(cls: type[UserError], message: str, cli_hint: str, app_hint: str) -> UserError:
    err = cls.__new__(cls)
    UserError.__init__(err, message, cli_hint=cli_hint, app_hint=app_hint)
    return err


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named is not there (still a FileNotFoundError for `except` clauses). A
    FileNotFoundError of any other file (one the program itself should have made) is a bug."""


#: Errors whose message is written for users (CLI: one line on stderr; app: st.error): UserError and its
#: subclasses (ImageError, DataError, WeightsUnavailableError, MissingFileError, …). Anything else is a bug:
#: logged with its traceback and shown as an internal error (`internal_message`).
USER_ERRORS: tuple[type[BaseException], ...] = (UserError,)

#: Where a front end says a bug's details are when it has no log file to name.
CLI_LOG_PLACE = "the traceback printed above"


def user_message(err: BaseException, front_end: FrontEnd, log_place: str = "the server's log") -> str:
    """The sentence to show for `err` in `front_end` ("cli" or "app"): a UserError's message with that front
    end's hint; for anything else (a bug) `internal_message`, naming `log_place` as where its details are."""
    if front_end not in ("cli", "app"):
        raise ValueError(f"front_end must be 'cli' or 'app', got {front_end!r}.")
    if isinstance(err, UserError):
        hint = err.cli_hint if front_end == "cli" else err.app_hint
        return f"{err.message} {hint}" if hint else err.message
    return internal_message(err, log_place)


def internal_message(err: BaseException, log_place: str, reference: str = "") -> str:
    """One sentence for a bug: an internal error, not the user's mistake, and where its details are.

    reference: a short id written beside the traceback in the log, so the owner finds this one."""
    ref = f", reference {reference}" if reference else ""
    return (f"Internal error in IBA Explorer ({type(err).__name__}{ref}): this is a bug, not a mistake of yours; "
            f"the details are in {log_place}.")


def _number_text(value: float) -> str:
    """A number in few characters: 10, 0.5, 1e-6, 1e300, inf, nan."""
    return re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", f"{value:g}")


def quoted(text: object, limit: int = 40) -> str:
    """`text` as a message quotes what a user typed: its repr (so control and invisible characters show as
    escapes), of at most `limit` characters of the text (the cut marked '…'), and at most 3 × `limit` characters in
    all (an escape such as \\U0002ebe1 takes up to ten characters for one)."""
    text = str(text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    shown = repr(text)
    cap = 3 * limit
    return shown if len(shown) <= cap else shown[: cap - 2] + "…" + shown[0]


def check_range(name: str, value: object, low: float, high: float, *, integer: bool = False,
                unit: str = "") -> float:
    """`value` as a float (an int where `integer`) if it lies in [low, high]; else a UserError naming the range.

    name: the setting as users know it ("β·k", "σ_s"); unit: appended to the bounds ("cells"). NaN and ±inf
    are refused like any value outside the range (comparisons with NaN are false, so `not low <= v <= high`).
    """
    bounds = f"{_number_text(low)} and {_number_text(high)}{' ' + unit if unit else ''}"
    kind = "a whole number" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, Integral if integer else Real):
        shown = _number_text(float(value)) if isinstance(value, Real) and not isinstance(value, bool) \
            else repr(str(value)[:40])  # a long text is not echoed whole
        raise UserError(f"{name} must be {kind} between {bounds} (you gave {shown}).")
    number = float(value)
    if not low <= number <= high:
        raise UserError(f"{name} must be between {bounds} (you gave {_number_text(number)}).")
    return int(value) if integer else number


__all__ = ["CLI_LOG_PLACE", "USER_ERRORS", "FrontEnd", "MissingFileError", "UserError", "check_range",
           "internal_message", "quoted", "user_message"]
