"""The Dataset page's state (iba_core.app.dataset): filters, a folder run in the background (progress, one per
server, paths under the trust rules, the network's lock), the report's pictures."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import load_card, write_card, write_folder_with_bad_files  # noqa: E402

from iba_core import open_run  # noqa: E402
from iba_core.app import dataset as ds  # noqa: E402
from iba_core.app import dataset_gallery as gallery  # noqa: E402
from iba_core.app import folder_job  # noqa: E402
from iba_core.app.folder_job import start_folder_job  # noqa: E402
from iba_core.app.state import SharedModel  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.runs.highlights import BITS_UNIT  # noqa: E402
from iba_core.runs.store import as_table  # noqa: E402
from iba_core.trust import NotTrustedError, Trust  # noqa: E402


def hand_table() -> pd.DataFrame:
    rows = [
        {"image": "a.png", "method": "iba_10", "class_name": "cat", "correct": True, "total_bits": 5.0,
         "border_share": 0.7, "map_index": 0},
        {"image": "b.png", "method": "iba_10", "class_name": "dog", "correct": False, "total_bits": 9.0,
         "border_share": 0.1, "map_index": 1},
        {"image": "c.png", "method": "saliency", "class_name": "cat", "correct": True, "total_bits": None,
         "border_share": 0.3, "map_index": 2},
        {"image": "d.png", "method": "iba_10", "error": "not a readable image", "map_index": -1},
    ]
    return as_table([{**r, "rank": 0} for r in rows])


def test_filters_pick_rows_by_class_correct_method_and_range():
    table = hand_table()
    images = lambda f: list(ds.filter_rows(table, f)["image"])  # noqa: E731
    assert images(ds.RowFilter()) == ["a.png", "b.png", "c.png"]  # error rows apart
    assert images(ds.RowFilter(classes=("cat",))) == ["a.png", "c.png"]
    assert images(ds.RowFilter(correct="incorrect")) == ["b.png"]
    assert images(ds.RowFilter(methods=("saliency",))) == ["c.png"]
    assert images(ds.RowFilter(ranges=(("total_bits", 4.0, 6.0),))) == ["a.png"]  # NaN bits drop out
    assert images(ds.RowFilter(ranges=(("border_share", 0.25, 1.0),), correct="correct")) == ["a.png", "c.png"]
    assert list(ds.error_rows(table)["image"]) == ["d.png"]
    assert ds.value_range(table, "total_bits") == (5.0, 9.0) and ds.value_range(table, "box_share") is None
    assert list(ds.flagged_rows(table)["image"]) == ["a.png"]  # border share ≥ BORDER_FLAG
    with pytest.raises(UserError, match="Choose one of"):
        ds.filter_rows(table, ds.RowFilter(correct="maybe"))


def test_a_run_without_labels_says_so_once():
    table = hand_table()
    assert "label" not in table or table["label"].isna().all()
    assert "has a label" in ds.label_note(table) and "class folders" in ds.label_note(table)
    labelled = table.assign(label=[1.0, 2.0, None, None])
    assert ds.label_note(labelled) == ""


def test_job_text_gives_the_time_left_at_the_pace_of_the_last_batch():
    class Job:
        started, finished = 100.0, None

        def progress(self):
            return 2, 8, "images 3–4: b.png"

        def seconds_per_image(self):
            return 5.0  # the last batch: 5 s per image, so 6 left take about 30 s

    import time as clock

    job = Job()
    job.started = clock.time() - 10.0
    text = folder_job.job_text(job)
    assert text.startswith("2 / 8 images · images 3–4: b.png · 10 s") and "about 30 s left" in text
    job.finished = job.started + 40.0
    assert "left" not in folder_job.job_text(job)


def test_map_png_states_its_scale_below_the_map():
    values = np.zeros((28, 28), dtype=np.float32)
    values[0, 0] = 3.0
    from PIL import Image
    import io

    picture = Image.open(io.BytesIO(gallery.map_png(values, "bits / pixel", size=96)))
    # 96 px is too narrow for a legible legend: the map grows 3× (blocks kept), the legend goes under it
    assert picture.width == 288 and picture.height > 288
    assert np.asarray(picture.convert("RGB"))[0, 0].sum() > np.asarray(picture.convert("RGB"))[287, 287].sum()


@pytest.fixture(scope="module")
def tiny_shared(tmp_path_factory):
    card = write_card(tmp_path_factory.mktemp("card"), ["apple", "banana", "cherry"])
    return SharedModel(load_card(card))


def test_a_background_run_reports_progress_holds_the_lock_and_writes_the_run(tiny_shared, tmp_path, monkeypatch):
    images = write_folder_with_bad_files(tmp_path / "images")
    taken = []
    busy = SharedModel.busy

    def recording(self, on_wait=None, poll_s=None):
        taken.append(True)
        return busy(self, on_wait, poll_s)

    monkeypatch.setattr(SharedModel, "busy", recording)
    trust = Trust(server_paths=(tmp_path.resolve(),))
    job = start_folder_job(tiny_shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust, batch=5)
    assert job.wait(120) and job.error is None, job.error
    assert job.progress()[:2] == (12, 12) and job.label == "finished"
    assert len(taken) == 3  # one turn of the network's lock per batch of 5: other pages run between batches
    table = open_run(tmp_path / "run").table
    assert len(table) == 12 and table["error"].notna().sum() == 2
    assert "12 / 12 images" in folder_job.job_text(job)


def test_a_background_run_is_refused_outside_the_allowed_folders_and_while_another_runs(tiny_shared, tmp_path,
                                                                                         monkeypatch):
    (tmp_path / "images").mkdir()
    trust = Trust(server_paths=((tmp_path / "allowed").resolve(),))
    with pytest.raises(NotTrustedError, match="outside the folders this app may read"):
        start_folder_job(tiny_shared, str(tmp_path / "images"), str(tmp_path / "allowed" / "run"), ["saliency"],
                         trust=trust)

    class Running:
        running, run_dir = True, tmp_path / "other"

        def progress(self):
            return 3, 10, "x"

    monkeypatch.setattr(folder_job, "_JOB", Running())
    anywhere = Trust(server_paths=(tmp_path.resolve(),))
    with pytest.raises(UserError, match=r"going on this server \(3 of 10 images"):
        start_folder_job(tiny_shared, str(tmp_path / "images"), str(tmp_path / "run"), ["saliency"],
                         trust=anywhere)
    monkeypatch.setattr(folder_job, "_JOB", None)
    with pytest.raises(UserError, match="at least one attribution method"):
        start_folder_job(tiny_shared, str(tmp_path / "images"), str(tmp_path / "run"), [], trust=anywhere)


def test_opening_a_run_folder_checks_the_trust_rules_first(tmp_path):
    with pytest.raises(NotTrustedError):
        ds.open_run_folder(str(tmp_path), Trust(server_paths=((tmp_path / "x").resolve(),)))
    with pytest.raises(UserError, match="is not a run folder"):
        ds.open_run_folder(str(tmp_path), Trust(server_paths=(tmp_path.resolve(),)))


def test_a_damaged_run_opens_with_what_is_missing_and_a_background_resume_heals_it(tiny_shared, tmp_path):
    from iba_core.runs.store import MAPS, part_names, read_parts

    images = write_folder_with_bad_files(tmp_path / "images")
    trust = Trust(server_paths=(tmp_path.resolve(),))
    job = start_folder_job(tiny_shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust, batch=5)
    assert job.wait(120) and job.error is None, job.error
    run_dir = tmp_path / "run"
    name = next(n for n in part_names(run_dir) if (run_dir / MAPS / f"{n}.npz").exists())
    lost = set(read_parts(run_dir, [name])["image"])
    (run_dir / MAPS / f"{name}.npz").write_bytes(b"")  # a chunk emptied by a power cut
    run = ds.open_run_folder(str(run_dir), trust)
    assert set(run.table["image"]) == {i.name for i in images.iterdir()} - lost
    assert run.missing.startswith(f"1 part of this run is damaged ({name}: its map file differs from its checksum)")
    assert f"the rows of {len(lost)} images ({', '.join(sorted(lost)[:3])}" in run.missing  # the first three named
    job = start_folder_job(tiny_shared, str(images), str(run_dir), ["saliency"], trust=trust, batch=5)
    assert job.wait(120) and job.error is None, job.error
    rows = read_parts(run_dir)
    assert len(rows) == 12 and rows["image"].is_unique  # exactly the damaged rows were redone
    run = ds.open_run_folder(str(run_dir), trust)
    assert run.missing is None and len(run.table) == 12


def test_maps_not_in_bits_are_never_labelled_bits(tiny_shared, tmp_path, monkeypatch):
    """A saliency-only run: each gallery legend names the map's own values (|attribution|), the view's note says
    its maps are not in bits; a bottleneck's legend is bits per pixel (a walkthrough saw '0.422 bits / pixel')."""
    from iba_core.render import overlays

    images = write_folder_with_bad_files(tmp_path / "images")
    trust = Trust(server_paths=(tmp_path.resolve(),))
    job = start_folder_job(tiny_shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust, batch=5)
    assert job.wait(120) and job.error is None, job.error
    run = ds.open_run_folder(str(tmp_path / "run"), trust)
    rows = run.table[run.table["error"].isna()].head(3)
    labels = []
    real = overlays.with_legend  # the legend names the values (drawn after the map and any outline)
    monkeypatch.setattr(overlays, "with_legend", lambda *a, **k: labels.append(k["label"]) or real(*a, **k))
    cells = gallery.gallery(run, rows, trust, gallery.page_scale(run, rows), with_links=False)
    assert len(cells) == 3 and labels == ["|attribution|"] * 3
    note = gallery.scale_note(run, rows, gallery.page_scale(run, rows))
    assert "bits per pixel" not in note and "not in bits" in note
    assert gallery.map_label({"iba_10": BITS_UNIT}, "iba_10") == "bits / pixel"
    mixed = pd.concat([rows, rows.assign(method="iba_10")])
    run.info["methods"]["iba_10"] = {"unit": BITS_UNIT, "name": "Per-Sample"}
    assert gallery.scale_note(run, mixed, 0.5).startswith("One colour scale for the bottleneck maps of this view: 0 – 0.5 "
                                                   "bits per pixel")


