"""One registry of model sources: how a network key names each, how it is checked and how it is loaded.

| source      | key                                   | module               |
|-------------|---------------------------------------|----------------------|
| builtin     | a registered key ("efficientnet_lite0") | `REGISTRY` (one module per family) |
| torchvision | torchvision:NAME                      | `torchvision_any`    |
| timm        | timm:NAME                             | `timm_models`        |
| hf          | hf:ORG/NAME                           | `hf_models`          |
| clip        | clip:FOLDER or clip:ORG/NAME          | `clip_models`        |
| folder      | the path of a model folder            | `model_folders`      |
| card        | the path of a model card (.toml)      | `cards`              |

`SOURCES` holds them in the one order every caller follows (`load_network`, `check_network_key`, the CLI's
`--model`): a registered key first (a folder named like one stays the built-in), then the prefixed keys (a prefix
says what it is even where a folder has that name), then a folder (before a card: a path is a card's key too), then
a card. Each entry says how to recognise its key, how to check it without loading a network (`check`) and how to load
it (`load`, always a `Loaded`), and, for the sources a model card may name as its `arch`, how to build that
architecture with the card's head (`card_arch`; `cards.load_card` asks the registry, a code builder is the rest).

The model-size cap is the same for every source: each source's builder goes through `model_size.build_seeded`, which builds
on the meta device first and refuses above IBA_MAX_PARAMS (`model_size`); Hugging Face's pretrained load, which
allocates inside transformers, is counted by `model_size.check_size` first. Adding a source is one entry here, with a
module that builds through `build_seeded` (docs/architecture.md, "Where to change what").
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
from torch import nn

from ..trust import LOCAL, Trust
from .spec import CardArch, NetworkSpec, UnknownModelError, WeightsUnavailableError


class Loaded(NamedTuple):
    """What every source's load gives: the spec, the model with its weights, the weights id and the class names."""

    spec: NetworkSpec
    model: nn.Module
    weights_id: str
    categories: list[str]


@dataclass(frozen=True)
class Source:
    """A model source: `recognises(key)`, `check(key)` (a clear error, loading no network), `load(key, weights, *,
    trust_pickle, trust)`, and for the sources a model card may name as its arch with a head of its own,
    `card_arch(arch, arch_args, classes, outputs, weights_check, trust)` (a `spec.CardArch`)."""

    name: str
    recognises: Callable[[object], bool]
    check: Callable[[object], None]
    load: Callable[..., Loaded]
    card_arch: Callable[..., CardArch] | None = None


def _builtin(key) -> bool:
    from . import REGISTRY

    return isinstance(key, str) and key in REGISTRY


