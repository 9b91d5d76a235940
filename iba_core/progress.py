"""The one progress-callback signature of the library: progress(done, total, label).

`done` of `total` units are finished (images, methods, cells, levels); `label` says what is being
worked on (or "done" at the end). Views turn it into a progress bar (app) or a tqdm bar (CLI).
"""
from __future__ import annotations

from typing import Callable

ProgressFn = Callable[[int, int, str], None]
