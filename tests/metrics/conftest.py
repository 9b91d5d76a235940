"""Fixtures for the metric tests; the tiny networks live in metric_helpers.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from metric_helpers import SmallConvNet  # noqa: E402


@pytest.fixture
def small_net() -> SmallConvNet:
    return SmallConvNet()
