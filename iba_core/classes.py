"""Class names: one resolver for every place a user names a class (CLI --target, app inputs, label files)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def resolve_class(categories: Sequence[str], target: int | str) -> int:
    """Class index from an index, a digit string, an exact (case-insensitive) name, or a part of a name
    that fits exactly one class. ValueError, with the candidates, when nothing or several fit."""
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        idx = int(target)
    elif isinstance(target, str) and target.strip().isdigit():
        idx = int(target.strip())
    else:
        idx = None
    if idx is not None:
        if categories and not 0 <= idx < len(categories):
            raise ValueError(f"Class index {idx} is out of range 0…{len(categories) - 1}.")
        return idx
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"Give a class as an index or a name, not {target!r}.")
    wanted = target.strip().lower()
    lowered = [name.lower() for name in categories]
    if wanted in lowered:
        return lowered.index(wanted)
    matches = [i for i, name in enumerate(lowered) if wanted in name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(categories[i] for i in matches[:8]) + (" …" if len(matches) > 8 else "")
        raise ValueError(f"{target!r} fits {len(matches)} classes: {shown}. Type more of the name.")
    raise ValueError(f"No class named {target!r}.")
