"""The one attribution interface every method shares (baselines, Per-Sample and Readout Bottleneck).

A method is an object with a `key`, a display `name` and attributes that pages and the CLI read:
`signed` (maps with meaningful negative values), `unit`, `cost` ("fast": a few network passes, or
"slow"), `needs_stats` (it needs feature statistics of a layer), `sanity_checkable` (the weight
randomisation check applies) and `available_for(network)` (None, or the reason it cannot run on that
network). One call:

    method.attribute(network, x, target) -> AttributionMap      # values (H, W), seconds, extra

A subclass implements `_compute(network, x, target)` returning the map as (H, W), (1, H, W) or
(1, 1, H, W), or (map, extra dict). `attribute` validates the image and the class, keeps the user's
network in eval mode with parameter gradients off (restored afterwards, also on errors), times the
call and returns a finite float32 (H, W) map. No hooks or gradients are left behind.

`network` is an `iba_core.networks.Network`, or anything with `.model` (and, optionally, `.device`,
`.categories`, `.spec`): tests use small hand-built networks that way.
"""
from __future__ import annotations

import copy
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from ..heads import class_logits, head_of
from ..model_state import frozen_eval, replaced_output

Cost = Literal["fast", "slow"]


@dataclass
class AttributionMap:
    """A method's map for one image, with what a view needs to draw it."""

    key: str
    name: str
    values: np.ndarray  # (H, W) float32
    signed: bool
    unit: str
    seconds: float
    extra: dict = field(default_factory=dict)  # method-specific numbers, e.g. the bottleneck's total bits


class Method:
    """Base class: identity, attributes, settings; `attribute` wraps `_compute`."""

    key: str = ""
    name: str = ""
    signed: bool = True
    unit: str = ""
    cost: Cost = "fast"
    needs_stats: bool = False
    #: Whether the cascading-randomisation sanity check applies: False for methods that fit something to
    #: the network's weights (a trained readout, estimated patterns) that a randomised copy would need
    #: fitted again (paper §4.3 leaves PatternAttribution out for this reason).
    sanity_checkable: bool = True
    #: One sentence for users: what a value in the map means.
    description: str = ""
    #: Whether the method explains the target's logit (gradients, CAM, LRP, occlusion): for a binary head (one
    #: output z) the network then answers with each class's log-odds [−z, z] during the call
    #: (`heads.class_logits`), so class 0 has a logit too. False for methods that read the head themselves.
    explains_logit: bool = True

    def __init__(self, **settings: Any):
        unknown = set(settings) - set(self.default_settings())
        if unknown:
            allowed = ", ".join(sorted(self.default_settings())) or "none"
            raise ValueError(f"{type(self).__name__} has no setting {', '.join(sorted(unknown))}; allowed: {allowed}.")
        self.settings: dict[str, Any] = {**self.default_settings(), **settings}

    @classmethod
    def default_settings(cls) -> dict[str, Any]:
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, {self.settings})"

    def with_settings(self, **overrides: Any) -> "Method":
        """A new instance of this method with some settings changed (the others kept)."""
        return type(self)(**{**self.settings, **overrides})

    def available_for(self, network) -> str | None:
        """None if the method can run on `network`, else one sentence saying why not."""
        return None

    # ---- the one public call ---------------------------------------------------------------
    def attribute(self, network, x: torch.Tensor, target: int) -> AttributionMap:
        """The map of class `target` for the preprocessed image x (1, 3, H, W)."""
        reason = self.available_for(network)
        if reason:
            raise ValueError(f"{self.name} is not available here: {reason}")
        start = time.perf_counter()
        model = network.model
        x = prepare_input(x, device_of(network))
        target = check_target(network, target)
        binary = self.explains_logit and head_of(network) == "binary"
        with frozen_eval(model), (replaced_output(model, lambda z: class_logits(z, "binary")) if binary
                                  else nullcontext()):
            if num_classes(network) is None:  # generic network: learn the class count from one pass
                with torch.no_grad():
                    n = model(x).shape[-1]
                if target >= n:
                    raise ValueError(f"Class index {target} is out of range 0…{n - 1}.")
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", module=r"captum\..*")
                result = self._compute(network, x, target)
        extra: dict = {}
        if isinstance(result, tuple):
            result, extra = result
        values = to_map(result, tuple(x.shape[-2:]), self.name)
        return AttributionMap(self.key, self.name, values, self.signed, self.unit,
                              time.perf_counter() - start, dict(extra))

    def _compute(self, network, x: torch.Tensor, target: int):  # pragma: no cover - abstract
        raise NotImplementedError


