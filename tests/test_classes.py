"""iba_core.classes: one resolver for class names and indices."""
from __future__ import annotations

import pytest

from iba_core.classes import resolve_class
from iba_core.errors import UserError

CATEGORIES = ["tabby", "tiger cat", "Egyptian cat", "tiger"]


def test_resolve_class_accepts_index_name_and_unique_part() -> None:
    assert resolve_class(CATEGORIES, 2) == 2
    assert resolve_class(CATEGORIES, "3") == 3
    assert resolve_class(CATEGORIES, "TIGER") == 3  # exact name wins over partial matches
    assert resolve_class(CATEGORIES, "egypt") == 2


def test_resolve_class_explains_what_does_not_fit() -> None:
    with pytest.raises(UserError, match="fits 2 classes: tiger cat, Egyptian cat") as err:
        resolve_class(CATEGORIES, "cat")  # ambiguous: the candidates are listed
    assert "tabby" not in str(err.value)
    with pytest.raises(UserError, match="No class named 'zebra'"):
        resolve_class(CATEGORIES, "zebra")
    with pytest.raises(UserError, match="out of range 0…3"):
        resolve_class(CATEGORIES, 4)
    with pytest.raises(UserError):
        resolve_class(CATEGORIES, "  ")


def test_signed_index_text_is_an_index_not_a_name() -> None:
    for target in ("-1", " -1 ", -1):
        with pytest.raises(UserError, match=r"Class index -1 is out of range 0…3\."):
            resolve_class(CATEGORIES, target)
    assert resolve_class(CATEGORIES, "+2") == 2
    with pytest.raises(UserError, match="negative"):
        resolve_class([], "-3")  # no class list: still no negative index


def test_a_name_that_several_classes_share_needs_its_index() -> None:
    names = ["crane", "tabby", "Crane", "crane hook"]
    with pytest.raises(UserError, match=r"2 classes are named 'crane' \(indices 0, 2\); give the index") as err:
        resolve_class(names, "crane")  # never silently the first
    assert "crane hook" not in str(err.value)
    assert resolve_class(names, "2") == 2 and resolve_class(names, "hook") == 3
