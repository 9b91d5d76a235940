"""Starting a folder run on the Dataset page (issue #28, points 8 and 9) through AppTest: Enter in a text field does
not start it (only the button does), a second press while the session's own run goes shows that run as progress
(not an error), another session's run is refused politely with its progress, and the time is said before the run
(one image timed) and while it goes (the pace of the last batch, and torchrun for thousands of images)."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import write_noise_images  # noqa: E402

from iba_core.app import folder_job  # noqa: E402
from iba_core.runs import folder as folder_run  # noqa: E402
from iba_core.trust import Trust  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """A folder the app may read (IBA_DATA_DIRS) holding 8 small images."""
    root = tmp_path_factory.mktemp("start_run")
    write_noise_images(root / "images", 8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root))
        yield root


@pytest.fixture
def slow_run(monkeypatch):
    """A folder run whose first batch takes 0.5 s more and whose later batches wait until the test ends, so the run
    is still going while the test looks; no run is left from another test, and none goes on afterwards."""
    real = folder_run.run_folder
    gate, calls = threading.Event(), []

    def slow(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.5)
        else:
            gate.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(folder_run, "run_folder", slow)
    monkeypatch.setattr(folder_job, "_JOB", None)
    yield
    gate.set()
    job = folder_job.current_job()
    if job is not None:
        job.cancel()
        job.wait(120)


def dataset_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/dataset.py").run()
    assert_clean(at)
    return at


def fill(at: AppTest, data_root: Path, run_name: str) -> AppTest:
    """The start form's fields typed (a form keeps them until it is submitted), Saliency as the method."""
    at.text_input(key="ds_source").input(str(data_root / "images"))
    at.text_input(key="ds_out").input(str(data_root / run_name))
    at.multiselect(key="ds_methods").set_value(["saliency"])
    return at


def infos(at: AppTest) -> list[str]:
    """The st.info texts, without the escapes that keep paths from reading as Markdown."""
    return [i.value.replace("\\", "") for i in at.info]


def progress_texts(at: AppTest) -> list[str]:
    return [p.proto.text.replace("\\", "") for p in at.get("progress")]


def test_enter_in_a_text_field_does_not_start_the_run_only_the_button_does(data_root, slow_run) -> None:
    at = dataset_page()
    form = next(f for f in at.get("form") if f.proto.form.form_id == "ds_start_form")
    assert form.proto.form.enter_to_submit is False  # the browser's Enter commits the field, it does not submit
    fill(at, data_root, "run_enter").run()
    assert_clean(at)
    assert folder_job.current_job() is None  # fields typed, the page run again: nothing started
    fill(at, data_root, "run_enter").button(key="ds_start_button").click().run()
    assert_clean(at)
    job = folder_job.current_job()
    assert job is not None and job.run_dir == (data_root / "run_enter").resolve()


def test_a_second_press_shows_the_own_run_as_progress_not_an_error(data_root, slow_run) -> None:
    at = fill(dataset_page(), data_root, "run_own")
    at.button(key="ds_start_button").click().run()
    job = folder_job.current_job()
    assert job is not None and job.running
    fill(at, data_root, "run_own").button(key="ds_start_button").click().run()  # pressed again while it goes
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert folder_job.current_job() is job
    assert any("Your folder run into" in t and "its progress is at the top" in t for t in infos(at)), infos(at)
    assert any(t.startswith("Your folder run into") for t in progress_texts(at)), progress_texts(at)
    assert at.button(key="ds_stop")  # the own run can be stopped


