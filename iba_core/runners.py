"""How the network runs around a bottleneck, the same for every bottleneck: the split path (the prefix once, the
suffix per step, `SplitRunner`) or the hook path (the whole network per step, a forward hook swapping the layer's
output for Z, `HookRunner`); and the key under which an "auto" precision choice is kept (`module_key`).
"""
from __future__ import annotations

import hashlib

import torch
from torch import nn

from .bottleneck import is_channels_last
from .errors import UserError
from .model_state import replaced_output


def fast_format(z: torch.Tensor) -> torch.Tensor:
    """channels_last lets oneDNN (CPU) and cuDNN pick faster convolution kernels for the suffix."""
    return z.contiguous(memory_format=torch.channels_last) if z.dim() == 4 else z


class SplitRunner:
    """Prefix once, suffix per step."""

    def __init__(self, prefix: nn.Module, suffix: nn.Module, channels_last: bool = True):
        self.prefix, self.suffix = prefix, suffix
        self.modules = (prefix, suffix)
        self.channels_last = channels_last  # CNN maps only: a token layout is the layer's own business

    def features(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.prefix(x)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        return self.suffix(fast_format(z) if self.channels_last else z.contiguous())

    def close(self) -> None:
        pass


class HookRunner:
    """The whole network each step; a forward hook swaps the layer's output for Z."""

    def __init__(self, model: nn.Module, layer: nn.Module):
        self.model, self.layer = model, layer
        self.modules = (model,)
        self._x: torch.Tensor | None = None

    #: A pass from Z replays the whole network on the image `features` saw: call `features` first (also before
    #: timing "auto" precision's workload).
    replays_input = True

    def features(self, x: torch.Tensor) -> torch.Tensor:
        self._x = x
        captured: list[torch.Tensor] = []

        def grab(out: torch.Tensor) -> torch.Tensor:
            captured.append(out.detach().clone())  # clone: a following in-place ReLU must not alter R
            return out

        with torch.no_grad(), replaced_output(self.layer, grab):
            self.model(x)
        if not captured:
            raise RuntimeError("The chosen layer did not run during the forward pass.")
        if len(captured) > 1:  # e.g. torchvision's ResNet blocks call one ReLU module three times
            raise UserError(
                f"The chosen layer runs {len(captured)} times in one forward pass (a shared module), so a "
                "bottleneck there would be ambiguous; choose a module that runs once."
            )
        return captured[0]

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        def swap(out: torch.Tensor) -> torch.Tensor:
            if out.shape[1:] != z.shape[1:]:
                raise RuntimeError(f"Layer output shape {tuple(out.shape)} does not match Z {tuple(z.shape)}.")
            # Z in the layer's own memory layout: an arbitrary network may `.view()` what follows the layer,
            # which fails on channels-last strides.
            return fast_format(z) if is_channels_last(out) else z.contiguous()

        copies = z.shape[0] // self._x.shape[0]
        x = (self._x.expand(z.shape[0], *self._x.shape[1:]) if self._x.shape[0] == 1
             else self._x.repeat_interleave(copies, dim=0))
        with replaced_output(self.layer, swap):
            return self.model(x)

    def close(self) -> None:
        self._x = None


def module_key(path: str, module: nn.Module) -> tuple:
    """The one key of an "auto" precision choice for a bottleneck built without a Network: what runs every step
    (the suffix, or the whole model on the hook path) by its structure (module names and classes) and size. Two
    bottlenecks built alike share the choice (on disk: nothing is kept in module state), so it is measured once,
    not per instance."""
    structure = "\n".join(f"{name}:{type(m).__module__}.{type(m).__qualname__}" for name, m in module.named_modules())
    return ("module", path, hashlib.sha1(structure.encode()).hexdigest()[:16],
            sum(p.numel() for p in module.parameters()))
