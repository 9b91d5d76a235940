"""Statistics a readout needs before training, stored in its checkpoint.

- the bottleneck layer's per-element mean and std (the noise ε ~ N(μ_R, σ_R²)): `feature_stats.stats_for_run`,
  the policy every run uses, cached and shared with the Per-Sample Bottleneck;
- each read-out layer's per-channel mean and std (the readout network's input normalisation),
  pooled over images and space (logits: per class over images).
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch.utils.data import DataLoader

from ...image_sources import DataError, sample_photo_batches
from ...feature_stats import run_stats_source, stats_for_run
from ...model_state import frozen_eval
from ..bottleneck import ReadoutBottleneck
from .config import TrainConfig
from .data import ImageFolderDataset


def channel_stats(
    rb: ReadoutBottleneck, batches: Iterable[torch.Tensor]
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
    """Per-channel mean and std of every read-out layer (pooled over images and space), float64 sums."""
    sums: list[torch.Tensor] | None = None
    squares: list[torch.Tensor] = []
    counts: list[int] = []
    n = 0
    with frozen_eval(*rb.passes.modules), torch.inference_mode():
        for x in batches:
            out = rb.passes.first_pass(x.to(rb.mean.device))
            maps = [out[name] for name in rb.config.reads]
            if sums is None:
                sums = [torch.zeros(m.shape[1], dtype=torch.float64, device=m.device) for m in maps]
                squares = [s.clone() for s in sums]
                counts = [0] * len(maps)
            for i, m in enumerate(maps):
                m = m.to(torch.float64)
                dims = [0] + list(range(2, m.dim()))
                sums[i] += m.sum(dim=dims)
                squares[i] += (m * m).sum(dim=dims)
                counts[i] += m.numel() // m.shape[1]
            n += x.shape[0]
    if sums is None:
        raise DataError("No images to estimate the read-out statistics from.")
    result = []
    for s, q, c in zip(sums, squares, counts):
        mean = s / c
        var = (q / c - mean**2).clamp_min(0.0) * (c / max(c - 1, 1))
        result.append((mean.float().cpu(), var.sqrt().float().cpu()))
    return result, n


def compute_statistics(rb: ReadoutBottleneck, network, cfg: TrainConfig, log: Callable[[str], None]) -> None:
    """Bottleneck statistics (cached, shared with the Per-Sample Bottleneck) and read-out normalisation."""
    layer = rb.config.layer
    log(f"statistics: {layer} (per element) and {', '.join(rb.config.reads)} (per channel), {cfg.stats_n} images")
    # the one policy every run uses (feature_stats.stats_for_run); the read-out layers from the same images
    images, _ = run_stats_source(network, cfg.images, cfg.stats_n)
    stats = stats_for_run(network, layer, images=images, n=cfg.stats_n)
    if images is not None:
        ds = ImageFolderDataset(images, network.preprocess, network.categories, labels="top1", augment=False,
                                limit=cfg.stats_n)
        batches = (x for x, _ in DataLoader(ds, batch_size=32, num_workers=cfg.workers))
    else:
        batches = sample_photo_batches(network.preprocess, cfg.stats_n, 32, cfg.seed)
    read_stats, n = channel_stats(rb, batches)
    rb.set_statistics(stats.mean.to(rb.mean.device), stats.std.to(rb.mean.device), read_stats, {
        "bottleneck": stats.describe(), "bottleneck_samples": stats.n,
        "reads": f"per-channel over {n} images", "reads_samples": n,
    })
