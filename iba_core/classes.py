"""Class names: one resolver for every place a user names a class (CLI --target, app inputs, label files)."""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from .errors import UserError, quoted

#: A class given by its index: digits, optionally signed (so "-1" is an index out of range, not a name).
INDEX_TEXT = re.compile(r"^[+-]?\d+$")
#: The most digits a class index is read with.
MAX_INDEX_DIGITS = 18
#: The longest part of a typed target a message repeats.
SHOWN_TARGET = 60


def _shown(text: str) -> str:
    return quoted(text, SHOWN_TARGET)


def resolve_class(categories: Sequence[str], target: int | str) -> int:
    """Class index from an index (an integer or a digit string, signed ones included), an exact
    (case-insensitive) name, or a part of a name that fits exactly one class. UserError (a ValueError),
    with the candidates, when nothing or several fit; a name that several classes share needs its index."""
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        idx = int(target)
    elif isinstance(target, str) and INDEX_TEXT.match(target.strip()):
        digits = target.strip().lstrip("+-")
        if len(digits) > MAX_INDEX_DIGITS:  # int() refuses 4,300 digits; no network has this many classes
            raise UserError(f"Class index {_shown(target.strip())} is out of range"
                            f"{f' 0…{len(categories) - 1}' if categories else ''}.")
        idx = int(target.strip())
    else:
        idx = None
    if idx is not None:
        if categories and not 0 <= idx < len(categories):
            raise UserError(f"Class index {idx} is out of range 0…{len(categories) - 1}.")
        if idx < 0:
            raise UserError(f"Class index {idx} is negative; class indices start at 0.")
        return idx
    if not isinstance(target, str) or not target.strip():
        raise UserError(f"Give a class as an index or a name, not {_shown(str(target))}.")
    wanted = target.strip().lower()
    lowered = [name.lower() for name in categories]
    exact = [i for i, name in enumerate(lowered) if name == wanted]
    if len(exact) == 1:
        return exact[0]
    if exact:  # e.g. ImageNet's two classes named "crane" (the bird, the machine)
        raise UserError(f"{len(exact)} classes are named {_shown(target.strip())} (indices "
                         f"{', '.join(map(str, exact))}); give the index of the one you mean.")
    matches = [i for i, name in enumerate(lowered) if wanted in name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(categories[i] for i in matches[:8]) + (" …" if len(matches) > 8 else "")
        raise UserError(f"{_shown(target)} fits {len(matches)} classes: {shown}. Type more of the name.")
    raise UserError(f"No class named {_shown(target)}.")
