"""This process's place among torchrun's ranks, and how ranks share work: one home for every command that runs
under torchrun (`evaluate`, `attribute FOLDER`, `train-readout`).

torchrun starts one process per rank and tells each its place in the environment (read in `settings`:
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR). A process started without torchrun is rank 0 of 1, and every helper
here is then a no-op.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from . import settings


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this process: torchrun's, or (0, 1). UserError for values that do not fit."""
    rank, world, _ = settings.torchrun_place()
    return rank, world


def local_rank() -> int:
    """This process's rank on its machine (torchrun's LOCAL_RANK; 0 without torchrun): the GPU it uses."""
    return settings.torchrun_place()[2]


def rank_device(device: str) -> str:
    """The device of this rank: under torchrun with several ranks "cuda" means one GPU per rank, cuda:LOCAL_RANK."""
    _, world, local = settings.torchrun_place()
    return f"cuda:{local}" if device == "cuda" and world > 1 else device


def shard(items: Sequence, rank: int, world: int) -> list:
    """The items rank `rank` of `world` handles: every world-th one, starting at rank."""
    return list(items[rank::world])


def _can_join() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and settings.torchrun_rendezvous()


@contextmanager
def joined(world: int) -> Iterator[bool]:
    """Join torchrun's process group for a block that meets the other ranks several times (`meet_ranks` then only
    waits at a barrier: joining and leaving per meeting can hang while a rank still leaves the last one); left on
    exit, also on error. Yields whether the ranks can meet (False for one process, or without a rendezvous)."""
    if world <= 1 or not _can_join():
        yield False
        return
    import datetime

    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=7))
    try:
        yield True
    finally:
        if created:
            dist.destroy_process_group()


def meet_ranks(world: int) -> bool:
    """Meet the other ranks at a barrier if torch.distributed can rendezvous (torchrun); False if it cannot
    (one process, or RANK/WORLD_SIZE set by hand without MASTER_ADDR)."""
    if world <= 1:
        return False
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    if not dist.is_available():
        return False
    created = False
    if not dist.is_initialized():
        if not settings.torchrun_rendezvous():
            return False
        import datetime

        # Joining the group is itself a rendezvous of all ranks; ranks finish at different times.
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=7))
        created = True
    dist.barrier()
    if created:
        dist.destroy_process_group()
    return True