def _load_builtin(key: str, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    """A registered network: its weights (a file, the packaged or cached one, a download) or random, seeded."""
    from . import REGISTRY
    from .state_files import require_floating
    from .weights import load_state_dict

    spec = REGISTRY[key]
    if weights == "random":
        state, weights_id = None, "random"
    else:
        state, weights_id = load_state_dict(spec, None if weights in (None, "pretrained") else weights,
                                            trust_pickle=trust_pickle)
    if state is not None:
        require_floating(state, spec.title)
    try:
        with torch.random.fork_rng(devices=[]):  # the global RNG stays as it was (one process, many sessions)
            torch.manual_seed(0)  # random weights are reproducible so their statistics can be cached
            model = spec.build(state)
    except RuntimeError as err:  # mismatched state dict
        raise WeightsUnavailableError(f"The weights do not fit {spec.title}: {err}") from err
    return Loaded(spec, model, weights_id, spec.categories() if spec.categories else [])


def _load_torchvision(key: str, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    from .torchvision_any import load_torchvision

    spec, model, weights_id = load_torchvision(key, weights, trust_pickle=trust_pickle)
    return Loaded(spec, model, weights_id, spec.categories() if spec.categories else [])


def _load_timm(key: str, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    from .timm_models import load_timm

    return Loaded(*load_timm(key, weights, trust_pickle=trust_pickle))


def _load_hf(key: str, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    from .hf_models import load_hf

    return Loaded(*load_hf(key, weights, trust=trust, trust_pickle=trust_pickle))


def _load_clip(key: str, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    """clip:FOLDER through the folder source (which checks it holds a CLIP model), clip:ORG/NAME from the hub."""
    from .clip_models import folder_of, load_clip_hub
    from .model_folders import load_folder

    folder = folder_of(key)
    if folder is not None:
        return Loaded(*load_folder(folder, weights, trust_pickle=trust_pickle, trust=trust, layout="clip"))
    return Loaded(*load_clip_hub(key, weights, trust=trust, trust_pickle=trust_pickle))


def _load_folder(key, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    from .model_folders import load_folder

    return Loaded(*load_folder(key, weights, trust_pickle=trust_pickle, trust=trust))


def _load_card(key, weights, *, trust_pickle: bool = False, trust: Trust = LOCAL) -> Loaded:
    from .cards import load_card

    return Loaded(*load_card(key, weights, trust_pickle=trust_pickle, trust=trust))


def _check_card(key) -> None:
    from .card_format import ModelCardError

    if not os.path.isfile(os.path.expanduser(os.fspath(key))):
        raise ModelCardError(f"Model card not found: {key}.")


def _sources() -> tuple[Source, ...]:
    from . import clip_models, hf_models, timm_models, torchvision_any
    from .card_format import is_card_key
    from .model_folders import is_folder_key, read_folder

    return (
        Source("builtin", _builtin, lambda key: None, _load_builtin),  # a card's head: `cards._builtin_with_head`
        Source("torchvision", torchvision_any.is_torchvision_key, torchvision_any.model_name, _load_torchvision,
               torchvision_any.card_arch),
        Source("timm", timm_models.is_timm_key, timm_models.timm_name, _load_timm,  # imports timm to check names
               timm_models.card_arch),
        Source("hf", hf_models.is_hf_key, hf_models.repo_id, _load_hf, hf_models.card_arch),
        Source("clip", clip_models.is_clip_key, clip_models.check_key, _load_clip),  # text prompts as targets
        Source("folder", is_folder_key, read_folder, _load_folder),
        Source("card", is_card_key, _check_card, _load_card),
    )


#: The model sources, in the order a key is matched (see the module docstring).
SOURCES: tuple[Source, ...] = _sources()


def source_of(key: str | os.PathLike) -> Source | None:
    """The first source in `SOURCES` that recognises `key`, or None."""
    return next((source for source in SOURCES if source.recognises(key)), None)


def unknown_key_error(key) -> UnknownModelError:
    """One sentence for a key no source recognises, saying what is accepted (and how to load a card's or folder's
    network, whose keys are not paths)."""
    from . import REGISTRY
    from .card_format import CARD_PREFIX
    from .model_folders import FOLDER_PREFIX

    if isinstance(key, str) and key.startswith(CARD_PREFIX):
        return UnknownModelError(f"{key!r} is the key of a model card's network; load it from its file: give the "
                                 "path of the card (.toml).")
    if isinstance(key, str) and key.startswith(FOLDER_PREFIX):
        return UnknownModelError(f"{key!r} is the key of a model folder's network; load it from the folder: give "
                                 "the folder's path.")
    return UnknownModelError(
        f"Unknown network {key!r}; give a registered key ({', '.join(REGISTRY)}), torchvision:NAME "
        "(any torchvision classifier, e.g. torchvision:resnet18), timm:NAME (any timm model), hf:ORG/NAME (a Hugging "
        "Face image classifier), clip:FOLDER or clip:ORG/NAME (a CLIP model, text prompts as targets), a model "
        "folder (timm's save_for_hf or transformers' save_pretrained) or a model "
        "card file (.toml).")
