"""Context managers that leave a user's model exactly as they found it."""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch import nn


@contextmanager
def frozen_eval(*modules: nn.Module) -> Iterator[None]:
    """Eval mode and no parameter gradients inside; flags, requires_grad and .grad restored after.

    Restoring happens in `finally`, so an exception mid-run leaves the model untouched too.
    """
    seen: set[int] = set()
    mods, params = [], []
    for module in modules:
        for m in module.modules():
            if id(m) not in seen:
                seen.add(id(m))
                mods.append((m, m.training))
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append((p, p.requires_grad, p.grad))
    try:
        for m, _ in mods:
            m.training = False
        for p, _, _ in params:
            p.requires_grad_(False)
        yield
    finally:
        for m, flag in mods:
            m.training = flag
        for p, flag, grad in params:
            p.requires_grad_(flag)
            p.grad = grad


def layer_tensor(output: Any) -> torch.Tensor | None:
    """A layer's output as a tensor: the output itself, or the first element of a tuple, list or mapping (blocks of
    transformers' Swin return (hidden states, attention weights); a ModelOutput is a mapping); None when there is
    no tensor there."""
    if isinstance(output, Mapping):
        output = next(iter(output.values()), None)
    elif isinstance(output, (tuple, list)):
        output = output[0] if output else None
    return output if isinstance(output, torch.Tensor) else None


def with_layer_tensor(output: Any, tensor: torch.Tensor) -> Any:
    """`output` with its layer tensor (`layer_tensor`) replaced by `tensor`, in a container of the same kind."""
    if isinstance(output, torch.Tensor):
        return tensor
    if isinstance(output, Mapping):
        first = next(iter(output))
        return type(output)(**{**output, first: tensor})
    if isinstance(output, list):
        return [tensor, *output[1:]]
    return (tensor, *output[1:])


@contextmanager
def replaced_output(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Forward hook that replaces `module`'s output by fn(output) (its layer tensor, for a module that returns a
    tuple: `layer_tensor`); removed on exit, also on error."""
    handle = module.register_forward_hook(lambda _m, _inp, out: with_layer_tensor(out, fn(layer_tensor(out))))
    try:
        yield
    finally:
        handle.remove()
