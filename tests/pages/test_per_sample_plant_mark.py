"""The Per-Sample page's "Plant a mark" (issue #42, item 3) through AppTest: after a run, one click plants a patch
bottom-right on the crop and shows the run without and with it side by side on one bits scale, with their
difference; the pair is the library's (the marked crop changes exactly the mark's box, both maps explain the run's
class), and it goes with the run it was made for."""
from __future__ import annotations

import numpy as np
import pytest

from page_helpers import assert_clean


def test_plant_a_mark_shows_both_maps_on_one_scale(open_page) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(2)
    at.button(key="ps_run_button").click().run()
    assert_clean(at)
    assert not [c for im in at.image for c in im.captions if c == "With the mark"]  # not before the click
    at.button(key="ps_plant_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record, pair = at.session_state["ps_run"], at.session_state["ps_planted"]
    captions = [c for im in at.image for c in im.captions]
    assert {"Without the mark", "With the mark", "With − without"} <= set(captions)
    # the mark sits bottom-right on the crop and changes exactly its box there
    x0, y0, x1, y1 = pair.placed.box
    side = record.cropped.width
    assert (x1, y1) == (side, side) and x1 - x0 == round(0.125 * side)
    changed = np.any(np.asarray(pair.marked_crop, np.int16) != np.asarray(record.cropped.convert("RGB"), np.int16),
                     axis=-1)
    rows, cols = np.nonzero(changed)
    assert (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1) == (x0, y0, x1, y1)
    assert pair.clean.target == pair.marked.target == record.result.target
    assert pair.top == pytest.approx(max(pair.clean.heatmap.max(), pair.marked.heatmap.max()))
    line = next(c.value for c in at.caption if c.value.startswith("Without → with the mark"))
    assert f"{pair.clean.total_bits:,.1f} → {pair.marked.total_bits:,.1f} bits" in line
    assert f"0 – {pair.top:.3g} bits / pixel" in line
    # a new run: the pair of the run before is not shown with it
    at.button(key="ps_run_button").click().run()
    assert_clean(at)
    assert "With the mark" not in [c for im in at.image for c in im.captions]
