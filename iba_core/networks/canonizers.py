"""LRP canonizers shared by the network specs (zennit): BatchNorm merges made exact.

zennit's canonizers rewrite a model (merge BatchNorms into convolutions, make residual sums explicit)
while they are active, so LRP rules fit the network. Each network spec names the ones it needs
(`NetworkSpec.canonizers`); zennit is imported only when LRP runs.
"""
from __future__ import annotations

from torch import nn


def _merge_exactly(modules, batch_norm) -> None:
    """zennit's merge, then make the emptied BatchNorm an exact identity.

    zennit leaves running_var = 1, so the BatchNorm still divides by sqrt(1 + eps): 0.05 % per layer with
    EfficientNet's eps = 1e-3, which compounds to a visible change of the logits over 50 layers.
    running_var = 1 − eps makes it exactly x ↦ x (the original values are restored on removal).
    """
    import torch
    from zennit.canonizers import MergeBatchNorm

    MergeBatchNorm.merge_batch_norm(modules, batch_norm)
    batch_norm.running_var.data = torch.full_like(batch_norm.running_var.data, 1.0 - batch_norm.eps)


def exact_sequential_merge():
    """zennit's SequentialMergeBatchNorm (conv → BN pairs in nn.Sequential), with the exact merge."""
    from zennit.canonizers import SequentialMergeBatchNorm

    class ExactSequentialMergeBatchNorm(SequentialMergeBatchNorm):
        merge_batch_norm = staticmethod(_merge_exactly)

    return ExactSequentialMergeBatchNorm()


def exact_named_merge(pairs: list[tuple[tuple[str, ...], str]]):
    """zennit's NamedMergeBatchNorm for explicit (convolution names, BatchNorm name) pairs, exact."""
    from zennit.canonizers import NamedMergeBatchNorm

    class ExactNamedMergeBatchNorm(NamedMergeBatchNorm):
        merge_batch_norm = staticmethod(_merge_exactly)

    return ExactNamedMergeBatchNorm(pairs)


def sequential_canonizers(model: nn.Module) -> list:
    """For plain networks whose BatchNorms follow their convolutions in nn.Sequential containers."""
    return [exact_sequential_merge()]
