"""iba_core.ranks: this process's place among torchrun's ranks, read once (in settings), and sharding."""
from __future__ import annotations

import pytest

from iba_core import ranks
from iba_core.errors import UserError

TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in TORCHRUN:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_process_without_torchrun_is_rank_0_of_1(no_torchrun):
    assert ranks.rank_and_world() == (0, 1) and ranks.local_rank() == 0
    assert ranks.rank_device("cuda") == "cuda" and not ranks.meet_ranks(1)


def test_torchrun_places_a_rank_and_its_gpu(no_torchrun):
    no_torchrun.setenv("RANK", "3")
    no_torchrun.setenv("WORLD_SIZE", "4")
    no_torchrun.setenv("LOCAL_RANK", "1")
    assert ranks.rank_and_world() == (3, 4) and ranks.local_rank() == 1
    assert ranks.rank_device("cuda") == "cuda:1" and ranks.rank_device("cpu") == "cpu"
    # RANK and WORLD_SIZE set by hand, without torchrun's MASTER_ADDR: the ranks cannot meet, and do not wait.
    assert not ranks.meet_ranks(4)


@pytest.mark.parametrize("env", [{"RANK": "one"}, {"RANK": "2", "WORLD_SIZE": "2"}, {"WORLD_SIZE": "0"},
                                 {"LOCAL_RANK": "-1"}])
def test_torchrun_values_that_do_not_fit_are_one_sentence(no_torchrun, env):
    for name, value in env.items():
        no_torchrun.setenv(name, value)
    with pytest.raises(UserError, match="RANK"):
        ranks.rank_and_world()


def test_shards_cover_every_item_once():
    items = list(range(11))
    shards = [ranks.shard(items, r, 3) for r in range(3)]
    assert shards[1] == [1, 4, 7, 10] and sorted(sum(shards, [])) == items
