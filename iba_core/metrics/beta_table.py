"""Table 3 of the paper (appendix F, hyperparameters): the influence of β on the information loss L_I and on accuracy.

For each β·k in {0.01, 0.1, 1, 10, 100} the Per-Sample Bottleneck is fitted to each labelled image
with the label as target; we report L_I / k (nats per feature element, k = h·w·c, for the fitted λ)
and the top-1 / top-5 accuracy of the network *with* the fitted bottleneck (the fraction of the B noisy
copies of the last pass whose top-1 / top-5 classes contain the label). Two reference columns:
"Orig." is the plain network's accuracy, "Initial" the untrained bottleneck (α = 5, no steps).

The bottleneck's logits are read by wrapping the network suffix in `_LogitRecorder`: the first suffix
call of `PerSampleBottleneck.attribute` is the plain network, the last one the fitted bottleneck.

Readout Bottleneck rows: `readout_row`, the hook point into `iba_core.readout`, scores one trained
checkpoint (its β·k gives the column); the CLI uses the shipped checkpoint or `--readout CKPT …`.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
import torch
from torch import nn

from .common import group_records

METRIC = "beta-table"
#: Paper appendix F, Table 3: the β·k columns of the β table.
PAPER_BETA_K = (0.01, 0.1, 1.0, 10.0, 100.0)
ORIG, INITIAL = "orig", "initial"


class _LogitRecorder(nn.Module):
    """Runs `inner` and keeps the first and the latest output (detached)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.first: torch.Tensor | None = None
        self.last: torch.Tensor | None = None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.inner(z)
        kept = out.detach().float().cpu()
        if self.first is None:
            self.first = kept
        self.last = kept
        return out


def topk_hits(logits: torch.Tensor, label: int) -> tuple[float, float]:
    """(top-1, top-5) accuracy of a batch of logits against one label."""
    top5 = logits.topk(min(5, logits.shape[1]), dim=1).indices
    return float((top5[:, 0] == label).float().mean()), float((top5 == label).any(dim=1).float().mean())


def column_name(beta_k: float | str) -> str:
    return beta_k if isinstance(beta_k, str) else f"beta_k={beta_k:g}"


def per_sample_row(prefix: nn.Module, suffix: nn.Module, stats, x: torch.Tensor, label: int, beta_k: float | None,
                   settings=None) -> dict:
    """One image, one column: fit the bottleneck (β·k = beta_k; None: the untrained "Initial" one).

    Returns {"info_per_k", "top1", "top5", "p_with", "orig_top1", "orig_top5", …}.
    """
    from ..per_sample import BottleneckSettings, PerSampleBottleneck

    settings = settings or BottleneckSettings()
    settings = replace(settings, steps=0) if beta_k is None else replace(settings, beta_k=float(beta_k))
    if settings.precision == "auto":  # measured on the plain suffix, so the recorder sees only the real passes
        precision = PerSampleBottleneck.from_split(prefix, suffix, stats, settings).precision_for(x)
        settings = replace(settings, precision=precision)
    recorder = _LogitRecorder(suffix)
    result = PerSampleBottleneck.from_split(prefix, recorder, stats, settings).attribute(x, int(label))
    k = int(np.prod(result.feature_shape))
    top1, top5 = topk_hits(recorder.last, label)
    orig1, orig5 = topk_hits(recorder.first, label)
    row = {
        "info_per_k": result.total_bits * math.log(2) / k,  # L_I of the fitted λ, in nats
        "top1": top1,
        "top5": top5,
        "p_with": result.p_with,
        "p_without": result.p_without,
        "orig_top1": orig1,
        "orig_top5": orig5,
        "k": k,
    }
    if result.history:
        row["info_last_step_per_k"] = result.history[-1].info / k
    return row


def readout_row(network, x: torch.Tensor, label: int, checkpoint, batch: int = 10, seed: int = 0) -> dict | None:
    """HOOK POINT for the Readout Bottleneck rows of Table 3: one image, one trained readout.

    Uses `iba_core.readout` (`cached_readout(network, checkpoint)` and its training-style forward pass
    on `batch` noisy copies of x, labelled `label`); returns None while that module does not exist.
    A readout is trained for one β, so each checkpoint fills the column of its own β·k.
    """
    try:
        from .. import readout as readout_module
    except ImportError:
        return None
    from ..model_state import frozen_eval

    rb = readout_module.cached_readout(network, checkpoint)
    xb = x.expand(batch, *x.shape[1:])
    labels = torch.full((batch,), int(label), dtype=torch.long, device=xb.device)
    generator = torch.Generator(device=xb.device).manual_seed(seed)
    with frozen_eval(*rb.network_modules, rb), torch.no_grad():
        out = rb(xb, labels, generator)
    top1, top5 = topk_hits(out.logits.float().cpu(), int(label))
    return {
        "beta_k": float(rb.config.beta_k),
        "info_per_k": float(out.info) / rb.config.k,
        "top1": top1,
        "top5": top5,
        "k": int(rb.config.k),
        "readout_layer": rb.config.layer,
        "checkpoint": str(checkpoint),
    }


# --------------------------------------------------------------------------------------------
# Records → table.


def summarise(records: Sequence[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """{method: {column: {"info_per_k", "top1", "top5", "images"}}} averaged over images."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for (method, column), rs in group_records(records, "method", "column").items():
        cell = {}
        for q in ("info_per_k", "top1", "top5"):
            vals = [r[q] for r in rs if r.get(q) is not None]
            cell[q] = float(np.mean(vals)) if vals else None
        cell["images"] = len(rs)
        out.setdefault(method, {})[column] = cell
    return out


def _column_order(columns) -> list[str]:
    def key(c: str):
        if c == ORIG:
            return (0, 0.0)
        if c == INITIAL:
            return (1, 0.0)
        return (2, float(c.split("=", 1)[1]) if "=" in c else math.inf)

    return sorted(columns, key=key)


def _column_label(c: str) -> str:
    if c == ORIG:
        return "Orig."
    if c == INITIAL:
        return "Initial"
    return f"β={c.split('=', 1)[1]}/k" if "=" in c else c


def format_table(records: Sequence[dict]) -> str:
    from .results import markdown_table

    records = [r for r in records if r.get("metric", METRIC) == METRIC]
    summary = summarise(records)
    columns = _column_order({r["column"] for r in records})
    names = {"per_sample": "Per-Sample", "readout": "Readout"}
    rows = []
    for method, cells in summary.items():
        for q, label in (("info_per_k", "L_I / k"), ("top5", "Top-5 Acc."), ("top1", "Top-1 Acc.")):
            row = [f"{names.get(method, method)} {label}"]
            for c in columns:
                cell = cells.get(c)
                if cell is None or (c == ORIG and q == "info_per_k"):
                    row.append("--" if c == ORIG else None)
                else:
                    row.append(cell[q])
            rows.append(row)
    images = max((cell["images"] for cells in summary.values() for cell in cells.values()), default=0)
    first = records[0] if records else {}
    return (
        "### Influence of β on L_I and accuracy (paper Table 3)\n\n"
        + markdown_table(["", *(_column_label(c) for c in columns)], rows)
        + f"\n\n{first.get('model', '')}, layer {first.get('layer', '?')}, {images} labelled image(s); "
        "L_I in nats per feature element.\n"
    )
