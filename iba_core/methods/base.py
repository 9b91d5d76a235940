"""The one attribution interface every method shares (baselines, Per-Sample and Readout Bottleneck).

A method is an object with a `key`, a display `name` and attributes that pages and the CLI read:
`signed` (maps with meaningful negative values), `unit`, `cost` ("fast": a few network passes, or
"slow"), `needs_stats` (it needs feature statistics of a layer), `sanity_checkable` (the weight
randomisation check applies) and `available_for(network)` (None, or the reason it cannot run on that
network). One call:

    method.attribute(network, x, target) -> AttributionMap              # values (H, W), seconds, extra
    method.attribute_batch(network, x[B], targets) -> [AttributionMap]   # the same maps, for B images

The target says what to explain, apart from how (`targets.py`): a class index (an int is a `ClassTarget`) or
a `LabelSetTarget` for a sigmoid head. A subclass implements `_compute(network, x, target)` returning the map
as (H, W), (1, H, W) or (1, 1, H, W), or (map, extra dict); one that is faster on a batch also sets `batched`
and implements `_compute_batch(network, x[B], targets)` (a list of such results). `prepare(network)` does what
must happen before the first image (a no-op by default). Both calls validate the images and the targets, keep
the user's network in eval mode with parameter gradients off (restored afterwards, also on errors), time the
call and return finite float32 (H, W) maps. No hooks or gradients are left behind.

Settings are parameters (`get_method(key, **settings)`, `with_settings`); registry keys are named presets of
a class and settings, and a method's `key` names its settings where they differ from its preset's.

`network` is an `iba_core.networks.Network`, or anything with `.model` (and, optionally, `.device`,
`.categories`, `.spec`): tests use small hand-built networks that way.
"""
from __future__ import annotations

import copy
import time
import warnings
from contextlib import nullcontext
from typing import Any, Callable, Literal, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from ..heads import class_logits, head_of
from ..model_state import frozen_eval, replaced_output
from ..results import AttributionMap
from .targets import ClassTarget, LabelSetTarget, PromptTarget, Target, as_target

Cost = Literal["fast", "slow"]


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
            raise UserError(f"{type(self).__name__} has no setting {', '.join(sorted(unknown))}; allowed: {allowed}.")
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

    #: Network passes of one map, for `forward_passes`: a forward and a backward pass (a backward counts as one).
    PASSES = 2

    def forward_passes(self, network, height: int, width: int) -> int:
        """About how many passes of one image through the network one map of a `height` × `width` input costs (a
        backward pass counts as one more), before anything runs: what `iba_core.budget` holds a request to. One
        forward and one backward pass unless a method says otherwise; a method fitted once per network
        (statistics, patterns, a readout) counts its maps only."""
        return self.PASSES

    def settings_identity(self, network) -> dict:
        """The settings as they decide the maps on `network`, as plain values (a run folder records them and
        refuses to mix maps made otherwise): the settings themselves unless a method resolves some."""
        return dict(self.settings)

    def bottleneck_layers(self, network) -> list[str]:
        """The layers where the method places a bottleneck on `network`, first to last ([] for a method without
        one); a run records the first (its information is counted there)."""
        return []

    def layers_read(self, network) -> list[str]:
        """The layers the method's maps are made at on `network`, first to last, as a report names them per method
        (a run records them beside the method's settings): its bottleneck's layers, a CAM's target layer; [] for a
        method that reads the whole network."""
        return self.bottleneck_layers(network)

    #: Whether `_compute_batch` computes a batch faster than image by image (one pass, one private copy of the
    #: network); otherwise `attribute_batch` runs `attribute` per image. Either way a batch's maps equal the
    #: images' maps one by one (up to float rounding).
    batched: bool = False
    #: Whether the method can explain a `LabelSetTarget` (the sum of several logits): the methods that explain a
    #: logit of the network as it runs. The bottlenecks read the head themselves; they explain one class.
    takes_label_sets: bool = True

    # ---- the public calls ------------------------------------------------------------------
    def prepare(self, network) -> None:
        """Everything the method needs before its first image on `network` (statistics, a checkpoint), so a
        folder run fails before any image rather than on every one; a no-op for most methods."""

    def attribute(self, network, x: torch.Tensor, target: int | Target) -> AttributionMap:
        """The map of `target` (a class index or a target object) for the preprocessed image x (1, C, H, W)."""
        return self._run(network, prepare_input(x, device_of(network)), [target])[0]

    def attribute_batch(self, network, x: torch.Tensor, targets: Sequence[int | Target]) -> list[AttributionMap]:
        """The maps of x[i] (B, C, H, W) for targets[i]: what `attribute` gives each image alone, computed at once
        where the method batches (`batched`), else image by image."""
        x = prepare_batch(x, device_of(network))
        targets = list(targets)
        if len(targets) != x.shape[0]:
            raise ValueError(f"{x.shape[0]} images but {len(targets)} targets.")
        if not self.batched or any(isinstance(as_target(t), LabelSetTarget) for t in targets):
            return [self.attribute(network, x[i:i + 1], t) for i, t in enumerate(targets)]
        return self._run(network, x, targets)

    def _run(self, network, x: torch.Tensor, targets: list) -> list[AttributionMap]:
        """Check, run `_compute_batch` with the user's network frozen (restored afterwards, also on errors), and
        turn its results into maps. x is prepared (on the device, a private copy)."""
        reason = self.available_for(network)
        if reason:
            raise UserError(f"{self.name} is not available here: {reason}")
        start = time.perf_counter()
        model = network.model
        chosen = [check_target(network, t) for t in targets]
        label_set = next((t for t in chosen if isinstance(t, LabelSetTarget)), None)
        if label_set is not None and not self.takes_label_sets:
            raise UserError(f"{self.name} explains one class at a time, not a set of labels.")
        binary = self.explains_logit and head_of(network) == "binary"
        view = _output_view(binary, label_set)
        with frozen_eval(model):
            if num_classes(network) is None:  # generic network: learn the class count from one pass
                with torch.no_grad(), _viewed(model, _output_view(binary, None)):
                    n = model(x[:1]).shape[-1]
                top = max(max(t.indices) for t in chosen)
                if top >= n:
                    raise UserError(f"Class index {top} is out of range 0…{n - 1}.")
            with _viewed(model, view), warnings.catch_warnings():
                warnings.filterwarnings("ignore", module=r"captum\..*")
                results = self._compute_batch(network, x, [0 if label_set is not None else t.index for t in chosen])
        seconds = (time.perf_counter() - start) / len(chosen)
        maps = []
        for result in results:
            extra: dict = {}
            if isinstance(result, tuple):
                result, extra = result
            maps.append(AttributionMap(self.key, self.name, to_map(result, tuple(x.shape[-2:]), self.name),
                                       self.signed, self.unit, seconds, dict(extra)))
        return maps

    def _compute_batch(self, network, x: torch.Tensor, targets: list[int]) -> list:
        """The maps of a batch (one per image, each as `_compute` returns it); image by image unless overridden."""
        return [self._compute(network, x[i:i + 1], t) for i, t in enumerate(targets)]

    def _compute(self, network, x: torch.Tensor, target: int):  # pragma: no cover - abstract
        raise NotImplementedError


