"""iba_core.errors: the sentence users see for an error."""
from __future__ import annotations

from iba_core.errors import USER_ERRORS, user_message
from iba_core.images import ImageError
from iba_core.networks import WeightsUnavailableError


def test_user_message_keeps_known_messages_and_wraps_others() -> None:
    assert user_message(ImageError("The file is empty.")) == "The file is empty."
    assert user_message(WeightsUnavailableError("Place the file here.")) == "Place the file here."
    assert user_message(ValueError("Choose at least one method.")) == "Choose at least one method."
    msg = user_message(RuntimeError("boom"))
    assert "RuntimeError" in msg and "previous results are kept" in msg
    assert FileNotFoundError in USER_ERRORS
