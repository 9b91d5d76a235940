"""iba_core.app.state: the shared network and its lock, a finished Per-Sample run."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from iba_core.app.inputs import ImageInput
from iba_core.app.state import RunRecord, SharedModel, Subject
from iba_core.per_sample import AttributionResult, BottleneckSettings, StepInfo


def test_shared_model_busy_holds_the_lock_and_restores_threads(monkeypatch) -> None:
    monkeypatch.setenv("IBA_TORCH_THREADS", "1")
    shared = SharedModel(network=object())  # the lock logic does not look at the model
    before = torch.get_num_threads()
    other_got_it = []
    with shared.busy() as network:
        assert network is shared.network and torch.get_num_threads() == 1
        with shared.busy():  # re-entrant for helpers that lock too
            pass
        t = threading.Thread(target=lambda: other_got_it.append(shared.lock.acquire(timeout=0.1)))
        t.start()
        t.join()
    assert other_got_it == [False]  # another session had to wait
    assert torch.get_num_threads() == before


def _threads_of_a_new_thread() -> int:
    """Torch's thread count as a thread started now sees it (OpenMP keeps a count per thread; a new thread,
    such as a new session's script thread, starts from the count set last anywhere in the process)."""
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    return seen[0]


def test_two_networks_interleaving_leave_the_thread_count_as_found(monkeypatch) -> None:
    """Network A starts, network B starts, A ends while B still runs, B ends (each in its session's thread): B
    runs with the app's count throughout, and afterwards the process has the count it had before. (Each
    network saving and restoring the count on its own left the app's count behind for good: B saved A's.)"""
    before = _threads_of_a_new_thread()
    app_count = 1 if before != 1 else 2
    monkeypatch.setenv("IBA_TORCH_THREADS", str(app_count))
    a, b = SharedModel(network=object()), SharedModel(network=object())
    a_started, b_started, a_ended = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def run_a() -> None:
        with a.busy():
            a_started.set()
            b_started.wait(5)
            seen["a"] = torch.get_num_threads()
        a_ended.set()

    def run_b() -> None:
        a_started.wait(5)
        with b.busy():
            b_started.set()
            a_ended.wait(5)
            seen["b after a ended"] = torch.get_num_threads()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"a": app_count, "b after a ended": app_count}
    assert _threads_of_a_new_thread() == before


def test_run_record_names_its_files_and_reports() -> None:
    from PIL import Image

    heat = np.full((224, 224), 0.01, np.float32)
    history = [StepInfo(step=1, steps=1, lambda_mean=np.zeros((7, 7)), bits_per_pixel=heat, ce=1.0, info=2.0,
                        beta_info=0.1, p_target=0.5)]
    result = AttributionResult(
        heatmap=heat, feature_bits=np.ones((7, 7)), lambda_mean=np.zeros((7, 7)), total_bits=float(heat.sum()),
        target=285, p_without=0.35, p_with=0.5, history=history, seconds=1.0,
        settings=BottleneckSettings(steps=1), feature_shape=(40, 7, 7),
    )
    record = RunRecord("my.photo.png", "efficientnet_lite0", "block3_2", "Egyptian cat", Image.new("RGB", (224, 224)),
                       result, "32 samples")
    assert record.file_stem == "iba_my.photo_efficientnet_lite0_block3_2"
    report = record.report()
    assert report["target"] == {"index": 285, "name": "Egyptian cat"} and report["statistics"] == "32 samples"
    assert report["layer"] == "block3_2" and report["settings"]["steps"] == 1


def _hold_lock(shared: SharedModel, seconds: float) -> tuple[threading.Thread, threading.Event]:
    """Another session: a thread that holds the network for `seconds`; returns it and a 'holding' event."""
    holding = threading.Event()

    def run() -> None:
        with shared.busy():
            holding.set()
            time.sleep(seconds)

    t = threading.Thread(target=run)
    t.start()
    assert holding.wait(5)
    return t, holding


