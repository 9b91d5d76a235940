"""Small helpers for the page tests."""
from __future__ import annotations

import io
import time

import numpy as np
from PIL import Image
from streamlit.testing.v1 import AppTest


def assert_clean(at: AppTest) -> None:
    """No uncaught exception (st.exception or a script error) in the last run."""
    assert not at.exception, [e.value for e in at.exception]


def timed_run(node) -> tuple[AppTest, float]:
    """Run the app (from an AppTest or a widget just interacted with); return it and the seconds taken."""
    start = time.perf_counter()
    at = node.run()
    return at, time.perf_counter() - start


def png_of_chelsea() -> bytes:
    """Real photo bytes, as a user would upload them."""
    import skimage.data

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(skimage.data.chelsea())).save(buf, format="PNG")
    return buf.getvalue()
