"""Fixtures for the concept tests: the hand-made network of `concept_fixtures`, its finished folder run and a
concept set of it (session-scoped, read only: `hand_copy` gives a test its own copy to change)."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))  # run_fixtures (the tiny CNN card)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # concept_fixtures

from concept_fixtures import K, make_hand_run  # noqa: E402


@pytest.fixture(scope="session")
def hand_root(tmp_path_factory) -> Path:
    """root/card (the hand-made network's card), root/data, root/run (the finished run); no concepts yet."""
    root = tmp_path_factory.mktemp("hand")
    make_hand_run(root)
    return root


@pytest.fixture(scope="session")
def hand_net(hand_root):
    from run_fixtures import load_card

    return load_card(hand_root / "card" / "hand.toml")


@pytest.fixture(scope="session")
def hand_concepts(hand_root, hand_net, tmp_path_factory) -> Path:
    """A copy of the hand run with a finished concept set (K concepts per class and for the whole run); read only."""
    from iba_core.concepts import ConceptSettings, find_concepts

    run = tmp_path_factory.mktemp("hand-concepts") / "run"
    shutil.copytree(hand_root / "run", run)
    find_concepts(hand_net, run, ConceptSettings(k=K))
    return run


@pytest.fixture
def hand_copy(hand_concepts, tmp_path) -> Path:
    """A private copy of the run with its concept set, to change."""
    run = tmp_path / "run"
    shutil.copytree(hand_concepts, run)
    return run
