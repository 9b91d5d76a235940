"""Issue #40, item 7, in folder runs: a box file that cannot be read, an inverted box or one outside the crop skips
that image's box scores with a warning naming the file, is counted by reason in the run's line and report, and the
other images are scored."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from bad_input_helpers import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import write_card, write_noise_images  # noqa: E402

#: img00 … img04 are 70 × 64: the 64-px crop drops 3 columns each side
GOOD = ("<annotation><size><width>70</width><height>64</height></size><object><name>x</name><bndbox><xmin>3</xmin>"
        "<ymin>0</ymin><xmax>35</xmax><ymax>64</ymax></bndbox></object></annotation>")
INVERTED = GOOD.replace("<xmin>3</xmin>", "<xmin>50</xmin>")  # xmin 50 > xmax 35
OUTSIDE = GOOD.replace("<xmin>3</xmin>", "<xmin>0</xmin>").replace("<xmax>35</xmax>", "<xmax>2</xmax>")


def _folder(tmp_path):
    images, boxes = tmp_path / "images", tmp_path / "boxes"
    write_noise_images(images, 5)
    boxes.mkdir()
    (boxes / "img00.xml").write_text(GOOD)
    (boxes / "img01.xml").write_text("")  # empty: no XML at all
    (boxes / "img02.xml").write_text(INVERTED)
    (boxes / "img03.xml").write_text(OUTSIDE)
    return images, boxes  # img04: no box file


def test_a_bad_box_file_is_named_counted_and_the_others_scored(tmp_path):
    card = write_card(tmp_path / "card", ["apple", "banana", "cherry"])
    images, boxes = _folder(tmp_path)
    out = tmp_path / "run"
    result = run_cli(["attribute", images, "--model", card, "--trust-code", "--out", out, "--methods", "gradient",
                      "--no-progress", "--metrics", "pointing", "--boxes", boxes])
    assert result.code == 0, result.err
    warnings = [line for line in result.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3  # the three bad files, each by name; a missing file is only counted
    assert any("img01.png" in w and "box file unreadable: img01.xml" in w for w in warnings)
    assert any("inverted or empty box: img02.xml" in w and "xmin 50" in w for w in warnings)
    assert any("box outside the crop: img03.xml" in w for w in warnings)
    assert "4 image(s) scored without a box" in result.err
    line = json.loads(result.out.strip().splitlines()[-1])
    assert line["rows"] == 5 and line["errors"] == 0
    assert line["boxes_skipped"] == {"box file unreadable": 1, "box outside the crop": 1, "inverted or empty box": 1,
                                     "no box file": 1}

    table = pd.read_parquet(out / "results.parquet").set_index("image")
    assert np.isfinite(table.loc["img00.png", ["pointing_hit", "energy_pointing", "box_share"]].astype(float)).all()
    others = table.drop(index="img00.png")
    assert others[["pointing_hit", "energy_pointing", "box_share"]].isna().all().all()
    assert pd.isna(table.loc["img00.png", "box_skipped"])
    assert table.loc["img04.png", "box_skipped"] == "no box file"
    assert table.loc["img02.png", "box_skipped"].startswith("inverted or empty box: img02.xml")

    # the report says the same, counted by reason
    from iba_core.app.dataset import metric_means, metric_notes
    from iba_core.runs.tables import open_run

    run = open_run(out)
    notes = " ".join(metric_notes(run.table))
    assert "4 image(s) scored without a box" in notes and "inverted or empty box (1)" in notes
    assert "img01.xml" in notes and "no box file (1)" in notes
    assert any("4 image(s) scored without a box" in s for s in metric_means(run).protocol)  # page and report


def test_a_run_whose_only_box_file_is_empty_says_why_its_pointing_is_blank(tmp_path):
    card = write_card(tmp_path / "card", ["apple", "banana", "cherry"])
    images, boxes = tmp_path / "images", tmp_path / "boxes"
    write_noise_images(images, 2)
    boxes.mkdir()
    (boxes / "img00.xml").write_text("")
    out = tmp_path / "run"
    result = run_cli(["attribute", images, "--model", card, "--trust-code", "--out", out, "--methods", "gradient",
                      "--no-progress", "--metrics", "pointing", "--boxes", boxes])
    assert result.code == 0, result.err
    assert "warning: img00.png is scored without a box: box file unreadable: img00.xml" in result.err

    from iba_core.app.dataset import empty_methods_sentence
    from iba_core.runs.tables import open_run

    said = empty_methods_sentence(open_run(out).table)  # no section of metric means: the report's top says it
    assert "Measured but empty for every image: pointing" in said
    assert "box file unreadable (1), no box file (1)" in said and "img00.xml" in said
