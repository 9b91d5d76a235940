"""Small helpers for the page tests."""
from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
from PIL import Image
from streamlit.testing.v1 import AppTest


def assert_clean(at: AppTest) -> None:
    """No uncaught exception (st.exception or a script error) in the last run."""
    assert not at.exception, [e.value for e in at.exception]


def clean(at: AppTest) -> AppTest:
    """`at` after checking its last run showed no exception and no st.error."""
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    return at


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


def opened_run(app: Path | str, run_dir: Path | str, timeout: float = 180) -> AppTest:
    """The app (`app` is app.py's path) on the Dataset page with `run_dir` opened, checked clean at each step."""
    at = AppTest.from_file(str(app), default_timeout=timeout)
    at.run()
    at.switch_page("pages/dataset.py").run()
    assert_clean(at)
    at.text_input(key="ds_path").input(str(run_dir))
    at.button(key="ds_open_button").click().run()
    assert_clean(at)
    return at
