"""The planted-mark self-test (issue #42): does a model react to a cue planted on a folder's images, and would each
attribution method's maps show it?

- `marks`: the marks (text, patch, border, a user's PNG), placed at the crop's coordinates, and the copies at the
  network's resize geometry;
- `scores`: the measures as formulas on arrays: the model's reaction, the localisation ratio, the AUROC, the ranking;
- `selftest`: the test itself (`self_test` → `SelfTest`): copies, folder runs, measures, files.

Names are imported on first use.
"""
from __future__ import annotations

from ..lazy import lazy_exports

#: public name → module (in this package) that defines it
_PUBLIC = {
    "Mark": "marks", "Placed": "marks", "make_mark": "marks", "place_mark": "marks",
    "Reaction": "scores", "MethodScore": "scores", "localisation_ratio": "scores", "mass_auroc": "scores",
    "SelfTest": "selftest", "self_test": "selftest", "open_self_test": "selftest",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
