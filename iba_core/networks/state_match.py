"""Which source a state dict fits, for the message of one that does not fit the architecture it was given to.

A file refused by `state_files.fit_state_dict` is often right for another source: a fine-tuned EfficientNet-Lite0
given as a torchvision ResNet-50. `fitting_sources` compares the state's key names and shapes with

- the built-in backbones with a head of their own (`NetworkSpec.with_classes`, the card's `arch = "<key>"`), then
- torchvision's classifiers (`torchvision:NAME`),

each built once with a probe head of `PROBE_CLASSES` outputs: the tensors of that length must have one other length
in the state (its number of classes), every other tensor the same shape.

Models are built on the meta device (shapes only: no memory, no arithmetic). torchvision's builders are
grouped by their module (resnet, efficientnet, vgg, …): a family is only tried when one member's key names, with
their numbers left out, share at least `FAMILY_SHARE` of the state's; the whole search stops after `BUDGET_S`
seconds. Measured on 2 CPU cores shared with other jobs, in a fresh process: 1.2–1.5 s for an EfficientNet-Lite0
state (the built-ins come first), 2–3 s for a torchvision ResNet or Swin (1.2 s or more of it building the families'
first members); a large EfficientNet (b7, v2_l) comes late in its family and may go unnamed within the budget.
Signatures are kept for the process, so a later search takes milliseconds. Builders that cannot build on the meta
device (torchvision's RegNets compute their widths with tensors) are skipped.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Mapping

import torch

from .model_size import on_meta
#: The longest the search may take, in seconds (it runs only for a refused file).
BUDGET_S = 3.0
#: A torchvision family is tried when its first member's key patterns cover this share of the state's.
FAMILY_SHARE = 0.5
#: The most classes a match may have (`card_format.MAX_CLASSES`).
MAX_OUTPUTS = 100_000
#: The head size of the probe builds: a prime no other layer is as wide as by chance, so the tensors sized by the
#: class count are the ones this long.
PROBE_CLASSES = 1009

Signature = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class SourceFit:
    """A source a state dict fits: a built-in backbone or a torchvision classifier, with `classes` outputs."""

    kind: Literal["builtin", "torchvision"]
    arch: str
    classes: int

    @property
    def card_arch(self) -> str:
        """The model card's arch entry for it."""
        return self.arch if self.kind == "builtin" else f"torchvision:{self.arch}"

    def describe(self) -> str:
        """In words: "the built-in EfficientNet-Lite0 backbone with a 5-class head"."""
        if self.kind == "builtin":
            from . import REGISTRY

            return f"the built-in {REGISTRY[self.arch].title.split(' (')[0]} backbone with a {self.classes}-class head"
        return f"torchvision's {self.arch} with a {self.classes}-class head"


def _signature_of(model: torch.nn.Module) -> Signature:
    return tuple((k, tuple(v.shape)) for k, v in model.state_dict().items())


@lru_cache(maxsize=None)
def _builtin_signature(key: str) -> Signature | None:
    """The built-in backbone `key` with a probe head (`PROBE_CLASSES`), as key names and shapes."""
    from . import REGISTRY

    model = on_meta(lambda: REGISTRY[key].with_classes(PROBE_CLASSES))
    return _signature_of(model) if model is not None else None


@lru_cache(maxsize=None)
def _torchvision_signature(name: str) -> Signature | None:
    """torchvision's `name` with `PROBE_CLASSES` classes, as key names and shapes (None: it cannot build on meta)."""
    from torchvision.models import get_model_builder

    model = on_meta(lambda: get_model_builder(name)(weights=None, num_classes=PROBE_CLASSES))
    return _signature_of(model) if model is not None else None


def _classes_if_fits(signature: Signature | None, wanted: Mapping[str, tuple[int, ...]]) -> int | None:
    """The number of classes with which a probe build's `signature` has exactly `wanted`'s key names and shapes
    (the tensors sized by the class count, `PROBE_CLASSES` long in the probe, all of one other length), else None.
    Compared by name, not order: a safetensors file lists its keys sorted."""
    if signature is None or len(signature) != len(wanted):
        return None
    classes = None
    for key, shape in signature:
        got = wanted.get(key)
        if got is None or len(got) != len(shape):
            return None
        if shape[:1] == (PROBE_CLASSES,):  # sized by the head: any count, the same for every such tensor
            if got[1:] != shape[1:] or classes not in (None, got[0]):
                return None
            classes = got[0]
        elif got != shape:
            return None
    return classes if classes is not None and 1 <= classes <= MAX_OUTPUTS else None


