"""Distributed training helpers: joining torchrun's process group, syncing and summing across ranks.

This process's place (rank, world size, local rank) is read as for every command (`settings.torchrun_place`,
`iba_core.ranks`).

Under ``torchrun`` (WORLD_SIZE > 1) the readout is wrapped in DistributedDataParallel (gloo on CPU,
nccl on CUDA), a DistributedSampler splits each epoch across ranks, statistics are computed on
rank 0 and broadcast, and only rank 0 writes files. With one process every helper is a no-op.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ... import settings


@dataclass
class DistInfo:
    """This process's place in the run: rank, world size, local rank, device."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False  # this call created the process group (and tears it down)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> DistInfo:
    """Join the process group that torchrun describes in the environment (no-op for one process)."""
    rank, world, local = settings.torchrun_place()
    dev = torch.device(device)
    if world <= 1:
        return DistInfo(device=dev)
    if dev.type == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    owns = False
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
        owns = True
    return DistInfo(rank, world, local, dev, owns)


def teardown_distributed(di: DistInfo) -> None:
    """Leave the process group if `setup_distributed` created it."""
    if di.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Copy rank `src`'s parameters and buffers to every rank."""
    with torch.no_grad():
        for t in module.state_dict().values():
            dist.broadcast(t, src)


def all_sum(t: torch.Tensor, di: DistInfo) -> torch.Tensor:
    """Sum over all processes (a collective: every rank calls it at the same step); a copy for one."""
    if not di.distributed:
        return t.clone()
    r = t.to(di.device)
    dist.all_reduce(r)
    return r.cpu()
