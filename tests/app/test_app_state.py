"""iba_core.app.state: the shared network and its lock, a finished Per-Sample run."""
from __future__ import annotations

import threading

import numpy as np
import torch

from iba_core.app.state import RunRecord, SharedModel
from iba_core.per_sample import AttributionResult, BottleneckSettings, StepInfo


def test_shared_model_busy_holds_the_lock_and_restores_threads(monkeypatch) -> None:
    monkeypatch.setenv("IBA_TORCH_THREADS", "1")
    shared = SharedModel(loaded=object())  # the lock logic does not look at the model
    before = torch.get_num_threads()
    other_got_it = []
    with shared.busy() as loaded:
        assert loaded is shared.loaded and torch.get_num_threads() == 1
        with shared.busy():  # re-entrant for helpers that lock too
            pass
        t = threading.Thread(target=lambda: other_got_it.append(shared.lock.acquire(timeout=0.1)))
        t.start()
        t.join()
    assert other_got_it == [False]  # another session had to wait
    assert torch.get_num_threads() == before


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
