"""One conversion of results to plain JSON values (numbers, strings, lists, dicts)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np


def jsonable(value: Any) -> Any:
    """`value` with numpy/torch scalars and arrays, paths, tuples and dataclasses made JSON-friendly.

    Non-finite floats become None (JSON has no NaN); anything else unknown becomes its str().
    """
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if type(value).__module__ == "torch" and hasattr(value, "tolist"):  # tensors, without importing torch
        return jsonable(value.tolist())
    return str(value)