def test_busy_reports_the_wait_while_another_thread_holds_the_network() -> None:
    shared = SharedModel(network=object())
    other, _ = _hold_lock(shared, 0.5)
    waits: list[float] = []
    start = time.monotonic()
    with shared.busy(on_wait=waits.append, poll_s=0.1) as network:
        assert network is shared.network
        waited = time.monotonic() - start
    other.join()
    assert waited >= 0.3
    assert waits[0] == 0.0 and len(waits) >= 3, waits  # at once, then every poll
    assert waits == sorted(waits) and waits[-1] <= waited
    assert shared.lock.acquire(blocking=False)  # released again
    shared.lock.release()


def test_busy_does_not_report_a_free_network_or_its_own_lock() -> None:
    shared = SharedModel(network=object())
    waits: list[float] = []
    with shared.busy(on_wait=waits.append):
        with shared.busy(on_wait=waits.append):  # the same session's helper: re-entrant, no wait
            pass
    assert waits == []
    assert shared.acquire() == 0.0
    shared.release()


def test_an_error_in_on_wait_ends_the_wait_without_the_lock() -> None:
    shared = SharedModel(network=object())
    other, _ = _hold_lock(shared, 0.3)

    class Stopped(Exception):
        pass

    def stop(seconds: float) -> None:
        raise Stopped  # e.g. Streamlit stopping the script while it waits

    try:
        with pytest.raises(Stopped):
            with shared.busy(on_wait=stop):
                raise AssertionError("must not get the network")
    finally:
        other.join()
    got = []
    t = threading.Thread(target=lambda: got.append(shared.lock.acquire(timeout=1)))
    t.start()
    t.join()
    assert got == [True], "the lock must not be left held"


def _second_session(shared: SharedModel, log: list[str], started: threading.Event) -> threading.Thread:
    """A thread that waits for the network (as another session's Per-Sample run would), logs its turn."""

    def run() -> None:
        started.set()
        with shared.busy():
            log.append("other")

    t = threading.Thread(target=run)
    t.start()
    return t


def _holding_thread(shared: SharedModel, release: threading.Event) -> threading.Thread:
    """Another session's run, started now: it waits for the network, then holds it until `release` is set."""

    def run() -> None:
        with shared.busy():
            release.wait(5)

    t = threading.Thread(target=run)
    t.start()
    return t


def _wait_until_waiting(shared: SharedModel) -> None:
    for _ in range(500):
        if shared._waiting:
            return
        time.sleep(0.005)
    raise AssertionError("the second session never waited")


def test_make_way_lets_a_waiting_session_go_first_between_steps(monkeypatch) -> None:
    """Long work calling make_way between its steps: a session that starts waiting during step 2 runs before step
    3, not after the last step (before make_way the whole request held the network)."""
    shared = SharedModel(network=object())
    monkeypatch.setattr(SharedModel, "SHARE_AFTER_S", 0.0)
    log: list[str] = []
    started = threading.Event()
    with shared.busy():
        for step in range(1, 6):
            log.append(f"step {step}")
            if step == 2:
                other = _second_session(shared, log, started)
                started.wait(5)
                _wait_until_waiting(shared)
            shared.make_way()
        assert shared.holds()
    other.join(5)
    assert log == ["step 1", "step 2", "other", "step 3", "step 4", "step 5"]
    assert not shared.holds() and shared.lock.acquire(blocking=False)
    shared.lock.release()


def test_make_way_keeps_the_network_when_nobody_waits_early_or_nested(monkeypatch) -> None:
    shared = SharedModel(network=object())
    with shared.busy():
        assert shared.make_way() == 0.0 and shared.holds()  # nobody waits
    log: list[str] = []
    started = threading.Event()
    with shared.busy():
        other = _second_session(shared, log, started)
        _wait_until_waiting(shared)
        monkeypatch.setattr(SharedModel, "SHARE_AFTER_S", 60.0)
        shared.make_way()  # held for less than SHARE_AFTER_S: no handoff yet
        monkeypatch.setattr(SharedModel, "SHARE_AFTER_S", 0.0)
        with shared.busy():  # nested: a helper's own hold cannot be given away halfway
            shared.make_way()
        log.append("mine")
    other.join(5)
    assert log == ["mine", "other"]