def test_another_sessions_run_is_refused_politely_with_its_progress(data_root, slow_run) -> None:
    other = folder_job.start_folder_job(
        _shared_of_page(), str(data_root / "images"), str(data_root / "run_other"), ["saliency"],
        trust=Trust(server_paths=(data_root.resolve(),)), owner="another browser session", batch=1)
    at = fill(dataset_page(), data_root, "run_mine")
    at.button(key="ds_start_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert folder_job.current_job() is other
    refusal = [t for t in infos(at) if t.startswith("Another folder run is going on this server (")]
    assert refusal and "please start yours when it has finished" in refusal[0], infos(at)
    assert any(t.startswith("Another session's folder run") for t in progress_texts(at)), progress_texts(at)
    assert not [b for b in at.button if b.key == "ds_stop"]  # not theirs to stop


def test_the_time_is_estimated_before_the_run_and_measured_while_it_goes(data_root, slow_run) -> None:
    at = fill(dataset_page(), data_root, "run_timed")
    at.button(key="ds_estimate_button").click().run()
    assert_clean(at)
    assert folder_job.current_job() is None  # the estimate starts nothing
    fill(at, data_root, "run_timed")
    estimate = [t for t in infos(at) if t.startswith("Estimate: one image took")]
    assert estimate and "8 images take about" in estimate[0], infos(at)
    assert any("torchrun --nproc-per-node" in c.value for c in at.caption)
    at.button(key="ds_start_button").click().run()
    job = folder_job.current_job()
    deadline = time.monotonic() + 120
    while job.done < 2:  # the first batch (two images on the page) is done
        assert time.monotonic() < deadline and job.running, job.error
        time.sleep(0.05)
    at.run()
    assert_clean(at)
    assert job.running  # the second batch waits for the test
    texts = progress_texts(at)  # the time left at the measured pace, and the road for thousands of images
    assert any("left (" in t and "s per image, measured on the last batch" in t for t in texts), texts
    assert any("torchrun --nproc-per-node" in c.value for c in at.caption)


def _shared_of_page():
    """The network the Dataset page shows by default, as the app shares it between sessions."""
    at = dataset_page()
    from iba_core.app.state import load_shared

    return load_shared(at.selectbox(key="network").value)


def _in_page_order(at: AppTest) -> list:
    """Every element and block of the page, in the order the browser lays them out (top to bottom)."""
    out = []

    def walk(node) -> None:
        out.append(node)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return out


def test_a_started_runs_progress_comes_before_the_long_start_form(data_root, slow_run) -> None:
    """Issue #38, item 7: after Start the progress sat below the whole start form, out of view at 1280 × 800; it
    comes first, above the form's fields and its buttons, and the page scrolls to it."""
    at = fill(dataset_page(), data_root, "run_in_view")
    at.button(key="ds_start_button").click().run()
    assert_clean(at)
    assert folder_job.current_job() is not None
    order = _in_page_order(at)
    progress = [i for i, node in enumerate(order) if node.type == "progress"]
    assert progress, "no progress shown after Start"

    def place(key: str) -> int:
        return next(i for i, node in enumerate(order) if getattr(node, "key", None) == key)

    assert progress[0] < place("ds_source") < place("ds_methods") < place("ds_start_button")
    # and the page, scrolled down to the button, is scrolled up to it (tests/test_browser_dataset_start.py: in view)
    assert any(".st-key-ds_job" in h.proto.body and "scrollIntoView" in h.proto.body for h in at.get("html"))


def test_a_runs_statistics_folder_is_chosen_on_the_form_within_the_allowed_folders(data_root, slow_run,
                                                                                   tmp_path) -> None:
    """Issue #38, item 7: a folder run's statistics folder could only be changed by adding the network again under
    another name; the start form takes it (a visitor names only folders under the allowed ones), and the run
    records it."""
    import json

    outside = tmp_path / "elsewhere"  # not under IBA_DATA_DIRS
    write_noise_images(outside, 2)
    at = fill(dataset_page(), data_root, "run_stats_outside")
    field = next(t for t in at.text_input if t.key.startswith("ds_stats_images_"))
    assert field.placeholder  # says where the statistics come from when it is left empty
    field.input(str(outside))
    at.button(key="ds_start_button").click().run()
    assert_clean(at)
    assert folder_job.current_job() is None  # refused before any work, in words
    assert any("statistics image folder" in e.value for e in at.error), [e.value for e in at.error]

    write_noise_images(data_root / "stats", 2)
    at = fill(dataset_page(), data_root, "run_stats")
    next(t for t in at.text_input if t.key.startswith("ds_stats_images_")).input(str(data_root / "stats"))
    at.button(key="ds_start_button").click().run()
    assert_clean(at)
    job = folder_job.current_job()
    assert job is not None and job.stats_images == str((data_root / "stats").resolve())
    deadline = time.monotonic() + 120
    while not (data_root / "run_stats" / "run.json").is_file():
        assert time.monotonic() < deadline and job.running, job.error
        time.sleep(0.05)
    info = json.loads((data_root / "run_stats" / "run.json").read_text())
    assert info["settings"]["stats_images"] == str((data_root / "stats").resolve())
