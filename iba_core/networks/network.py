"""A network ready to use (`Network`): the model with its spec, its layer table found once, how a layer's prefix and
suffix are cut (the spec's stages, `torch.fx`, or a forward hook), what it keeps in memory (`NetworkCache`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..model_state import layer_tensor
from ..network_cache import NetworkCache
from .spec import LayerInfo, NetworkSpec, Preprocess, Stages, find_layers, transformer_blocks
from .tokens import MAP, FeatureLayout


@dataclass
class Network:
    """A network ready to use: eval mode, on `device`, with its spec and metadata."""

    spec: NetworkSpec
    model: nn.Module
    weights_id: str  # "random" or the weights file's name: part of the statistics cache key
    device: torch.device
    preprocess: Preprocess
    categories: list[str]
    #: Objects derived from this network and kept with it (folded splits, readout passes, loaded readouts,
    #: "auto" precision choices): a typed cache with a bound per kind (`network_cache.NetworkCache`); they live
    #: and die with the network, so nothing is cached in module globals.
    memo: NetworkCache = field(default_factory=NetworkCache, repr=False)

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def can_split(self) -> bool:
        """Whether the network has a registered stage list to cut (`split_path` also finds torch.fx cuts)."""
        return self.spec.stages is not None

    def stages(self) -> Stages:
        if self.spec.stages is None:
            raise ValueError(f"{self.spec.title} has no stage list; use the hook path.")
        return self.spec.stages(self.model)

    def split(self, layer: str) -> tuple[nn.Sequential, nn.Sequential]:
        """(prefix, suffix): prefix(x) is the layer's output, suffix(prefix(x)) the logits."""
        self.spec.check_layer(layer)
        stages = self.stages()
        idx = next(i for i, (name, _) in enumerate(stages) if name == layer)
        prefix = nn.Sequential(*(m for _, m in stages[: idx + 1]))
        suffix = nn.Sequential(*(m for _, m in stages[idx + 1 :]))
        return prefix, suffix

    def fast_split(self, layer: str) -> tuple[nn.Module, nn.Module]:
        """Like `split`, with BatchNorms folded into convolutions (same function, faster).

        Built once per layer and kept: the Per-Sample Bottleneck runs the suffix many times.
        """
        def make() -> tuple[nn.Module, nn.Module]:
            from ..fast import fold_batchnorms

            prefix, suffix = self.split(layer)
            return fold_batchnorms(prefix), fold_batchnorms(suffix)

        return self.memo.splits.get_or_make(("stages", layer), make)

    def prefix(self, layer: str) -> nn.Module:
        """The network up to and including `layer` (BatchNorms folded where it can be split)."""
        if self.can_split:
            return self.fast_split(layer)[0]
        return _HookPrefix(self.model, self.hook_module(layer))

    def hook_module(self, layer: str) -> nn.Module:
        """The module whose output is `layer` (for the generic hook path)."""
        self.spec.check_layer(layer)
        return self.model.get_submodule(self.spec.hook_modules.get(layer, layer))

    def layout(self, layer: str) -> FeatureLayout:
        """How `layer`'s output is arranged: a CNN map or transformer tokens on a patch grid."""
        return self.spec.layout(self.spec.check_layer(layer))

    def fx_split(self, layer: str) -> tuple[nn.Module, nn.Module] | None:
        """(prefix, suffix) cut from a `torch.fx` trace at `layer`, BatchNorms folded; None where the network
        cannot be cut there (no trace, or values other than the layer's output cross the cut; the reason is
        in `fx_split_reason`). Built and checked once per layer and kept (see `fx_split.cut_at`)."""
        def make() -> tuple[nn.Module, nn.Module] | None:
            from ..fast import fold_batchnorms
            from .fx_split import CutError, cut_at

            module = self.spec.hook_modules.get(self.spec.check_layer(layer), layer)
            try:
                prefix, suffix = cut_at(self.model, module, input_size=self.spec.crop, channels=self.spec.channels)
            except CutError as err:
                self.memo.fx_reasons[layer] = str(err)
                return None
            return fold_batchnorms(prefix), fold_batchnorms(suffix)

        return self.memo.splits.get_or_make(("fx", layer), make)

    def fx_split_reason(self, layer: str) -> str | None:
        """Why `fx_split(layer)` found no cut (None when it found one or was not tried)."""
        return self.memo.fx_reasons.get(layer)

    def split_path(self, layer: str) -> str:
        """How the Per-Sample Bottleneck runs at `layer`: "stages" (a registered stage list), "fx" (a traced
        cut: prefix once, suffix per step, like "stages") or "hook" (the whole network every step)."""
        if self.can_split:
            return "stages"
        return "fx" if self.fx_split(layer) is not None else "hook"

    def blocks(self) -> list[str]:
        """The network's transformer blocks in execution order (`transformer_blocks`); [] for a CNN."""
        return transformer_blocks(self.model, self.layer_table())

    def layer_table(self) -> list[LayerInfo]:
        """Every module the layer search found, usable or not, with shape and kind; for registered networks
        their named layers (shapes from one pass through the stage list at the crop size). Kept per network."""
        if self.spec.layer_info:
            return list(self.spec.layer_info)
        def make() -> list[LayerInfo]:
            if not self.can_split:  # a hand-written spec without stages
                return [i for i in find_layers(self.model, self.spec.crop, channels=self.spec.channels)
                        if i.name in self.spec.layers]
            rows, x = [], torch.zeros(1, self.spec.channels, self.spec.crop, self.spec.crop, device=self.device)
            from ..model_state import frozen_eval

            with frozen_eval(self.model), torch.no_grad():
                for name, module in self.stages():
                    x = module(x)
                    if name is not None and name in self.spec.layers:
                        rows.append(LayerInfo(name, tuple(x.shape), 1, MAP))
            return rows

        return list(self.memo.layer_table.get_or_make((), make))

    def layer_label(self, layer: str) -> str:
        """"name · shape kind" for a layer picker, e.g. "conv3_4 · 512×28×28 map"."""
        for info in self.layer_table():
            if info.name == layer:
                return f"{layer} · {info.describe()}"
        return layer

    @property
    def head(self) -> str:
        """What the outputs mean: "softmax", "sigmoid" or "binary" (`heads.py`)."""
        return self.spec.head

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """The class probabilities (classes,) of the unmodified network for one preprocessed image, under its
        head (softmax; σ per label; binary [1 − σ(z), σ(z)])."""
        from ..heads import probabilities
        from ..model_state import frozen_eval

        with frozen_eval(self.model), torch.no_grad():
            return probabilities(self.model(x.to(self.device)), self.head)[0]

    def top_k(self, x: torch.Tensor, k: int = 5) -> list[tuple[int, str, float]]:
        """The k most probable classes for a preprocessed image: (index, name, probability)."""
        probs = self.probabilities(x)
        values, indices = probs.topk(min(k, probs.numel()))
        return [(int(i), self.class_name(int(i)), float(v)) for v, i in zip(values, indices)]

    def labels_above(self, x: torch.Tensor, threshold: float | None = None) -> list[tuple[int, str, float]]:
        """Every class with p > threshold (default `heads.PRESENT_P`, 0.5), most probable first: (index, name, p).
        For a sigmoid (multi-label) head, the labels the network sees in the image."""
        from ..heads import PRESENT_P, present

        found = present(self.probabilities(x), PRESENT_P if threshold is None else threshold)
        return [(i, self.class_name(i), p) for i, p in found]

    def class_name(self, index: int) -> str:
        return self.categories[index] if 0 <= index < len(self.categories) else f"class {index}"

    def class_index(self, target: int | str) -> int:
        """Class index from an int, a digit string, a (case-insensitive) class name or a unique part of one."""
        from ..classes import resolve_class

        return resolve_class(self.categories, target)


class _HookPrefix(nn.Module):
    """input → the output of one module, by running the whole network and stopping there."""

    class _Stop(Exception):
        pass

    def __init__(self, model: nn.Module, module: nn.Module):
        super().__init__()
        self.model, self.module = model, module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        captured: list[torch.Tensor] = []

        def grab(_m, _inp, out):
            captured.append(layer_tensor(out))  # a block returning (hidden states, attention): the hidden states
            raise self._Stop

        handle = self.module.register_forward_hook(grab)
        try:
            self.model(x)
        except self._Stop:
            pass
        finally:
            handle.remove()
        if not captured:
            raise RuntimeError("The chosen layer did not run during the forward pass.")
        return captured[0]
