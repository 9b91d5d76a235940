"""Every setting read from the environment, in one place.

| variable            | meaning                                                  | default                  |
|---------------------|----------------------------------------------------------|--------------------------|
| IBA_CACHE_DIR       | statistics, readouts and other cached results            | ~/.cache/iba-explorer    |
| IBA_WEIGHTS_DIR     | a folder holding pretrained weights files                | (none)                   |
| IBA_MODELS_DIR      | your networks: model cards the app lists and adds to     | ~/.config/iba-explorer/models |
| IBA_STATS_SAMPLES   | samples behind statistics the app and methods estimate   | 1000 (100 from the offline photos for a network without shipped statistics) |
| IBA_MAX_STATS_SAMPLES | the most samples a visitor of the app may ask statistics from | 2000              |
| IBA_MAX_PARAMS      | the largest network built: parameters (and activations   | 700000000                |
|                     | at batch 1), counted on the meta device before anything  |                          |
|                     | is allocated (`networks.model_size`)                     |                          |
| IBA_MAX_REQUEST_PASSES | the most network passes one request of a served app's  | 10000 (in an app on      |
|                     | visitor may cost (`iba_core.budget`)                     | localhost: no limit)     |
| IBA_TORCH_THREADS   | torch threads for app computations                       | usable cores − 1         |
| IBA_TRUST_CODE      | 1: the app runs code model cards name (builders, modules) | off                      |
|                     | and follows card paths outside the card's folder         |                          |
| IBA_DATA_DIRS       | folders, ':'-separated, whose paths app visitors may type | (none; the models folder |
|                     | (weights, image folders) and cards may point into; a     | is always allowed)       |
|                     | relative entry is relative to the app's working folder   |                          |
| HF_HUB_OFFLINE      | Hugging Face's: 1 reads timm / Hugging Face models from  | off                      |
|                     | the hub cache only (also TRANSFORMERS_OFFLINE)           |                          |
| HF_HUB_CACHE        | Hugging Face's: its hub cache (else HF_HOME/hub, else    | ~/.cache/huggingface/hub |
|                     | XDG_CACHE_HOME/huggingface/hub)                          |                          |
| HF_HOME             | Hugging Face's: its folder                               | ~/.cache/huggingface     |
| HF_ENDPOINT         | Hugging Face's: the hub's address                        | https://huggingface.co   |
| RANK                | torchrun's: this process's rank                          | 0                        |
| WORLD_SIZE          | torchrun's: the number of ranks                          | 1                        |
| LOCAL_RANK          | torchrun's: this process's rank on its machine (its GPU) | 0                        |
| MASTER_ADDR         | torchrun's: where the ranks meet (set: they can)         | (none)                   |
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

CACHE_DIR_ENV = "IBA_CACHE_DIR"
WEIGHTS_DIR_ENV = "IBA_WEIGHTS_DIR"
MODELS_DIR_ENV = "IBA_MODELS_DIR"
STATS_SAMPLES_ENV = "IBA_STATS_SAMPLES"
MAX_STATS_SAMPLES_ENV = "IBA_MAX_STATS_SAMPLES"
THREADS_ENV = "IBA_TORCH_THREADS"
MAX_PARAMS_ENV = "IBA_MAX_PARAMS"
MAX_REQUEST_PASSES_ENV = "IBA_MAX_REQUEST_PASSES"
TRUST_CODE_ENV = "IBA_TRUST_CODE"
DATA_DIRS_ENV = "IBA_DATA_DIRS"
#: Hugging Face's switch (not this project's): read the hub cache only, never download.
HUB_OFFLINE_ENV = "HF_HUB_OFFLINE"
#: Hugging Face's: where huggingface_hub keeps its cache and its own folder, and the hub's address (a mirror).
HUB_CACHE_ENV, HF_HOME_ENV, HUB_ENDPOINT_ENV = "HF_HUB_CACHE", "HF_HOME", "HF_ENDPOINT"
#: torchrun's variables (PyTorch's, not this project's): a process's rank, the number of ranks, its rank on this
#: machine, and the address where the ranks meet.
RANK_ENV, WORLD_SIZE_ENV, LOCAL_RANK_ENV, MASTER_ADDR_ENV = "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"

#: The app's cap on a visitor's statistics samples unless its owner sets IBA_MAX_STATS_SAMPLES.
DEFAULT_MAX_STATS_SAMPLES = 2000
#: The largest network built unless the owner sets IBA_MAX_PARAMS: parameters (and activations at batch 1, in
#: numbers). 700 M is a bit above the largest classifiers a 2-core, 24 GB server serves usefully: torchvision's
#: largest (ViT-H/14, 633 M; RegNetY-128GF, 645 M) and timm's ViT-H/14 (632 M) fit; each takes 2.5 GB in fp32, and
#: the app keeps a few networks, their statistics and a batch of activations for the backward pass beside it.
#: ViT-g/14 (1.0 B: 4 GB, 140 s to build on 2 cores) and ConvNeXt-XXLarge (846 M) are refused before they are built.
DEFAULT_MAX_PARAMS = 700_000_000
#: The most network passes (a backward pass counts as one) a served app's visitor may ask for in one request unless
#: its owner sets IBA_MAX_REQUEST_PASSES: about 6 minutes of EfficientNet-Lite0 on 2 busy CPU cores (28 passes a
#: second), 25 default Per-Sample runs, or the field's yardsticks for 18 methods at their default protocol.
DEFAULT_MAX_REQUEST_PASSES = 10_000
#: The most samples any front end estimates statistics from (the paper's statistics use far fewer).
MAX_SAMPLES = 1_000_000
#: Samples behind feature statistics unless told otherwise (paper appendix: statistics over many images).
RECOMMENDED_SAMPLES = 1000

#: Shipped data (sample statistics, the offline readout, the Home example), next to the package.
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"


def _positive_int(name: str) -> int | None:
    try:
        n = int(os.environ.get(name, "").strip())
    except ValueError:
        return None
    return n if n > 0 else None


def cache_dir() -> Path:
    """Where statistics and other small results are cached (IBA_CACHE_DIR overrides)."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "iba-explorer"