# ---- helpers ---------------------------------------------------------------------------------


def spec_of(network):
    """The network's spec (`iba_core.networks.NetworkSpec`), None for a bare wrapper of an nn.Module."""
    return getattr(network, "spec", None)


def device_of(network) -> torch.device:
    device = getattr(network, "device", None)
    if device is not None:
        return torch.device(device)
    param = next(network.model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def num_classes(network) -> int | None:
    categories = getattr(network, "categories", None)
    return len(categories) if categories else None


def prepare_input(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A detached float copy shaped (1, 3, H, W) on `device`: the caller's tensor is never touched."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Expected a torch.Tensor image, got {type(x).__name__}.")
    if x.dim() == 3:
        x = x[None]
    if x.dim() != 4 or x.shape[0] != 1:
        raise ValueError(f"Expected one image shaped (1, C, H, W), got {tuple(x.shape)}.")
    if not torch.isfinite(x).all():
        raise ValueError("The image contains NaN or infinite values.")
    return x.detach().to(device=device, dtype=torch.float32).clone()


def check_target(network, target) -> int:
    if isinstance(target, bool) or not isinstance(target, (int, np.integer)):
        if isinstance(target, torch.Tensor) and target.numel() == 1 and not target.is_floating_point():
            target = int(target)
        else:
            raise TypeError(f"The target class must be an integer index, got {target!r}.")
    target = int(target)
    n = num_classes(network)
    if target < 0 or (n is not None and target >= n):
        upper = f"{n - 1}" if n is not None else "the number of classes − 1"
        raise ValueError(f"Class index {target} is out of range 0…{upper}.")
    return target


def image_mean(x: torch.Tensor) -> torch.Tensor:
    """The image's mean colour, (1, C, 1, 1): the reference for Occlusion and Integrated Gradients."""
    return x.mean(dim=(2, 3), keepdim=True)


def sum_channels(t: torch.Tensor) -> torch.Tensor:
    """(1, C, H, W) → (H, W), signed sum over colour channels."""
    return t.detach()[0].sum(dim=0)


def max_abs_channels(t: torch.Tensor) -> torch.Tensor:
    """(1, C, H, W) → (H, W), max over colour channels of the absolute value (Simonyan et al.)."""
    return t.detach()[0].abs().amax(dim=0)


def to_map(values, size: tuple[int, int], name: str) -> np.ndarray:
    """A finite float32 (H, W) array, or a clear error."""
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    arr = np.asarray(values, dtype=np.float32)
    while arr.ndim > 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.shape != tuple(size):
        raise RuntimeError(f"{name} produced a map shaped {arr.shape}, expected {tuple(size)}.")
    if not np.isfinite(arr).all():
        raise RuntimeError(f"{name} produced non-finite values (NaN or ∞); the network may be unsuitable.")
    return np.ascontiguousarray(arr)


_ACTIVATIONS_WITH_INPLACE = (nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.LeakyReLU, nn.ELU, nn.SiLU, nn.Hardswish)


def working_copy(model: nn.Module) -> nn.Module:
    """A private deep copy for methods that must change the network (hooks on activations, merged BatchNorms).

    Eval mode, no parameter gradients, in-place activations switched off. The user's network is never
    modified, and a second session sharing it is never disturbed. Hooks registered on the user's network
    are copied too (PyTorch's deepcopy semantics), so the copy computes the same function.
    """
    try:
        clone = copy.deepcopy(model)
    except Exception as err:  # e.g. non-leaf tensors stored as attributes
        raise RuntimeError(f"This method needs a private copy of the network, but it cannot be copied: {err}") from err
    clone.eval()
    for p in clone.parameters():
        p.requires_grad_(False)
        p.grad = None
    for m in clone.modules():
        if isinstance(m, _ACTIVATIONS_WITH_INPLACE) and getattr(m, "inplace", False):
            m.inplace = False
    return clone
