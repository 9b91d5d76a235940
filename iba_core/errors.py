"""Which errors carry a message written for users, and the sentence to show for any error."""
from __future__ import annotations

from .images import ImageError
from .networks import UnknownModelError, WeightsUnavailableError

#: Errors whose message is written for users (CLI: one line on stderr; app: st.error); anything else is
#: reported as unexpected. ValueError covers the library's own checks (settings, classes, boxes, files).
USER_ERRORS: tuple[type[BaseException], ...] = (
    ImageError, WeightsUnavailableError, UnknownModelError, FileNotFoundError, ValueError,
)


def user_message(err: BaseException) -> str:
    """A sentence to show for `err`: its own message for known errors, a generic line otherwise."""
    if isinstance(err, USER_ERRORS):
        return str(err)
    return f"Something went wrong ({type(err).__name__}: {err}). Your previous results are kept; please try again."
