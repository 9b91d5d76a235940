"""Fixtures for the readout tests: an untrained readout for the offline model, crops, a tiny image folder."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from readout_helpers import tiny_folder


@pytest.fixture(scope="session")
def readout(offline_model):
    """An untrained readout for the offline model with statistics from a few sample-photo crops."""
    from iba_core.readout import ReadoutBottleneck, TrainConfig, compute_statistics

    torch.manual_seed(0)
    rb = ReadoutBottleneck.create(offline_model)
    compute_statistics(rb, offline_model, TrainConfig(sample_photos=8, stats_n=16), lambda msg: None)
    return rb


@pytest.fixture(scope="session")
def crops(offline_model):
    from iba_core.image_sources import sample_photo_batches

    return next(sample_photo_batches(offline_model.preprocess, 2, batch_size=2, seed=3))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("train") / "imgs", 4)