def test_a_stop_while_waiting_for_the_turn_again_leaves_no_lock_held(monkeypatch) -> None:
    """The person whose long request made way presses Stop while the other run goes: the wait ends with the
    exception, `busy` releases nothing it no longer holds, and the lock is free afterwards."""
    shared = SharedModel(network=object())
    monkeypatch.setattr(SharedModel, "SHARE_AFTER_S", 0.0)
    release_other = threading.Event()

    class Stopped(Exception):
        pass

    def stop(seconds: float) -> None:
        raise Stopped

    with pytest.raises(Stopped):
        with shared.busy():
            t = _holding_thread(shared, release_other)
            _wait_until_waiting(shared)
            try:
                shared.make_way(on_wait=stop)
            finally:
                release_other.set()
    t.join(5)
    assert not shared.holds() and shared.lock.acquire(blocking=False)
    shared.lock.release()


def test_a_failing_pause_gives_the_network_back_to_its_caller(monkeypatch) -> None:
    """A progress pause whose wait fails with an ordinary error (not a stop): the request that made way holds the
    network again before the error reaches it, since a caller that catches errors (MapCache.maps skips a failing
    method) goes on computing."""
    from iba_core.app.state import sharing

    shared = SharedModel(network=object())
    monkeypatch.setattr(SharedModel, "SHARE_AFTER_S", 0.0)
    release_other = threading.Event()

    def broken(seconds: float) -> None:
        release_other.set()
        raise ValueError("a page's message failed")

    with shared.busy():
        t = _holding_thread(shared, release_other)
        _wait_until_waiting(shared)
        with pytest.raises(ValueError):
            sharing(shared, None, broken)(1, 2, "step")
        assert shared.holds()
    t.join(5)
    assert not shared.holds() and shared.lock.acquire(blocking=False)
    shared.lock.release()


def test_run_record_keeps_timing_and_the_original() -> None:
    from PIL import Image

    heat = np.full((224, 224), 0.01, np.float32)
    result = AttributionResult(
        heatmap=heat, feature_bits=np.ones((7, 7)), lambda_mean=np.zeros((7, 7)), total_bits=float(heat.sum()),
        target=285, p_without=0.35, p_with=0.001, history=[], seconds=2.5,
        settings=BottleneckSettings(steps=0), feature_shape=(40, 7, 7),
    )
    original = Image.new("RGB", (451, 300))
    record = RunRecord("chelsea", "efficientnet_lite0", "block3_2", "Egyptian cat", Image.new("RGB", (224, 224)),
                       result, "32 samples", original=original, crop_box=(94, 19, 357, 281), stats_seconds=1.25)
    assert record.original is original and record.crop_box == (94, 19, 357, 281)
    other = RunRecord("chelsea", "efficientnet_lite0", "block3_2", "Egyptian cat", original, result, "32 samples")
    assert record.run_id != other.run_id
    results = record.report()["results"]
    assert results["seconds"] == 2.5 and results["statistics_seconds"] == 1.25
    assert results["bottleneck_lost_class"] is True


def test_subject_names_the_image_network_and_class(offline_model) -> None:
    from PIL import Image

    subject = Subject.of(ImageInput("cat.jpg", Image.new("RGB", (8, 8)), "0123456789abcdef"), offline_model, 285)
    assert subject == Subject("cat.jpg", offline_model.spec.title, offline_model.class_name(285), 285,
                              "0123456789abcdef")
    assert subject.caption == f"cat.jpg · {offline_model.spec.title} · explaining **{subject.class_name}** (#285)"
