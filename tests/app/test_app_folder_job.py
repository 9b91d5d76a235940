"""The Dataset page's folder run (iba_core.app.folder_job, issue #28 points 8 and 9): a session's own run is given
back on a second press, another session's is refused politely with its progress; the run lets a waiting page take
the network between two batches; one image is timed before a run, and the pace of the last batch gives the time
left while it goes."""
from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import load_card, write_card, write_folder_with_bad_files  # noqa: E402

from iba_core.app import folder_job  # noqa: E402
from iba_core.app.state import SharedModel  # noqa: E402
from iba_core.methods import get_method  # noqa: E402
from iba_core.runs import folder as folder_run  # noqa: E402
from iba_core.trust import Trust  # noqa: E402


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SharedModel:
    card = write_card(tmp_path_factory.mktemp("card"), ["apple", "banana", "cherry"])
    return SharedModel(load_card(card))


@pytest.fixture
def slow_batches(monkeypatch):
    """Each batch of a folder run takes at least 0.4 s more (under the lock), so a test can act while one runs."""
    real = folder_run.run_folder

    def slow(*args, **kwargs):
        time.sleep(0.4)
        return real(*args, **kwargs)

    monkeypatch.setattr(folder_run, "run_folder", slow)
    monkeypatch.setattr(folder_job, "_JOB", None)


def start(shared, tmp_path, owner, **kwargs):
    images = tmp_path / "images"
    if not images.exists():
        write_folder_with_bad_files(images)
    return folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["saliency"],
                                       trust=Trust(server_paths=(tmp_path.resolve(),)), owner=owner, **kwargs)


def test_a_second_press_gives_back_the_own_run_and_another_session_is_told_its_progress(shared, tmp_path,
                                                                                       slow_batches):
    job = start(shared, tmp_path, "me", batch=1, limit=4)
    try:
        assert start(shared, tmp_path, "me", batch=1, limit=4) is job  # the own run, not a second one or an error
        # Even with a form that would not start (no methods): the press shows the own run.
        assert folder_job.start_folder_job(shared, "", "", [], trust=Trust(), owner="me") is job
        with pytest.raises(folder_job.FolderRunBusy) as refused:
            start(shared, tmp_path, "someone else", batch=1, limit=4)
        message = refused.value.message
        assert message.startswith("Another folder run is going on this server (")
        assert "of 4 images" in message or "listing its images" in message  # how far it is
        assert "please start yours when it has finished" in message
    finally:
        job.cancel()
        assert job.wait(60)


def test_a_page_takes_the_network_between_two_batches_of_a_running_job(shared, tmp_path, slow_batches):
    """A page waiting for the lock while a batch runs gets it before the next batch, not after the whole run."""
    job = start(shared, tmp_path, "me", batch=1, limit=4)
    deadline = time.monotonic() + 60
    while job.label == "listing the images…" or job.total == 0:  # the first batch has begun
        assert time.monotonic() < deadline
        time.sleep(0.02)
    seen: dict = {}

    def page() -> None:
        with shared.busy() as network:  # as a page's attribution does
            seen["done"] = job.done
            x = network.preprocess.normalise(network.preprocess.crop(
                network.preprocess.load(next((tmp_path / "images").glob("[!b]*.png")))))
            seen["map"] = get_method("saliency").attribute(network, x, 0).values

    waiter = threading.Thread(target=page)
    waiter.start()
    waiter.join(60)
    assert job.wait(60) and job.error is None, job.error
    assert seen["map"].ndim == 2
    assert seen["done"] < job.total == 4, seen  # between batches, not once all four were done


def test_the_time_left_comes_from_the_last_batch_while_the_run_goes(shared, tmp_path, slow_batches):
    job = start(shared, tmp_path, "me", batch=1, limit=4)
    deadline = time.monotonic() + 60
    while job.done < 1:
        assert time.monotonic() < deadline and job.running, job.error
        time.sleep(0.02)
    pace = job.seconds_per_image()
    text = folder_job.job_text(job)
    job.wait(60)
    assert pace is not None and pace >= 0.4  # the slowed batch of one image
    assert "left (" in text and "s per image, measured on the last batch" in text


