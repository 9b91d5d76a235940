"""What to explain, apart from how: small target objects every method takes (pytorch-grad-cam's habit).

    ClassTarget(281)                 one class: its logit (a softmax head), its label (a sigmoid head)
    LabelSetTarget((3, 17, 40))      several labels of a sigmoid (multi-label) head at once: the sum of their logits

A plain int is a ClassTarget (`as_target`), so `method.attribute(network, x, 281)` keeps working. A target
knows the class indices it names (`indices`, checked against the network's outputs) and, for methods that
explain a logit, the one score it stands for (`score(logits)`: (N, classes) → (N, 1)). Later kinds (a text
prompt, a set of layers) add a class here with the same two answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
import torch

from ..errors import UserError


@dataclass(frozen=True)
class ClassTarget:
    """One class by its index: the usual "explain class k"."""

    index: int

    @property
    def indices(self) -> tuple[int, ...]:
        return (self.index,)

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, 1): the class's logit."""
        return logits[..., self.index:self.index + 1]


@dataclass(frozen=True)
class LabelSetTarget:
    """Several labels at once (a sigmoid, multi-label head): the sum of their logits is explained."""

    labels: tuple[int, ...]

    def __post_init__(self) -> None:
        labels = tuple(dict.fromkeys(_index(i) for i in self.labels))
        if not labels:
            raise UserError("Name at least one label to explain.")
        object.__setattr__(self, "labels", labels)

    @property
    def indices(self) -> tuple[int, ...]:
        return self.labels

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """(N, 1): the sum of the labels' logits."""
        return logits[..., list(self.labels)].sum(dim=-1, keepdim=True)


Target = Union[ClassTarget, LabelSetTarget]


def _index(value: object) -> int:
    """A class index from an int, a numpy integer or a one-element integer tensor; a TypeError otherwise (front
    ends turn what a person typed into an index first, so anything else is a caller's bug)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"The target class must be an integer index, got {value!r}.")
    return int(value)


def as_target(target: object) -> Target:
    """A target object from a target or a class index (int, numpy integer, one-element integer tensor)."""
    if isinstance(target, (ClassTarget, LabelSetTarget)):
        return target
    return ClassTarget(_index(target))


__all__ = ["ClassTarget", "LabelSetTarget", "Target", "as_target"]
