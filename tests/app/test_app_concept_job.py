"""Concept discovery started from the Dataset page (issue #41, item 2): the network the run was not made with is
said in one sentence and refused, an image folder outside the allowed ones is refused before any work, Stop ends the
job at its next progress step (not as an error) and gives the network back, and a second session is refused politely
while the first one's job goes."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

import iba_core.concepts
from iba_core.app import concept_job
from iba_core.app.state import SharedModel
from iba_core.errors import UserError
from iba_core.trust import NotTrustedError, Trust


def fake_run(tmp_path, network="card:tiny", weights="tiny.pth"):
    """What the job reads of an opened run: its folder, run.json's network and weights, its image folder."""
    return SimpleNamespace(path=tmp_path, source=tmp_path / "images",
                           info={"network": network, "weights": weights})


@pytest.fixture
def shared():
    return SharedModel(SimpleNamespace(key="card:tiny", weights_id="tiny.pth"), source="tiny.toml")


@pytest.fixture
def endless(monkeypatch):
    """A find_concepts that reports progress until it is stopped (or 30 s pass); records that it ended."""
    steps, ended = [], threading.Event()

    def fake(network, run_dir, settings=None, progress=None):
        try:
            for i in range(3000):
                progress(i + 1, 3000, "class-0")
                steps.append(i)
                threading.Event().wait(0.01)
        finally:
            ended.set()

    monkeypatch.setattr(iba_core.concepts, "find_concepts", fake, raising=False)
    monkeypatch.setattr(concept_job, "_JOB", None)
    yield steps, ended
    job = concept_job.current_job()
    if job is not None:
        job.cancel()
        job.wait(30)


def test_a_network_the_run_was_not_made_with_is_said_and_refused(tmp_path, shared) -> None:
    assert concept_job.network_mismatch(shared.network, fake_run(tmp_path)) == ""
    for run in (fake_run(tmp_path, network="resnet50"), fake_run(tmp_path, weights="other.pth")):
        sentence = concept_job.network_mismatch(shared.network, run)
        assert "is not the one this run was made with" in sentence and sentence.count(". ") == 0
        with pytest.raises(UserError, match="is not the one this run was made with"):
            concept_job.start_concept_job(shared, run, None, Trust.local())
    assert concept_job.current_job() is None or concept_job.current_job().run_dir != tmp_path


def test_an_image_folder_outside_the_allowed_ones_is_not_read(tmp_path, shared, endless) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    with pytest.raises(NotTrustedError, match="outside the folders this app may read"):
        concept_job.start_concept_job(shared, fake_run(tmp_path), None, Trust(server_paths=(allowed.resolve(),)))
    assert concept_job.current_job() is None


def test_stop_ends_the_job_at_its_next_step_and_gives_the_network_back(tmp_path, shared, endless) -> None:
    steps, ended = endless
    job = concept_job.start_concept_job(shared, fake_run(tmp_path), None, Trust.local(), owner="me")
    while not steps:
        assert job.running, job.error
        threading.Event().wait(0.01)
    assert concept_job.start_concept_job(shared, fake_run(tmp_path), None, Trust.local(), owner="me") is job
    with pytest.raises(concept_job.ConceptRunBusy, match="Another session's concept discovery is going"):
        concept_job.start_concept_job(shared, fake_run(tmp_path), None, Trust.local(), owner="someone else")
    other = tmp_path / "other_run"
    with pytest.raises(concept_job.ConceptRunBusy, match="Your concept discovery for another run is going"):
        concept_job.start_concept_job(shared, fake_run(other), None, Trust.local(), owner="me")
    job.cancel()
    assert job.wait(30) and ended.is_set()
    assert job.error is None and job.label.startswith("stopped") and len(steps) < 3000
    assert job.progress()[0] == len(steps)
    assert shared.lock.acquire(timeout=1)  # the network is free again
    shared.lock.release()
