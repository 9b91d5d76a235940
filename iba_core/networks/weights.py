"""Finding and loading a network's pretrained weights: explicit file, IBA_WEIGHTS_DIR, packaged, hub cache, download."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..errors import user_message
from ..settings import weights_dir
from .spec import NetworkSpec, WeightsUnavailableError


def hub_checkpoint_dir() -> Path:
    """torch hub's checkpoint cache, where torchvision keeps downloaded weights."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def find_weights(spec: NetworkSpec, weights_file: str | os.PathLike | None = None) -> Path | None:
    """Locate a weights file: explicit path, then IBA_WEIGHTS_DIR, then the packaged or cached file."""
    if weights_file is not None:
        path = Path(weights_file).expanduser()
        if not path.is_file():
            raise WeightsUnavailableError(f"Weights file not found: {path}")
        return path
    source = spec.weights
    if source is None:
        return None
    candidates = []
    if (d := weights_dir()) is not None:
        candidates.append(d / source.file)
    if source.packaged is not None and (p := source.packaged()) is not None:
        candidates.append(p)
    candidates.append(hub_checkpoint_dir() / source.file)
    return next((c for c in candidates if c.is_file()), None)


def weights_status(spec: NetworkSpec) -> str:
    """One sentence a user can act on (for the CLI's network list): where the weights come from, or how to
    get them."""
    path = find_weights(spec)
    if path is not None:
        return f"weights found: {path}"
    return user_message(missing_weights_error(spec), "cli")


def missing_weights_error(spec: NetworkSpec) -> WeightsUnavailableError:
    """The error for `spec`'s weights being neither here nor downloadable, with what to do in each front end:
    the CLI's --weights and IBA_WEIGHTS_DIR, the app's Network menu."""
    from . import DEFAULT_NETWORK, get_spec

    target = weights_dir() or hub_checkpoint_dir()
    source = spec.weights
    where = f"; it is available from {source.url}" if source and source.url else ""
    file = source.file if source else "with its weights"
    fallback = get_spec(DEFAULT_NETWORK).title
    return WeightsUnavailableError(
        f"The pretrained weights for {spec.title} are not on this machine and cannot be downloaded (offline?); "
        f"meanwhile, {fallback} works without a download. To use {spec.title}, place the file {file} in "
        f"{target}{where}.",
        cli_hint="Or set IBA_WEIGHTS_DIR to the folder that holds it, or name the file with --weights FILE.",
        app_hint=f"Then choose {spec.title} in the Network menu again.",
    )


def _reachable(url: str, timeout: float = 3.0) -> bool:
    """A quick connection test, so an offline machine gets an answer in seconds, not a hang."""
    host = urlparse(url).hostname
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def load_state_dict(spec: NetworkSpec, weights_file: str | os.PathLike | None, *,
                    trust_pickle: bool = False) -> tuple[dict, str]:
    """(state dict, weights id) from a local file or torchvision's download; never unpickles objects
    (a local file is read by `state_files.read_weights`: .pth/.pt or .safetensors, a pickled whole
    module only with trust_pickle=True)."""
    path = find_weights(spec, weights_file)
    if path is None:
        url = spec.weights.url if spec.weights else None
        if url is None or not _reachable(url):
            raise missing_weights_error(spec)
        try:
            state = torch.hub.load_state_dict_from_url(url, progress=True, map_location="cpu", weights_only=True)
        except Exception as err:  # network errors come in many types; all mean "not available"
            raise missing_weights_error(spec) from err
        return state, spec.weights.file
    from .state_files import read_weights

    state = read_weights(path, trust_pickle=trust_pickle)
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    return state, path.name