def _patterns(keys) -> frozenset[str]:
    """Key names with their numbers left out ("layer1.0.conv1.weight" → "layer#.#.conv#.weight"): alike across the
    members of a family (resnet18 and resnet50 share most), unlike between families."""
    return frozenset(re.sub(r"\d+", "#", k) for k in keys)


@lru_cache(maxsize=1)
def _torchvision_families() -> tuple[tuple[str, ...], ...]:
    """torchvision's classifiers grouped by the module that defines them (resnet, efficientnet, vgg, …), each group in
    natural order."""
    from torchvision.models import get_model_builder

    from .torchvision_any import classification_models

    families: dict[str, list[str]] = {}
    for name in sorted(classification_models(), key=_natural):
        families.setdefault(get_model_builder(name).__module__, []).append(name)
    return tuple(tuple(names) for names in families.values())


def _natural(name: str) -> list:
    """Sort key with numbers as numbers: resnet18, resnet34, resnet50, resnet101 (the smaller, quicker to build and
    more often fine-tuned, first)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


@lru_cache(maxsize=None)
def _family_patterns(family: tuple[str, ...]) -> frozenset[str] | None:
    """The key patterns of the family's first member that builds on the meta device (None: none does)."""
    for name in family:
        signature = _torchvision_signature(name)
        if signature is not None:
            return _patterns(k for k, _ in signature)
    return None


def fitting_sources(state: Mapping[str, torch.Tensor], *, budget_s: float = BUDGET_S,
                    first_only: bool = False) -> list[SourceFit]:
    """The sources whose key names and shapes `state` has exactly, with the head size read from it, built-in
    backbones first; [] when none does. Stops after `budget_s` seconds (what is found by then is returned)."""
    from . import REGISTRY

    wanted = {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}
    if not wanted:
        return []
    deadline = time.perf_counter() + budget_s
    found: list[SourceFit] = []
    for key in (k for k, spec in REGISTRY.items() if spec.with_classes):  # those a card may name as its arch
        classes = _classes_if_fits(_builtin_signature(key), wanted)
        if classes is not None:
            found.append(SourceFit("builtin", key, classes))
            if first_only:
                return found
    patterns = _patterns(wanted)
    scored = []
    for family in _torchvision_families():
        if time.perf_counter() > deadline:
            return found
        family_patterns = _family_patterns(family)
        if family_patterns is not None:
            share = len(patterns & family_patterns) / len(patterns)
            if share >= FAMILY_SHARE:
                scored.append((share, family))
    for _, family in sorted(scored, key=lambda item: -item[0]):  # the likeliest family first
        for name in family:
            if time.perf_counter() > deadline:
                return found
            classes = _classes_if_fits(_torchvision_signature(name), wanted)
            if classes is not None:
                found.append(SourceFit("torchvision", name, classes))
                if first_only:
                    return found
    return found


def source_hint(state: Mapping[str, torch.Tensor], *, budget_s: float = BUDGET_S) -> tuple[str, str, str] | None:
    """(the clause for the refusal's sentence, the CLI's hint, the app's hint) naming the first source `state`
    fits, or None when none does: "; these weights look like the built-in EfficientNet-Lite0 backbone with a
    5-class head"."""
    fits = fitting_sources(state, budget_s=budget_s, first_only=True)
    if not fits:
        return None
    fit = fits[0]
    source = "Built-in backbone with your head" if fit.kind == "builtin" else "torchvision classifier"
    return (f"; these weights look like {fit.describe()}",
            f"Write arch = \"{fit.card_arch}\" in the model card, with a class list of {fit.classes} names.",
            f"Choose that source (\"{source}\", {fit.arch}) with a class list of {fit.classes} names.")