def test_the_bits_scale_never_stretches_maps_that_hold_almost_nothing():
    """page_scale: the largest bits per pixel among the rows, but at least a typical map's mean bits per pixel
    (the run's upper quartile of totals over the map's pixels): a flat map of a few bits is drawn dark, not as a
    uniformly bright square; a concentrated few-bits map above that floor keeps its own top."""

    class HandRun:
        info = {"methods": {"iba": {"unit": BITS_UNIT}}}

        def __init__(self, maps):
            self.maps = maps
            self.table = pd.DataFrame({"image": [f"{k}.png" for k in range(len(maps))], "method": "iba",
                                       "total_bits": [float(m.sum()) for m in maps], "error": None})

        def heatmap(self, row):
            return self.maps[int(row.name)]

    ordinary = [np.full((10, 10), 1000.0 / 100) for _ in range(6)]  # 1,000 bits: 10 bits per pixel
    flat = np.full((10, 10), 0.05)  # 5 bits spread evenly
    run = HandRun(ordinary + [flat])
    few = run.table.iloc[[6]]
    assert gallery.page_scale(run, few) == pytest.approx(10.0, rel=1e-6)  # the typical mean, not 0.05
    spot = np.zeros((10, 10))
    spot[0, 0] = 40.0  # a few bits on one pixel: its own top lies above the floor
    run = HandRun(ordinary + [spot])
    assert gallery.page_scale(run, run.table.iloc[[6]]) == pytest.approx(40.0, rel=1e-6)


def test_the_busy_message_names_no_folder_of_the_other_visitors_run(tiny_shared, tmp_path, monkeypatch):
    """Issue #40, item 5: a second visitor was told the running run's folder on the server; now only how far it
    is (served: IBA_DATA_DIRS set, no loopback address)."""
    (tmp_path / "images").mkdir()
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))

    class Running:
        running, run_dir, owner = True, tmp_path / "someone" / "secret_run", "another session"

        def progress(self):
            return 3, 10, "x"

    monkeypatch.setattr(folder_job, "_JOB", Running())
    with pytest.raises(folder_job.FolderRunBusy) as busy:
        start_folder_job(tiny_shared, str(tmp_path / "images"), str(tmp_path / "run"), ["saliency"],
                         trust=Trust.for_app(), owner="me")
    assert "3 of 10 images" in busy.value.message
    assert str(tmp_path) not in busy.value.message and "secret_run" not in busy.value.message
