"""Fixtures for the folder-run tests: the tiny card network and an image folder with two unusable files."""
from __future__ import annotations

import pytest

from run_fixtures import load_card, write_card, write_folder_with_bad_files

CLASSES = ["apple", "banana", "cherry"]


@pytest.fixture(scope="session")
def tiny_card(tmp_path_factory):
    """A model card of the tiny CNN (3 classes, seeded random weights, 64-px crops)."""
    return write_card(tmp_path_factory.mktemp("tiny-card"), CLASSES)


@pytest.fixture(scope="session")
def tiny_net(tiny_card):
    return load_card(tiny_card)


@pytest.fixture
def twelve(tmp_path):
    """12 images: 10 random PNGs, a .png of garbage bytes and a 5-band .npy."""
    return write_folder_with_bad_files(tmp_path / "images")
