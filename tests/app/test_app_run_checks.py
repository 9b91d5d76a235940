"""The app side of issue #42 without Streamlit: the comparison's report and sentence name the runs' folders as a
visitor may see them (never the server's layout above the allowed folder), the counts sentence holds the library's
counts, and the self-test form's marks: an uploaded PNG is checked as the command line checks a file, a border takes
no place, and an unknown kind is refused in one sentence."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import load_card, write_card, write_noise_images  # noqa: E402

from iba_core.app import run_compare as rc  # noqa: E402
from iba_core.app import self_test as st_core  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.methods import get_method  # noqa: E402
from iba_core.runs import finish_run, list_images, open_run, run_folder  # noqa: E402
from iba_core.selftest.marks import PLACES, PNG  # noqa: E402
from iba_core.trust import Trust  # noqa: E402


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Gradient and Saliency runs of a tiny card network over the same four noise images, in root/allowed."""
    root = tmp_path_factory.mktemp("run_checks") / "allowed"
    network = load_card(write_card(root / "card", ["apple", "banana", "cherry"]))
    write_noise_images(root / "images", 4)
    runs = []
    for key in ("gradient", "saliency"):
        top, items = list_images(root / "images", class_index=network.class_index)
        run_folder(network, items, [get_method(key)], root / f"run_{key}", root=top)
        finish_run(root / f"run_{key}")
        runs.append(open_run(root / f"run_{key}"))
    return root, runs


def test_the_report_and_sentence_name_the_runs_as_a_visitor_sees_them(two_runs) -> None:
    root, (run_a, run_b) = two_runs
    paired = rc.compare_runs(run_a, run_b, None, None)
    visitor = Trust(server_paths=(root.resolve(),))
    html = rc.report_bytes(paired, visitor).decode("utf-8")
    assert str(root.parent) not in html  # the server's folders above the allowed one stay unseen
    assert "allowed/run_gradient" in html and "allowed/run_saliency" in html
    assert str(run_a.path) in rc.report_bytes(paired, Trust.local()).decode("utf-8")  # the owner sees the path
    sentence = rc.runs_sentence(paired, visitor)
    assert sentence.startswith("A: allowed/run_gradient (Gradient") and str(root.parent) not in sentence
    assert rc.counts_sentence(paired).startswith("4 images matched · 0 only in A · 0 only in B")
    cells, scales = rc.top_cells(paired, visitor, n=2)
    assert len(cells) == 2 and cells[0].image == paired.table["image"].iloc[0]
    assert cells[0].photo is not None  # the image lies in the allowed folder
    assert "different units" not in scales and f"±{paired.scale:.3g}" in scales


def _png(alpha: int) -> bytes:
    buf = io.BytesIO()
    pixels = np.zeros((20, 30, 4), np.uint8)
    pixels[5:15, 5:25] = (0, 0, 255, alpha)
    Image.fromarray(pixels, "RGBA").save(buf, format="PNG")
    return buf.getvalue()


def test_an_uploaded_png_mark_is_checked_and_named_by_its_upload() -> None:
    mark = st_core.form_mark(PNG, "top-left", None, 0.5, upload=("logo.png", _png(255)))
    assert mark.kind == PNG and mark.png == "logo.png" and mark.where == PLACES["top-left"]
    assert mark.png_bytes == _png(255) and mark.opacity == 0.5
    with pytest.raises(UserError, match="transparent everywhere"):
        st_core.form_mark(PNG, "top-left", None, 1.0, upload=("empty.png", _png(0)))
    with pytest.raises(UserError, match="Upload the mark's PNG"):
        st_core.form_mark(PNG, "top-left", None, 1.0)


def test_a_border_takes_no_place_and_an_unknown_kind_is_refused() -> None:
    border = st_core.form_mark("border", "top-left", None, 1.0)  # the form's place is left out for a border
    assert border.kind == "border"
    with pytest.raises(UserError, match="is not one of"):
        st_core.form_mark("stamp", "top-left", None, 1.0)
    with pytest.raises(UserError, match="Type the folder on the server the self-test writes"):
        st_core.selftest_folder("  ", Trust.local())


def test_the_self_tests_budget_counts_four_runs_of_each_image(two_runs) -> None:
    """Clean and marked copies, for the own class and for the class the mark pushes toward (unknown before the
    test): four runs of each image are held to the budget, so a budget for three is refused before anything runs;
    without a sample every image of the folder counts."""
    from iba_core.app.folder_job import image_cost
    from iba_core.app.state import SharedModel

    root, _ = two_runs
    shared = SharedModel(load_card(root / "card" / "tiny.toml"))
    per_image = image_cost(shared.network, [get_method("saliency")], ()).passes
    assert per_image > 0
    with pytest.raises(UserError, match=r"A self-test of 4 images \(4 runs of each: clean and marked, for its own "
                                        r"class and for the class the mark may push toward\) would cost") as err:
        st_core.run_self_test(shared.network, str(root / "images"), str(root / "st"), st_core.form_mark(
            "patch", "top-left", None, 1.0), ["saliency"], None, shared=shared, trust=Trust.local(),
            budget=3 * 4 * per_image)
    assert f"about {4 * 4 * per_image:,} network passes" in str(err.value)
    assert not (root / "st").exists()