def _output_view(binary: bool, label_set: LabelSetTarget | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """How the network answers during a call, or None (as it is): a binary head's one output z as the class
    log-odds [−z, z] (`heads.class_logits`), then a label set's one score (explained as class 0)."""
    if not binary and label_set is None:
        return None

    def view(z: torch.Tensor) -> torch.Tensor:
        z = class_logits(z, "binary") if binary else z
        return z if label_set is None else label_set.score(z)

    return view


def _viewed(model: nn.Module, view: Callable[[torch.Tensor], torch.Tensor] | None):
    """The model answering through `view` for the duration (the hook removed afterwards), or unchanged."""
    return replaced_output(model, view) if view is not None else nullcontext()


# ---- helpers ---------------------------------------------------------------------------------


def key_number(value: float) -> str:
    """A setting's number as part of a method key: 5 → "5", 0.1 → "0_1" (keys name non-preset settings)."""
    return f"{value:g}".replace(".", "_")


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
    """A detached float copy shaped (1, C, H, W) on `device`: the caller's tensor is never touched."""
    if isinstance(x, torch.Tensor) and x.dim() == 3:
        x = x[None]
    x = prepare_batch(x, device)
    if x.shape[0] != 1:
        raise ValueError(f"Expected one image shaped (1, C, H, W), got {tuple(x.shape)}.")
    return x


def prepare_batch(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A detached float copy shaped (B, C, H, W) on `device`: the caller's tensor is never touched."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Expected a torch.Tensor image, got {type(x).__name__}.")
    if x.dim() != 4 or x.shape[0] < 1:
        raise ValueError(f"Expected images shaped (B, C, H, W), got {tuple(x.shape)}.")
    if not torch.isfinite(x).all():
        raise UserError("The image contains NaN or infinite values.")
    return x.detach().to(device=device, dtype=torch.float32).clone()


#: What a prompt target on a network without prompts says.
PROMPTS_NEED_CLIP = ("Text prompts need a CLIP model (clip:FOLDER, a CLIPModel saved with save_pretrained, or "
                     "clip:ORG/NAME); this network is a classifier: explain a class instead.")


def check_target(network, target) -> Target:
    """The target as an object, its class indices within the network's outputs (a UserError saying the range).

    A PromptTarget becomes the ClassTarget of the prompt's index on a CLIP network (`network.prompt_index`, the
    prompt added when new); on any other network it is a UserError (PROMPTS_NEED_CLIP)."""
    target = as_target(target)
    if isinstance(target, PromptTarget):
        prompt_index = getattr(network, "prompt_index", None)
        if prompt_index is None:
            raise UserError(PROMPTS_NEED_CLIP)
        return ClassTarget(prompt_index(target.text))
    n = num_classes(network)
    for index in target.indices:
        if index < 0 or (n is not None and index >= n):
            upper = f"{n - 1}" if n is not None else "the number of classes − 1"
            raise UserError(f"Class index {index} is out of range 0…{upper}.")
    return target


def image_mean(x: torch.Tensor) -> torch.Tensor:
    """The image's mean colour, (1, C, 1, 1): the reference for Occlusion and Integrated Gradients."""
    return x.mean(dim=(2, 3), keepdim=True)


def sum_channels(t: torch.Tensor) -> torch.Tensor:
    """(1, C, H, W) → (H, W), signed sum over colour channels ((B, C, H, W) → (B, H, W) for a batch)."""
    t = t.detach().sum(dim=1)
    return t[0] if t.shape[0] == 1 else t


def max_abs_channels(t: torch.Tensor) -> torch.Tensor:
    """(1, C, H, W) → (H, W), max over colour channels of the absolute value (Simonyan et al.); (B, H, W) for a
    batch."""
    t = t.detach().abs().amax(dim=1)
    return t[0] if t.shape[0] == 1 else t


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
