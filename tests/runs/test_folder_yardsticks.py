"""The field's metrics in folder runs (issue #29.4): per-map columns in the table, part of the run's identity,
resumed like the maps, the same numbers as the library on the stored map, pointing only where a box is."""
import json

import numpy as np
import pandas as pd
import pytest

from iba_core import open_run
from iba_core.cli import main
from iba_core.methods import get_method
from iba_core.metrics.common import scoring_model, stable_seed
from iba_core.metrics.insertion_deletion import protocol_from
from iba_core.metrics.yardsticks import COLUMNS, YardstickOptions, columns_of, with_seed, yardstick_columns
from iba_core.runs import FolderSettings, RunFolderError, finish_run, list_images, run_folder
from iba_core.runs.store import read_parts
from run_fixtures import write_noise_images

METRICS = ("insertion", "deletion", "road", "pointing")
#: 512 px a step on the 64 × 64 crop: 9 points a curve
OPTIONS = YardstickOptions(protocol=protocol_from("rise", step=512), road_removed=(25, 50, 75))
SHARES = ["insertion_auc", "deletion_auc", "road_morf", "road_lerf", "energy_pointing"]  # each in [0, 1]


def _boxes(folder):
    """A box file for img00 only (the left half of its 70 × 64 image)."""
    folder.mkdir()
    (folder / "img00.xml").write_text("<annotation><size><width>70</width><height>64</height></size><object>"
                                      "<name>x</name><bndbox><xmin>3</xmin><ymin>0</ymin><xmax>35</xmax>"
                                      "<ymax>64</ymax></bndbox></object></annotation>")
    return folder


def test_a_run_with_metrics_writes_their_columns_resumes_and_agrees_with_the_library(tiny_net, twelve, tmp_path):
    root, items = list_images(twelve, class_index=tiny_net.class_index)
    boxes = _boxes(tmp_path / "boxes")
    settings = FolderSettings(batch_images=1, boxes=boxes, metrics=METRICS, yardsticks=OPTIONS)
    out = tmp_path / "run"
    labels = []

    def stop_after_four(done, total, label):
        labels.append(label)
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_folder(tiny_net, items, [get_method("gradient")], out, settings, root=root, progress=stop_after_four)
    assert len(read_parts(out)) == 4
    assert any("Gradient · insertion · " in label for label in labels)  # the progress names each metric
    assert any("Gradient · deletion · " in label for label in labels)
    assert any("· road ·" in label for label in labels)
    summary = run_folder(tiny_net, items, [get_method("gradient")], out,
                         FolderSettings(batch_images=5, boxes=boxes, metrics=METRICS, yardsticks=OPTIONS), root=root)
    assert summary.skipped == 4 and summary.rows == 8
    table = finish_run(out).set_index("image")
    assert len(table) == 12 and table.index.is_unique
    ok, bad = table[table["error"].isna()], table[table["error"].notna()]
    assert len(ok) == 10 and bad[list(COLUMNS)].isna().all().all()  # an unusable file has no metric either
    assert np.isfinite(ok[list(columns_of(["insertion", "deletion", "road"]))].to_numpy(float)).all()
    assert ok[SHARES[:4]].apply(lambda c: c.between(0, 1)).all().all()
    assert np.isfinite(ok.loc["img00.png", ["pointing_hit", "energy_pointing"]].to_numpy(float)).all()
    assert ok.loc["img00.png", "pointing_hit"] in (0.0, 1.0)
    assert 0 <= ok.loc["img00.png", "energy_pointing"] <= 1 and 0 <= ok.loc["img00.png", "ehr"] <= 1
    assert ok.drop(index="img00.png")[["pointing_hit", "energy_pointing", "ehr"]].isna().all().all()  # no box file
    info = json.loads((out / "run.json").read_text())["settings"]["yardsticks"]
    assert info["metrics"] == list(METRICS) and info["protocol"]["step"] == 512 and info["road_removed"] == [25, 50, 75]

    # the numbers are the library's on the map the run stores, with the image's and method's seed
    run = open_run(out)
    row = run.table[run.table["image"] == "img03.png"].iloc[0]
    x = tiny_net.preprocess(tiny_net.preprocess.load(run.image_path(row)))
    options = with_seed(OPTIONS, stable_seed(OPTIONS.seed, "img03.png", "gradient"))
    again = yardstick_columns(scoring_model(tiny_net, "fp32"), x, run.heatmap(row), int(row["target"]), METRICS,
                              options=options)
    for column in COLUMNS[:5]:  # the pointing scores need no network
        assert row[column] == pytest.approx(again[column], rel=1e-4, abs=1e-7), column

    # batches of one and of five gave the same numbers as one run in batches of four
    whole = tmp_path / "whole"
    run_folder(tiny_net, items, [get_method("gradient")], whole,
               FolderSettings(batch_images=4, boxes=boxes, metrics=METRICS, yardsticks=OPTIONS), root=root)
    other = finish_run(whole).set_index("image")
    np.testing.assert_allclose(other.loc[ok.index, list(COLUMNS)].to_numpy(float),
                               ok[list(COLUMNS)].to_numpy(float), rtol=1e-4, atol=1e-7)