def weights_dir() -> Path | None:
    """The folder named by IBA_WEIGHTS_DIR, if set."""
    env = os.environ.get(WEIGHTS_DIR_ENV)
    return Path(env).expanduser() if env else None


def models_dir() -> Path:
    """The folder of your networks' model cards (IBA_MODELS_DIR overrides): the app lists the cards in it
    (and one folder level below) and its "Add your network" form writes new ones there. Not a cache: a
    folder of your own files, so it lives under ~/.config, not ~/.cache."""
    env = os.environ.get(MODELS_DIR_ENV)
    return Path(env).expanduser() if env else Path.home() / ".config" / "iba-explorer" / "models"


def trust_code() -> bool:
    """Whether the app's owner allows code from model cards (IBA_TRUST_CODE=1, also "true" or "yes"): a
    `package.module:function` builder, a module beside the card, and card paths outside the card's folder."""
    return os.environ.get(TRUST_CODE_ENV, "").strip().lower() in ("1", "true", "yes")


def hub_offline() -> bool:
    """Whether Hugging Face's own offline switch is on (HF_HUB_OFFLINE=1, or its older name TRANSFORMERS_OFFLINE):
    timm and Hugging Face models are then read from huggingface_hub's cache only. Read each time (huggingface_hub
    reads it once, at its import)."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
               for name in (HUB_OFFLINE_ENV, "TRANSFORMERS_OFFLINE"))


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, where it keeps timm and Hugging Face models: HF_HUB_CACHE, else HF_HOME/hub,
    else XDG_CACHE_HOME/huggingface/hub (default ~/.cache/huggingface/hub): Hugging Face's own rules."""
    if os.environ.get(HUB_CACHE_ENV):
        return Path(os.environ[HUB_CACHE_ENV]).expanduser()
    home = os.environ.get(HF_HOME_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def hub_endpoint() -> str:
    """The Hugging Face Hub's address (HF_ENDPOINT, else https://huggingface.co), without a trailing slash."""
    return os.environ.get(HUB_ENDPOINT_ENV, "https://huggingface.co").rstrip("/")


def torchrun_place() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them in RANK, WORLD_SIZE and LOCAL_RANK; (0, 1, 0) in a
    process torchrun did not start. A UserError when one is not a whole number or the rank lies outside the world."""
    try:
        rank = int(os.environ.get(RANK_ENV, "0"))
        world = int(os.environ.get(WORLD_SIZE_ENV, "1"))
        local = int(os.environ.get(LOCAL_RANK_ENV, "0"))
    except ValueError:
        raise UserError(f"{RANK_ENV}, {WORLD_SIZE_ENV} and {LOCAL_RANK_ENV} must be whole numbers.") from None
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UserError(f"{RANK_ENV}={rank} and {LOCAL_RANK_ENV}={local} do not fit {WORLD_SIZE_ENV}={world}: "
                        "ranks run from 0 to the world size − 1.")
    return rank, world, local


def torchrun_rendezvous() -> bool:
    """Whether the ranks can meet: torchrun sets MASTER_ADDR; RANK and WORLD_SIZE set by hand do not."""
    return MASTER_ADDR_ENV in os.environ


def data_dirs() -> tuple[Path, ...]:
    """The folders named by IBA_DATA_DIRS (separated by os.pathsep, ':' on Linux), whose paths visitors of the
    app may type (weights, image folders), as absolute paths; empty entries are skipped, and a relative entry
    is taken relative to the working folder the app was started in (where `streamlit run` ran)."""
    env = os.environ.get(DATA_DIRS_ENV, "")
    return tuple(Path(os.path.abspath(Path(part.strip()).expanduser()))
                 for part in env.split(os.pathsep) if part.strip())


def max_stats_samples() -> int:
    """The most samples the app estimates statistics from on a visitor's request (IBA_MAX_STATS_SAMPLES, else
    2000): each sample is a forward pass while the shared network is busy, so a larger number would make
    every other session wait (ViT-B/16 on 2 cores: about 0.5 s a sample)."""
    return _positive_int(MAX_STATS_SAMPLES_ENV) or DEFAULT_MAX_STATS_SAMPLES


def stats_samples(default: int = RECOMMENDED_SAMPLES) -> int:
    """Samples behind default statistics: IBA_STATS_SAMPLES if it is a positive integer, else `default`
    (1000; `feature_stats.app_samples` passes fewer where a network has neither shipped statistics nor an
    image folder)."""
    return _positive_int(STATS_SAMPLES_ENV) or default


def max_params() -> int:
    """The largest network any front end builds, in parameters (IBA_MAX_PARAMS, else `DEFAULT_MAX_PARAMS`); one
    image's activations are held to as many numbers (`networks.model_size`)."""
    return _positive_int(MAX_PARAMS_ENV) or DEFAULT_MAX_PARAMS


def max_request_passes(localhost: bool) -> int | None:
    """The most network passes one request may cost (`iba_core.budget`): IBA_MAX_REQUEST_PASSES wherever its owner
    sets it; else `DEFAULT_MAX_REQUEST_PASSES` in an app served to others, and no limit in an app on localhost
    (`localhost`: its one visitor is its owner) or the command line, which pass True."""
    return _positive_int(MAX_REQUEST_PASSES_ENV) or (None if localhost else DEFAULT_MAX_REQUEST_PASSES)


def torch_threads() -> int:
    """Torch threads for app computations: IBA_TORCH_THREADS, else all usable cores but one.

    The server's own threads need a core. Torch's OpenMP workers wait for each other after every
    operation, so one worker pushed off its core stalls them all: on 2 cores a run took 3–5× longer
    with 2 threads than with 1.
    """
    n = _positive_int(THREADS_ENV)
    if n:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)
