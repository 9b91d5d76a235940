"""Networks: the registry of specs and loading a network ready to use.

    >>> from iba_core.networks import load_network
    >>> net = load_network("efficientnet_lite0")          # offline, pretrained
    >>> net.spec.layers, net.spec.default_layer, net.preprocess(image)

Adding a network is one module in this folder that defines `SPEC` (see `spec.NetworkSpec`) and one
line in `_FAMILIES` below; adding a model source is one entry in `sources.SOURCES`, the one registry every key goes
through. Without code: `load_network("torchvision:NAME")` (any torchvision
classifier, `torchvision_any.py`), `load_network("timm:NAME")` (any timm model, `timm_models.py`),
`load_network("hf:ORG/NAME")` (a Hugging Face image classifier, `hf_models.py`), `load_network("clip:FOLDER")`
(a CLIP model answering with its similarity to text prompts, `clip_models.py`), `load_network("path/to/folder")`
(a model folder timm's save_for_hf or transformers' save_pretrained wrote, `model_folders.py`) or
`load_network("path/to/card.toml")` (a model card: your architecture, weights and class list, `cards.py`; weights
are read safely, `state_files.py`). timm and transformers are imported only for their models.
`network_from_module` wraps any other `nn.Module` with a derived spec.
"""
from __future__ import annotations

import os
from importlib import import_module

import torch
from torch import nn

from .network import Network
from .spec import (
    LOGITS,
    NetworkSpec,
    Preprocess,
    Stages,
    UnknownModelError,
    WeightsSource,
    WeightsUnavailableError,
    derive_spec,
)
from .card_format import ModelCardError, read_card, read_class_list
from .hub import HubUnavailableError
from .model_size import ModelTooLargeError
from .model_folders import FolderError, load_folder
from .state_files import UnsafeWeightsError, WeightsMismatchError
from .weights import find_weights, missing_weights_error, weights_status
from .sources import SOURCES, Source, source_of, unknown_key_error
from ..trust import LOCAL, Trust

#: Modules of this package that define a SPEC, in display order.
_FAMILIES = ("efficientnet_lite", "resnet", "vgg")

REGISTRY: dict[str, NetworkSpec] = {}
for _name in _FAMILIES:
    _spec = import_module(f".{_name}", __name__).SPEC
    REGISTRY[_spec.key] = _spec

DEFAULT_NETWORK = "efficientnet_lite0"


def get_spec(key: str) -> NetworkSpec:
    """The registry entry for `key`, or a clear error listing the known networks."""
    try:
        return REGISTRY[key]
    except KeyError:
        titles = "; ".join(f"{k} ({s.title})" for k, s in REGISTRY.items())
        raise UnknownModelError(f"Unknown network {key!r}; choose one of: {titles}.") from None


def _ready(model: nn.Module, device: torch.device) -> nn.Module:
    model = model.eval().to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def load_network(
    key: str | os.PathLike = DEFAULT_NETWORK,
    weights: str | os.PathLike | None = "pretrained",
    device: str | torch.device = "cpu",
    *,
    trust_pickle: bool = False,
    trust: Trust = LOCAL,
) -> Network:
    """Build a network in eval mode, parameters frozen, on `device`. The key's form picks the source (`sources`, in
    this order):

    - a registered key (`REGISTRY`, e.g. "efficientnet_lite0");
    - "torchvision:NAME": any torchvision classifier (`torchvision_any`);
    - "timm:NAME": any timm model (`timm_models`);
    - "hf:ORG/NAME": a Hugging Face image classifier (`hf_models`);
    - "clip:FOLDER" or "clip:ORG/NAME": a CLIP model, its outputs the cosines with text prompts (`clip_models`);
    - a folder: a model folder in timm's or transformers' layout (`model_folders`): its key is "folder:<name>";
    - a model card, a path ending in .toml (`cards`): its network's key is "card:<name>".

    weights: "pretrained" (local file, hub cache, then download; a card's or folder's own file), "random"
    (untrained, for structure and speed tests), or a path to a state-dict file (.pth/.pt, or .safetensors for
    any network but the built-ins). Files are read with weights_only=True: a pickled whole module is
    refused unless `trust_pickle=True` (the CLI's --trust-pickle; the app never passes it).

    trust: what a model card may do (`iba_core.trust`): run a code builder only with `trust.code` (the CLI's
    --trust-code, the app's IBA_TRUST_CODE=1), name paths outside its folder only where allowed. Default:
    the local user's (any path), without code. Random weights are seeded in a forked RNG: the same weights
    every time, the process's global RNG untouched. Every network but the three fixed built-ins is counted on the meta
    device before it is built and refused above IBA_MAX_PARAMS (`model_size`).
    """
    source = source_of(key)
    if source is None:
        raise unknown_key_error(key)
    spec, model, weights_id, categories = source.load(key, weights, trust_pickle=trust_pickle, trust=trust)
    device = torch.device(device)
    kind = Network
    if spec.head == "similarity":  # a CLIP model: its categories are text prompts (`clip_models`)
        from .clip_models import ClipNetwork as kind
    return kind(spec, _ready(model, device), weights_id, device, Preprocess.of(spec), categories)


def check_network_key(key: str) -> str:
    """`key` if `load_network` accepts its form (a registered key, torchvision:NAME with a classifier
    NAME, timm:NAME with a timm model NAME, hf:ORG/NAME, a model folder, an existing .toml file), else a clear
    error saying what is accepted. Loads no network (timm:NAME imports timm to check the name)."""
    source = source_of(key)
    if source is None:
        raise unknown_key_error(key)
    source.check(key)
    return key


def network_from_module(
    model: nn.Module,
    key: str,
    *,
    title: str | None = None,
    categories: list[str] | None = None,
    weights_id: str = "custom",
    device: str | torch.device | None = None,
    spec: NetworkSpec | None = None,
) -> Network:
    """Any `nn.Module` classifier as a Network, with a spec derived by a dry forward pass unless given (its input
    channels those of its first convolution; ImageNet's mean and std, averaged for other than 3 channels)."""
    from .spec import IMAGENET_MEAN, IMAGENET_STD, fit_channels, input_channels_of

    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
    device = torch.device(device)
    model = _ready(model, device)
    channels = input_channels_of(model)
    spec = spec or derive_spec(model, key, title, channels=channels, mean=fit_channels(IMAGENET_MEAN, channels),
                               std=fit_channels(IMAGENET_STD, channels))
    return Network(spec, model, weights_id, device, Preprocess.of(spec), list(categories or []))


__all__ = [
    "DEFAULT_NETWORK", "LOGITS", "REGISTRY", "FolderError", "HubUnavailableError", "ModelCardError",
    "ModelTooLargeError", "Network", "NetworkSpec", "Preprocess", "Stages", "Trust", "UnknownModelError", "UnsafeWeightsError", "WeightsMismatchError",
    "WeightsSource", "WeightsUnavailableError",
    "SOURCES", "Source", "check_network_key", "derive_spec", "find_weights", "get_spec", "load_folder", "load_network",
    "missing_weights_error", "network_from_module", "read_card", "read_class_list",
    "weights_status",
]