def test_the_table_has_a_column_for_every_metric_column():
    from iba_core.runs.store import COLUMNS as TABLE, YARDSTICK_COLUMNS

    assert [c for c in TABLE if c in COLUMNS] == list(COLUMNS) == list(YARDSTICK_COLUMNS)
    assert all(TABLE[c] == "float64" for c in COLUMNS)


def test_the_cli_measures_refuses_mixing_and_says_what_to_give(tiny_card, tmp_path, capsys):
    images = tmp_path / "images"
    write_noise_images(images, 3)
    out = tmp_path / "run"
    base = ["attribute", str(images), "--model", str(tiny_card), "--trust-code", "--out", str(out), "--methods",
            "gradient", "--no-progress"]
    assert main([*base, "--metrics", "deletion", "road", "--step", "1024", "--removed", "50"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["metrics"] == ["deletion", "road"] and line["rows"] == 3
    table = pd.read_parquet(out / "results.parquet")
    assert table[["deletion_auc", "road_combined"]].notna().all().all() and table["insertion_auc"].isna().all()
    info = json.loads((out / "run.json").read_text())["settings"]["yardsticks"]
    assert info["protocol"]["name"] == "rise, modified" and info["road_removed"] == [50]

    assert main([*base, "--metrics", "deletion", "road", "--step", "1024", "--removed", "50"]) == 0  # a resume
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["new_rows"] == 0
    assert main(base) == 1  # without the metrics: refused, saying which to give
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "measures deletion, road for every row (this run: none)" in err
    assert "--metrics deletion road" in err
    assert main([*base, "--metrics", "deletion", "road", "--removed", "50"]) == 1  # another step
    err = capsys.readouterr().err
    assert "measured deletion, road another way (protocol.name rise, modified (this run: rise); protocol.step 1024 " \
           "(this run: 224))" in err
    assert main([*base, "--metrics", "pointing"]) == 1
    assert "Pointing game needs the objects' boxes" in capsys.readouterr().err
    assert main([*base, "--metrics", "insertion", "--blur-kernel", "4"]) == 1
    assert "The blur kernel must be an odd number of pixels" in capsys.readouterr().err
    # adding a metric measures it for the rows already there (the same protocol)
    assert main([*base, "--metrics", "insertion", "deletion", "road", "--step", "1024", "--removed", "50"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["new_rows"] == 0 and line["rows_given_metrics"] == 3 and line["rows"] == 3
    assert pd.read_parquet(out / "results.parquet")["insertion_auc"].between(0, 1).all()


def test_a_rerun_that_adds_metrics_measures_them_for_the_rows_already_there(tiny_net, twelve, tmp_path):
    """A run made without metrics, then with deletion, then with deletion and ROAD (interrupted once): every row
    ends with both, equal to a run that measured them from the start; a metric left out later is refused."""
    root, items = list_images(twelve, class_index=tiny_net.class_index)
    out, fresh = tmp_path / "run", tmp_path / "fresh"
    gradient = [get_method("gradient")]
    run_folder(tiny_net, items[:6], gradient, out, root=root)
    first = finish_run(out)
    assert first["deletion_auc"].isna().all()
    one = FolderSettings(metrics=("deletion",), yardsticks=OPTIONS)
    summary = run_folder(tiny_net, items, gradient, out, one, root=root)  # 6 more images, and the first 6 measured
    assert summary.rows == 6 and summary.measured == 4  # of the first six, bands.npy and broken.png are errors
    assert finish_run(out)["deletion_auc"].notna().sum() == 10
    both = FolderSettings(metrics=("deletion", "road"), yardsticks=OPTIONS)
    seen = []

    def stop_after_three(done, total, label):
        seen.append(label)
        if len(seen) > 3 and label.startswith("adding"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_folder(tiny_net, items, gradient, out, FolderSettings(metrics=("deletion", "road"), yardsticks=OPTIONS,
                                                                   part_rows=1), root=root, progress=stop_after_three)
    assert any(label.startswith("adding road · Gradient · ") for label in seen)
    again = run_folder(tiny_net, items, gradient, out, both, root=root)  # the rows left are measured now
    assert again.rows == 0 and 0 < again.measured < 10
    table = finish_run(out).set_index("image")
    run_folder(tiny_net, items, gradient, fresh, both, root=root)
    want = finish_run(fresh).set_index("image")
    columns = ["deletion_auc", "road_morf", "road_lerf", "road_combined"]
    assert table.index.is_unique and len(table) == 12
    np.testing.assert_allclose(table.loc[want.index, columns].to_numpy(float), want[columns].to_numpy(float),
                               rtol=1e-4, atol=1e-7)
    assert set(table.loc[table["error"].isna(), "metrics"]) == {"deletion road"}
    assert json.loads((out / "run.json").read_text())["settings"]["yardsticks"]["metrics"] == ["deletion", "road"]
    with pytest.raises(RunFolderError, match=r"measures deletion, road for every row \(this run: deletion\)"):
        run_folder(tiny_net, items, gradient, out, one, root=root)
    with pytest.raises(RunFolderError, match="measured deletion, road another way"):
        run_folder(tiny_net, items, gradient, out, FolderSettings(metrics=("deletion", "road", "insertion")),
                   root=root)
