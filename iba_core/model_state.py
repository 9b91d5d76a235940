"""Context managers that leave a user's model exactly as they found it."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

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


@contextmanager
def replaced_output(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Forward hook that replaces `module`'s output by fn(output); removed on exit, also on error."""
    handle = module.register_forward_hook(lambda _m, _inp, out: fn(out))
    try:
        yield
    finally:
        handle.remove()
