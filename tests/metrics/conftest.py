"""Fixtures for the metric tests; the tiny networks live in metric_helpers.py."""
from __future__ import annotations

import pytest

from metric_helpers import SmallConvNet


@pytest.fixture
def small_net() -> SmallConvNet:
    return SmallConvNet()
