"""What to explain, apart from how: small target objects every method takes (pytorch-grad-cam's habit).

    ClassTarget(281)                 one class: its logit (a softmax head), its label (a sigmoid head)
    LabelSetTarget((3, 17, 40))      several labels of a sigmoid (multi-label) head at once: the sum of their logits
    PromptTarget("a watermark")      a text prompt of a CLIP model (`networks.clip_models`): its cosine with the image

A plain int is a ClassTarget (`as_target`), so `method.attribute(network, x, 281)` keeps working. A target
knows the class indices it names (`indices`, checked against the network's outputs) and, for methods that
explain a logit, the one score it stands for (`score(logits)`: (N, classes) → (N, 1)). A PromptTarget names
no index by itself: `methods.base.check_target` resolves it on the network to the ClassTarget of that prompt's
index (`network.prompt_index`, which adds a new prompt), so every method then explains that output.
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


@dataclass(frozen=True)
class PromptTarget:
    """A text prompt of a CLIP model (M2IB): the image's cosine with the prompt's text embedding is explained.
    The text is cleaned as the network keeps prompts (`clip_models.clean_prompt`: stripped, inner runs of spaces
    made one); an empty or overlong prompt is a UserError."""

    text: str

    def __post_init__(self) -> None:
        from ..networks.clip_models import clean_prompt

        object.__setattr__(self, "text", clean_prompt(self.text))


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
    if isinstance(target, (ClassTarget, LabelSetTarget, PromptTarget)):
        return target
    return ClassTarget(_index(target))


__all__ = ["ClassTarget", "LabelSetTarget", "PromptTarget", "Target", "as_target"]
