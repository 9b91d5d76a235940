"""Fixtures for the bad-input tests; plain helpers (run_cli, page_errors, assert_one_sentence) are in
bad_input_helpers.py next to this file.

The suite-wide conftest already gives every session a private cache (IBA_CACHE_DIR) and small statistics.
"""
from __future__ import annotations

from typing import Callable

import pytest
from streamlit.testing.v1 import AppTest

from bad_input_helpers import new_app, page_errors


@pytest.fixture
def open_page() -> Callable[[str], AppTest]:
    """Switch a fresh app to pages/<name>.py and run it; fails on any exception shown in the app."""

    def go(name: str) -> AppTest:
        at = new_app()
        at.switch_page(f"pages/{name}.py").run()
        page_errors(at)
        return at

    return go
