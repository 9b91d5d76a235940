"""Readout checkpoints: save, load, validate, export; the shipped ones; readouts kept per network.

A checkpoint is a plain dict that `torch.load(weights_only=True)` can read: format and version, the
`ReadoutConfig`, the readout's state dict (weights and statistics), where the statistics came from,
and the training record (optimiser and RNG state while training; `export_for_inference` drops
them). Loading checks it against the network (`config.check_compatible`): a readout only explains
the network, weights and layers it was trained for, and says so in one sentence otherwise.

The shipped checkpoints live in `iba_core.settings.ASSETS_DIR`, named readout_<network key>.pt.
`cached_readout` keeps loaded readouts in the network's cache (`memo.readouts`, the few used last), per file
and modification time, so repeated calls are cheap and a rewritten file is loaded again.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..settings import ASSETS_DIR
from ..cache import write_atomic
from .bottleneck import ReadoutBottleneck, ReadoutResult
from .config import APP_CHECKPOINT_HINT, ReadoutCheckpointError, ReadoutConfig, check_compatible, readout_cli_hint

CHECKPOINT_FORMAT = "iba-explorer/readout-bottleneck"
CHECKPOINT_VERSION = 1


def _cpu_state(module: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def state_digest(rb: nn.Module) -> str:
    """SHA-256 of a readout's weights and statistics (to compare ranks, runs and checkpoints)."""
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(rb.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def make_checkpoint(rb: ReadoutBottleneck, training: dict | None = None) -> dict:
    """A plain, torch.load(weights_only=True)-safe dict describing the readout (and training state)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": rb.config.to_dict(),
        "state_dict": _cpu_state(rb),
        "stats": dict(rb.stats_info),
        "torch_version": str(torch.__version__),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "training": training or {},
    }


def _plain(obj: Any) -> Any:
    """Containers of tensors and Python scalars only, so torch.load(weights_only=True) can read them."""
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def save_checkpoint(path: str | os.PathLike, checkpoint: dict) -> Path:
    """Write atomically: an interruption mid-write never leaves a half file under `path`."""
    path = Path(path)
    plain = _plain(checkpoint)
    write_atomic(path, lambda tmp: torch.save(plain, tmp))
    return path


def load_checkpoint(path: str | os.PathLike) -> dict:
    """Read and sanity-check a readout checkpoint (no network needed); ReadoutCheckpointError if bad."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ReadoutCheckpointError(f"Readout checkpoint not found: {path}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # pickle, zip and safety errors come in many types
        raise ReadoutCheckpointError(f"{path} is not a readable readout checkpoint ({type(err).__name__}).") from err
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise ReadoutCheckpointError(f"{path} is not an IBA Explorer readout checkpoint.")
    if int(ckpt.get("version", 0)) > CHECKPOINT_VERSION:
        raise ReadoutCheckpointError(
            f"{path} was written by a newer IBA Explorer (format version {ckpt['version']}); please update."
        )
    try:
        ReadoutConfig.from_dict(ckpt["config"])
        if not isinstance(ckpt["state_dict"], dict):
            raise TypeError("state_dict")
    except (KeyError, TypeError, ValueError) as err:
        raise ReadoutCheckpointError(f"{path} is an incomplete readout checkpoint ({err}).") from err
    return ckpt


def _training_record(ckpt: dict) -> dict:
    """A checkpoint's training record without the optimiser and RNG state (only needed to resume)."""
    return {k: v for k, v in (ckpt.get("training") or {}).items() if k not in ("optimizer", "rng")}


def readout_from_checkpoint(ckpt: dict, network, source: str = "") -> ReadoutBottleneck:
    """A ReadoutBottleneck from a loaded checkpoint dict, checked against and bound to `network`."""
    config = ReadoutConfig.from_dict(ckpt["config"])
    check_compatible(config, network)
    rb = ReadoutBottleneck(config)
    state = ckpt["state_dict"]
    expected = rb.state_dict()
    bad = [k for k in expected if k not in state or tuple(state[k].shape) != tuple(expected[k].shape)]
    extra = [k for k in state if k not in expected]
    if bad or extra:
        raise ReadoutCheckpointError(
            f"The readout checkpoint {source or ''} does not fit its own configuration "
            f"(mismatched entries: {', '.join((bad + extra)[:5])})."
        )
    rb.load_state_dict({k: v.float() for k, v in state.items()})
    rb.stats_info = dict(ckpt.get("stats", {}))
    rb.source_path = source
    rb.training_info = _training_record(ckpt)
    return rb.bind(network).eval()


def load_readout(path: str | os.PathLike, network) -> ReadoutBottleneck:
    """Load a trained readout for `network`; ReadoutCheckpointError if it does not fit."""
    return readout_from_checkpoint(load_checkpoint(path), network, str(path))


def export_for_inference(src: str | os.PathLike, dst: str | os.PathLike, half: bool = False) -> Path:
    """Copy of a training checkpoint without optimiser and RNG state (what ships in assets/).

    half=True stores floating tensors as float16 (loading converts back to float32).
    """
    ckpt = load_checkpoint(src)
    training = _training_record(ckpt)
    state = ckpt["state_dict"]
    if half:
        state = {k: v.half() if v.is_floating_point() else v for k, v in state.items()}
    return save_checkpoint(dst, {**ckpt, "state_dict": state, "training": training})


def default_checkpoint(model_key: str) -> Path | None:
    """The shipped readout for a network (assets/readout_<key>.pt), if there is one."""
    path = ASSETS_DIR / f"readout_{model_key}.pt"
    return path if path.is_file() else None


def cached_readout(network, ckpt_path: str | os.PathLike) -> ReadoutBottleneck:
    """load_readout, kept in the network's cache (`memo.readouts`: the most recently used few, per file) so
    repeated calls are cheap.

    A file that changed since it was loaded (another modification time) is loaded again and replaces it.
    """
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise ReadoutCheckpointError(f"Readout checkpoint not found: {path}")
    resolved, mtime = str(path.resolve()), path.stat().st_mtime_ns
    kept = network.memo.readouts.get(resolved)
    if kept is not None and kept[0] == mtime:
        return kept[1]
    rb = load_readout(path, network)
    network.memo.readouts[resolved] = (mtime, rb)
    return rb


def no_checkpoint_error(network) -> ReadoutCheckpointError:
    """The error for a network that has no readout checkpoint: none shipped and none chosen."""
    return ReadoutCheckpointError(
        f"The Readout Bottleneck is not available here: no readout checkpoint was trained for {network.spec.title}.",
        cli_hint=readout_cli_hint(network),
        app_hint=APP_CHECKPOINT_HINT.format(title=network.spec.title),
    )


def readout_attribute(network, ckpt_path: str | os.PathLike | None, x: torch.Tensor, target: int | None = None,
                      batch: int = 10, seed: int = 0) -> ReadoutResult:
    """Readout Bottleneck attribution for one preprocessed image (1, 3, H, W).

    ckpt_path None uses the shipped checkpoint for the network (assets/readout_<key>.pt).
    Returns a ReadoutResult (an AttributionResult: heatmap, feature_bits, lambda_mean, total_bits,
    target, p_without, p_with, seconds, …; history is empty).
    """
    if ckpt_path is None:
        ckpt_path = default_checkpoint(network.key)
        if ckpt_path is None:
            raise no_checkpoint_error(network)
    return cached_readout(network, ckpt_path).explain(x, target, batch=batch, seed=seed)
