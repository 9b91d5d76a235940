"""The Dataset page's "compare with another run" (issue #42, item 1) through AppTest: the shortcut run (A) compared
with a run of another method over the same folder less one image plus one (B): the counts the library finds, the
table most changed first, the maps of the most changed images beside their difference, the per-class means and the
report; a run over other files is refused in one sentence while A stays open; a folder outside the allowed ones
is refused before it is read."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, opened_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import load_card, make_shortcut_run, write_noise_images  # noqa: E402

from iba_core import open_run  # noqa: E402
from iba_core.runs.paired import pair_runs  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180


def _gradient_run(root: Path, images: Path, out: Path) -> Path:
    """A finished Gradient run of the shortcut network over `images` into `out`."""
    from iba_core.methods import get_method
    from iba_core.runs import finish_run, list_images, run_folder

    network = load_card(root / "card" / "tiny.toml")
    top, items = list_images(images, class_index=network.class_index)
    run_folder(network, items, [get_method("gradient")], out, root=top)
    finish_run(out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A (the shortcut run, Per-Sample Bottleneck), B (Gradient over the same folder without marked/00.png and
    with object/99.png), C (Gradient over noise images of other names), inside the allowed folder."""
    root = tmp_path_factory.mktemp("dataset_compare") / "data_root"
    run_a, _ = make_shortcut_run(root, per_class=4)
    shutil.copytree(root / "data", root / "data_b")
    (root / "data_b" / "marked" / "00.png").unlink()
    Image.fromarray(np.full((64, 64, 3), 90, np.uint8)).save(root / "data_b" / "object" / "99.png")
    write_noise_images(root / "data_c" / "object", 3, prefix="other")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root))
        yield {"a": run_a, "b": _gradient_run(root, root / "data_b", root / "run_b"),
               "c": _gradient_run(root, root / "data_c", root / "run_c")}


def compared(run_a: Path, run_b: Path | str) -> AppTest:
    at = opened_run(APP, run_a, TIMEOUT)
    at.text_input(key="ds_cmp_path").input(str(run_b))
    at.button(key="ds_cmp_button").click().run()
    assert_clean(at)
    return at


def test_two_runs_compared_counts_table_maps_and_report(runs) -> None:
    at = compared(runs["a"], runs["b"])
    assert not at.error, [e.value for e in at.error]
    paired = pair_runs(open_run(runs["a"]), open_run(runs["b"]))
    counts = [i.value for i in at.info if "matched" in i.value]
    assert counts and counts[0].startswith("7 images matched · 1 only in A · 1 only in B")
    assert paired.counts["matched"] == 7
    # units differ (bits against a gradient): said in a note, and the maps compared as shares
    assert any("different units" in w.value for w in at.warning)
    table = next(d.value for d in at.dataframe if "delta_p" in d.value.columns)
    assert list(table["image"]) == list(paired.table["image"])  # most changed first, as the library orders them
    assert "marked/00.png" not in set(table["image"]) and "object/99.png" not in set(table["image"])
    captions = [c for im in at.image for c in im.captions]
    assert captions.count("B − A") == 6 and captions.count("A") == 6  # the six most changed images
    assert sum("changed prediction" in c.value for c in at.caption) == 2  # one caption per class of A
    at.button(key="ds_cmp_report_button").click().run()
    assert_clean(at)
    report = at.session_state["_ds_cmp_report"][1].decode("utf-8")
    assert report.startswith("<!DOCTYPE html>") and "data:image/png;base64," in report


def test_runs_over_other_files_are_refused_in_one_sentence_and_the_run_stays(runs) -> None:
    at = compared(runs["a"], runs["c"])
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "matches" in errors[0] and "none in common" in errors[0]
    assert "Traceback" not in errors[0]
    assert not any("matched ·" in i.value for i in at.info)  # no counts of a refused comparison
    assert at.session_state["ds_run"].path == open_run(runs["a"]).path  # run A stays open
    assert any("Members: " in c.value for c in at.caption)  # and its page is still drawn


def test_a_folder_outside_the_allowed_ones_is_refused(runs, tmp_path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    at = compared(runs["a"], outside)
    assert [e.value for e in at.error] and "outside the folders this app may read" in at.error[0].value
    assert "ds_cmp_run" not in at.session_state
