"""Helpers the metrics share: attribution callables, batched forward passes, record grouping."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ..network_cache import cache_of

#: An attribution as the metrics consume it: (preprocessed image (1, 3, H, W), target) → (H, W) map.
AttributionFn = Callable[[torch.Tensor, int], np.ndarray]


def resolve_map(attribution, x: torch.Tensor, target: int) -> np.ndarray:
    """The (H, W) float64 map: `attribution` itself if it is an array, else attribution(x, target)."""
    values = attribution(x, target) if callable(attribution) else attribution
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 3 and values.shape[0] in (1, 3, x.shape[1]):  # tolerate (C, H, W) maps: sum the channels
        values = values.sum(axis=0)
    if values.shape != tuple(x.shape[-2:]):
        raise ValueError(f"The attribution is shaped {values.shape}, the image {tuple(x.shape[-2:])}.")
    if not np.all(np.isfinite(values)):
        values = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0)
    return values


def model_device(model: nn.Module, default: torch.device | str = "cpu") -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device(default)


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode, no gradients; the model's flags are restored afterwards."""
    from ..model_state import frozen_eval

    with frozen_eval(model), torch.no_grad():
        yield


def batched_logits(
    model: nn.Module, images: Iterable[torch.Tensor], batch_size: int = 64
) -> torch.Tensor:
    """Logits (N, classes) for a stream of image batches, re-batched to `batch_size`, on the CPU."""
    device = model_device(model)
    outs: list[torch.Tensor] = []
    buffer: list[torch.Tensor] = []
    count = 0
    # The model is put in evaluation around each pass only, not while the stream makes its next images: a stream's
    # progress callback may let another session use the shared network in between (`SharedModel.make_way`), which
    # must find it as it was.
    for batch in images:
        buffer.append(batch)
        count += batch.shape[0]
        while count >= batch_size:
            joined = torch.cat(buffer)
            with evaluating(model):
                outs.append(model(joined[:batch_size].to(device)).float().cpu())
            rest = joined[batch_size:]
            buffer, count = ([rest] if rest.shape[0] else []), rest.shape[0]
    if count:
        with evaluating(model):
            outs.append(model(torch.cat(buffer).to(device)).float().cpu())
    return torch.cat(outs) if outs else torch.empty(0)


class _ChannelsLast(nn.Module):
    """Runs `inner` on channels-last inputs (faster convolution kernels on CPU and GPU)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x.contiguous(memory_format=torch.channels_last))


class _InPrecision(nn.Module):
    """Runs `inner` under autocast in `precision` and hands back float32 logits."""

    def __init__(self, inner: nn.Module, precision: str, device: torch.device):
        super().__init__()
        self.inner, self.precision, self.device = inner, precision, device

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from ..precision import autocast

        with autocast(self.precision, self.device):
            return self.inner(x).float()


def scoring_model(network, precision: str = "fp32") -> nn.Module:
    """The network the metrics run many times: for a registered network its BatchNorm-folded prefix and
    suffix joined (the same function up to float rounding, about 2× faster on CPU), else `.model`;
    in `precision` ("auto": measured once per network and machine on a forward batch, see
    iba_core.precision — bf16 ran these forward passes 2.6–3.3× faster on an AVX512-BF16 CPU)."""
    if hasattr(network, "can_split") and network.can_split:
        prefix, suffix = network.fast_split(network.spec.default_layer)
        model: nn.Module = _ChannelsLast(nn.Sequential(prefix, suffix)).eval()
    else:
        model = network.model if hasattr(network, "model") else network
    if precision == "fp32":
        return model
    from ..precision import resolve

    device = model_device(model)

    def workload(p: str):
        pre = getattr(network, "preprocess", None)
        size, channels = getattr(pre, "crop_size", 224), getattr(pre, "channels", 3)
        x = torch.randn(8, channels, size, size, device=device)

        def run() -> None:
            with torch.inference_mode():
                _InPrecision(model, p, device)(x)

        return run

    cache = cache_of(network)
    if cache is None and precision == "auto":
        return model  # a bare network: nothing to key a measurement by, and its input size is unknown
    key = ("scoring", network.key, network.weights_id) if cache is not None else ()
    chosen = resolve(precision, device, workload, memo=None if cache is None else cache.precision, key=key,
                     persist=cache is not None)
    return model if chosen == "fp32" else _InPrecision(model, chosen, device)


def pixel_order(values: np.ndarray, seed: int = 0) -> np.ndarray:
    """Flat pixel indices, most relevant first; equal values in a random order drawn from `seed` (NaN counts as
    least): the ranking insertion/deletion and ROAD remove pixels by."""
    flat = np.nan_to_num(np.asarray(values, dtype=np.float64).ravel(), nan=-np.inf)
    tiebreak = np.random.default_rng(seed).random(flat.size)
    return np.lexsort((tiebreak, -flat))


def stable_seed(*parts) -> int:
    """A seed from strings/ints that is the same in every process (unlike hash())."""
    import hashlib

    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**63)


def group_records(records: Sequence[dict], *fields: str) -> dict[tuple, list[dict]]:
    """Records grouped by the values of `fields`, groups and members in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(f) for f in fields), []).append(r)
    return groups


def method_label(records: Sequence[dict], method: str) -> str:
    """The display name stored with a method's records, else its key."""
    for r in records:
        if r.get("method") == method and r.get("method_name"):
            return str(r["method_name"])
    return method
