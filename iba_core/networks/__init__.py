"""Networks: the registry of specs and loading a network ready to use.

    >>> from iba_core.networks import load_network
    >>> net = load_network("efficientnet_lite0")          # offline, pretrained
    >>> net.spec.layers, net.spec.default_layer, net.preprocess(image)

Adding a network is one module in this folder that defines `SPEC` (see `spec.NetworkSpec`) and one
line in `_FAMILIES` below. `network_from_module` wraps any other `nn.Module` with a derived spec.
"""
from __future__ import annotations

import os
from importlib import import_module

import torch
from torch import nn

from .spec import (
    LOGITS,
    Network,
    NetworkSpec,
    Preprocess,
    Stages,
    UnknownModelError,
    WeightsSource,
    WeightsUnavailableError,
    derive_spec,
    discover_layers,
)
from .weights import find_weights, missing_weights_message, weights_status

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
    key: str = DEFAULT_NETWORK,
    weights: str | os.PathLike | None = "pretrained",
    device: str | torch.device = "cpu",
) -> Network:
    """Build a registered network in eval mode, parameters frozen, on `device`.

    weights: "pretrained" (local file, hub cache, then download), "random" (untrained, for structure
    and speed tests), or a path to a state-dict file.
    """
    from .weights import load_state_dict

    spec = get_spec(key)
    if weights == "random":
        state, weights_id = None, "random"
    else:
        state, weights_id = load_state_dict(spec, None if weights in (None, "pretrained") else weights)
    if state is None:
        torch.manual_seed(0)  # random weights are reproducible so their statistics can be cached
    try:
        model = spec.build(state)
    except RuntimeError as err:  # mismatched state dict
        raise WeightsUnavailableError(f"The weights do not fit {spec.title}: {err}") from err
    device = torch.device(device)
    categories = spec.categories() if spec.categories else []
    return Network(spec, _ready(model, device), weights_id, device, Preprocess.of(spec), categories)


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
    """Any `nn.Module` classifier as a Network, with a spec derived by a dry forward pass unless given."""
    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else torch.device("cpu")
    device = torch.device(device)
    model = _ready(model, device)
    spec = spec or derive_spec(model, key, title)
    return Network(spec, model, weights_id, device, Preprocess.of(spec), list(categories or []))


__all__ = [
    "DEFAULT_NETWORK", "LOGITS", "REGISTRY", "Network", "NetworkSpec", "Preprocess", "Stages",
    "UnknownModelError", "WeightsSource", "WeightsUnavailableError", "derive_spec", "discover_layers",
    "find_weights", "get_spec", "load_network", "missing_weights_message", "network_from_module",
    "weights_status",
]