def test_one_image_is_timed_before_a_run_and_methods_without_statistics_are_named(shared, tmp_path,
                                                                                  monkeypatch):
    """Issue #38, item 7: on a freshly added network (no statistics yet) the estimate said "no method could be
    timed"; now a bottleneck is timed with a stand-in prior, and its statistics' cost is said beside it."""
    # a cache of its own: statistics an earlier test estimated for the same tiny card would be found (and timed)
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    from iba_core.feature_stats import find_run_stats, run_stats_source

    images = write_folder_with_bad_files(tmp_path / "images")
    trust = Trust(server_paths=(tmp_path.resolve(),))
    calls = []
    real = type(get_method("saliency")).attribute_batch

    def counted(self, network, x, targets):
        calls.append(tuple(x.shape))
        return real(self, network, x, targets)

    monkeypatch.setattr(type(get_method("saliency")), "attribute_batch", counted)
    iba = get_method("iba_10")
    network = shared.network
    assert find_run_stats(network, network.spec.default_layer) is None  # fresh: nothing estimated yet
    estimate = folder_job.time_one_image(shared, str(images), ["saliency", iba.key], trust=trust)
    assert len(calls) == 1 and calls[0][0] == 1  # one image, once
    assert estimate.seconds > 0 and estimate.images == 12
    assert estimate.methods == ("Saliency", iba.name) and estimate.stand_in == (iba.name,) and not estimate.untimed
    assert find_run_stats(network, network.spec.default_layer) is None  # timing it estimated no statistics
    text = estimate.text()
    assert "no method could be timed" not in text and "12 images take about" in text
    assert f"the feature statistics of {iba.name} are estimated and kept" in text and "standard-normal prior" in text
    # the statistics still to estimate are given a time too: one forward pass per sample, timed here
    assert estimate.stats_samples == run_stats_source(network)[1] > 0 and estimate.forward_seconds > 0
    assert f"for {estimate.stats_samples} samples" in text
    # only a bottleneck: timed all the same (it said "no method could be timed")
    alone = folder_job.time_one_image(shared, str(images), [iba.key], trust=trust)
    assert alone.methods == (iba.name,) and alone.seconds > 0 and "no method could be timed" not in alone.text()
    assert folder_job.time_one_image(shared, str(images), ["saliency"], limit=3, trust=trust).images == 3


def test_durations_read_as_a_person_says_them():
    assert [folder_job.duration(s) for s in (40, 600, 9000)] == ["40 s", "10 min", "2.5 h"]


def test_the_page_run_measures_the_chosen_metrics_and_the_estimate_times_them(shared, tmp_path, monkeypatch):
    """Issue #29.4: metrics are off unless chosen; chosen, the estimate measures their cost on the one image and the
    background run fills their columns; the pointing game (it needs boxes) is refused in words."""
    monkeypatch.setattr(folder_job, "_JOB", None)
    images = write_folder_with_bad_files(tmp_path / "images", good=3)
    trust = Trust(server_paths=(tmp_path.resolve(),))
    plain = folder_job.time_one_image(shared, str(images), ["saliency"], trust=trust)
    assert plain.metric_seconds == 0 and "metrics" not in plain.text()
    estimate = folder_job.time_one_image(shared, str(images), ["saliency"], trust=trust, metrics=["deletion", "road"])
    assert 0 < estimate.metric_seconds <= estimate.seconds and estimate.metrics == ("deletion", "road")
    assert "of which the metrics (deletion, road) take" in estimate.text()
    cost = folder_job.metric_cost_text(shared.network, ["deletion", "road"])
    assert "forward passes per image and method" in cost and "64 × 64 crop" in cost
    assert folder_job.metric_cost_text(shared.network, []) == ""
    with pytest.raises(folder_job.UserError, match="Pointing game needs the objects' boxes"):
        folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust,
                                    metrics=["pointing"])
    job = folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust,
                                      metrics=["deletion", "road"])
    assert job.wait(120) and job.error is None, job.error
    from iba_core import open_run

    table = open_run(tmp_path / "run").table
    ok = table[table["error"].isna()]
    assert len(ok) == 3 and ok[["deletion_auc", "road_morf", "road_lerf", "road_combined"]].notna().all().all()
    assert ok["deletion_auc"].between(0, 1).all() and table["insertion_auc"].isna().all()


def test_one_image_beyond_the_budget_is_refused_before_the_run_starts(shared, tmp_path, monkeypatch):
    """A folder run takes its turns batch by batch (PAGE_BATCH_IMAGES images), so the budget holds one batch's passes:
    every method's map and the metrics on it, per image. Above the budget nothing starts (no run folder) and the
    sentence says the batch's cost; "Estimate time", which runs one image, is refused for an image above it."""
    monkeypatch.setattr(folder_job, "_JOB", None)
    images = write_folder_with_bad_files(tmp_path / "images", good=2)
    trust = Trust(server_paths=(tmp_path.resolve(),))
    methods = [get_method("saliency"), get_method("iba_10")]
    cost = folder_job.image_cost(shared.network, methods, ("deletion",))
    crop = shared.network.preprocess.crop_size
    assert cost.parts == (("maps", 2 + 201), ("metrics", 2 * (crop * crop // 224 + (crop * crop % 224 > 0) + 1)))
    with pytest.raises(folder_job.UserError, match=re.escape(f"One image of this run would cost {cost.describe()}")):
        folder_job.time_one_image(shared, str(images), ["saliency", "iba_10"], trust=trust, metrics=["deletion"],
                                  budget=cost.passes - 1)  # "Estimate time" runs one image: refused as the run is
    batch = cost.times(folder_job.PAGE_BATCH_IMAGES)  # a job holds the network for a batch of images
    with pytest.raises(folder_job.UserError, match=re.escape(f"One batch of 2 images of this run would cost "
                                                             f"{batch.describe()}")):
        folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["saliency", "iba_10"], trust=trust,
                                    metrics=["deletion"], budget=batch.passes - 1)
    assert not (tmp_path / "run").exists() and folder_job.current_job() is None
    job = folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["saliency"], trust=trust,
                                      budget=batch.passes)
    assert job.wait(120) and job.error is None, job.error
