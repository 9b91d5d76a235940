"""The field's metrics on the Dataset page and in the report (issue #29.4): a run that measured them shows their
means per method and per class with each column's direction and the protocol; the HTML report (page and command)
holds the same table; a run without them shows none."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import make_shortcut_run  # noqa: E402

from iba_core import open_run  # noqa: E402
from iba_core.app.dataset import metric_means  # noqa: E402
from iba_core.metrics.insertion_deletion import protocol_from  # noqa: E402
from iba_core.metrics.yardsticks import YardstickOptions  # noqa: E402
from iba_core.runs import FolderSettings  # noqa: E402
from pages.widgets.text import plain  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180
METRICS = ("insertion", "deletion", "road")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A run of Gradient and Saliency on the shortcut data set with insertion, deletion and ROAD (inside a folder the
    app may read: IBA_DATA_DIRS)."""
    root = tmp_path_factory.mktemp("dataset_metrics")
    options = YardstickOptions(protocol=protocol_from("rise", step=512), road_removed=(25, 50, 75))
    run_dir, _ = make_shortcut_run(root / "data_root", per_class=3, methods=["gradient", "saliency"],
                                   settings=FolderSettings(metrics=METRICS, yardsticks=options))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root / "data_root"))
        yield run_dir


def opened(run_dir: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/dataset.py").run()
    at.text_input(key="ds_path").input(str(run_dir))
    at.button(key="ds_open_button").click().run()
    assert_clean(at)
    return at


def frames_with(at: AppTest, *columns: str) -> list:
    return [d.value for d in at.dataframe if set(columns) <= set(d.value.columns)]


def test_the_page_shows_the_metric_means_per_method_and_class_with_their_protocol(measured) -> None:
    at = opened(measured)
    means = metric_means(open_run(measured))
    assert means.columns == ["insertion_auc", "deletion_auc", "road_morf", "road_lerf", "road_combined"]
    by_method = [f for f in frames_with(at, "method", "maps", "insertion_auc") if "class" not in f.columns]
    assert len(by_method) == 1 and sorted(by_method[0]["method"]) == ["Gradient", "Saliency"]
    table = open_run(measured).table
    for _, row in by_method[0].iterrows():  # each mean is the mean of the run's rows of that method
        key = {"Gradient": "gradient", "Saliency": "saliency"}[row["method"]]
        mine = table[table["method"] == key]
        assert row["maps"] == len(mine) == 6
        for column in means.columns:
            assert row[column] == pytest.approx(mine[column].mean(), rel=1e-9)
    by_class = frames_with(at, "class", "method", "insertion_auc")
    assert len(by_class) == 1 and len(by_class[0]) == 4  # 2 classes × 2 methods
    assert set(by_class[0]["class"]) == {"marked", "object"}
    sentence = protocol_from("rise", step=512).describe()
    assert any(plain(sentence) in c.value and "↓: lower is better" in c.value for c in at.caption)
    # the table of rows has the metric columns the run measured, not the ones it did not
    rows = frames_with(at, "image", "insertion_auc")
    assert rows and "pointing_hit" not in rows[0].columns and np.isfinite(rows[0]["deletion_auc"]).all()


def test_the_report_from_the_page_and_the_command_holds_the_means(measured, tmp_path, capsys) -> None:
    from iba_core.cli import main

    at = opened(measured)
    at.button(key="ds_report_button").click().run()
    assert_clean(at)
    page = at.session_state["ds_report"].decode("utf-8")
    out = tmp_path / "report.html"
    assert main(["report", str(measured), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["metrics"] == ["insertion_auc", "deletion_auc", "road_morf", "road_lerf", "road_combined"]
    means = metric_means(open_run(measured))
    for html in (page, out.read_text(encoding="utf-8")):
        section = html.split('id="metrics"', 1)[1].split("<h2>", 1)[0]
        assert "insertion_auc ↑" in section and "deletion_auc ↓" in section and "road_morf ↓" in section
        assert "Gradient" in section and "Saliency" in section and "<h3>Per class</h3>" in section
        assert protocol_from("rise", step=512).describe().replace("'", "&#x27;") in section
        assert f"{means.by_method.loc[0, 'deletion_auc']:.3g}" in section


def test_a_run_without_metrics_has_no_metric_section(tmp_path) -> None:
    from run_fixtures import load_card, write_card, write_noise_images

    from iba_core.app.dataset_report import metric_report
    from iba_core.methods import get_method
    from iba_core.runs import finish_run, list_images, run_folder

    write_noise_images(tmp_path / "images", 2)
    network = load_card(write_card(tmp_path / "card", ["a", "b", "c"]))
    root, items = list_images(tmp_path / "images")
    run_folder(network, items, [get_method("gradient")], tmp_path / "run", root=root)
    finish_run(tmp_path / "run")
    run = open_run(tmp_path / "run")
    assert metric_means(run) is None and metric_report(None) is None
    assert run.table["insertion_auc"].isna().all()  # the column is there, empty
