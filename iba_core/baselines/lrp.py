"""Layer-wise Relevance Propagation (Bach et al. 2015) with zennit, in two variants.

- `lrp_alpha1beta0`: the α=1, β=0 rule on every convolution and fully connected layer (the paper's main
  LRP variant, "most commonly used").
- `lrp_epsilon`: the ε rule on every convolution and fully connected layer, ε = 0.25 by default (setting
  `epsilon`). The paper's second variant (α=0, β=−1, ε=5, from Böhle & Eitel's implementation) is not
  reproduced here; the plain ε rule is the usual counterpart to α1β0.

Both start with relevance 1 at the target logit (all other logits 0) and propagate it to the input; the
map is the input relevance summed over colour channels (signed). Activations pass relevance through,
average pooling and residual sums split it in proportion to their inputs (zennit's `Pass` and `Norm`
rules), max-pooling routes it to the maximum (plain gradient).

Networks are canonised first, on a private copy (zennit's canonizers rewrite parameters and forward
functions while active, so the user's network — possibly shared with another session — is never touched):
- ResNet-50: the parts of `zennit.torchvision.ResNetCanonizer` (BatchNorms merged into the convolutions,
  residual additions made explicit `Sum` modules so relevance splits between the skip and the block);
- VGG-16: `VGGCanonizer` (no BatchNorms in VGG-16, so nothing to merge);
- EfficientNet-Lite0: BatchNorms merged by name (`NamedMergeBatchNorm`: zennit's sequential merge misses
  them because every convolution here has a padding child module) and the MBConv skip additions made
  explicit `Sum` modules (`MBConvSkipCanonizer`), the EfficientNet analogue of the ResNet canonizer;
- other networks: `SequentialMergeBatchNorm`; residual additions, if any, then get plain gradient.
All BatchNorm merges are made exact (see `_merge_exactly`): the canonised copy computes the same logits.
"""
from __future__ import annotations

import torch
from torch import nn
from zennit.canonizers import (
    AttributeCanonizer,
    CompositeCanonizer,
    MergeBatchNorm,
    NamedMergeBatchNorm,
    SequentialMergeBatchNorm,
)
from zennit.composites import LayerMapComposite, layer_map_base
from zennit.layer import Sum
from zennit.rules import AlphaBeta, Epsilon
from zennit.torchvision import ResNetBasicBlockCanonizer, ResNetBottleneckCanonizer, VGGCanonizer
from zennit.types import Convolution

from ._common import Method, model_key, sum_channels, working_copy


# ---- exact BatchNorm merging ------------------------------------------------------------------


def _merge_exactly(modules, batch_norm) -> None:
    """zennit's merge, then make the emptied BatchNorm an exact identity.

    zennit leaves running_var = 1, so the BatchNorm still divides by sqrt(1 + eps): 0.05 % per layer with
    EfficientNet's eps = 1e-3, which compounds to a visible change of the logits over 50 layers.
    running_var = 1 − eps makes it exactly x ↦ x (the original values are restored on removal).
    """
    MergeBatchNorm.merge_batch_norm(modules, batch_norm)
    batch_norm.running_var.data = torch.full_like(batch_norm.running_var.data, 1.0 - batch_norm.eps)


class ExactSequentialMergeBatchNorm(SequentialMergeBatchNorm):
    merge_batch_norm = staticmethod(_merge_exactly)


class ExactNamedMergeBatchNorm(NamedMergeBatchNorm):
    merge_batch_norm = staticmethod(_merge_exactly)


class ExactResNetCanonizer(CompositeCanonizer):
    """zennit.torchvision.ResNetCanonizer with the exact BatchNorm merge (same parts otherwise)."""

    def __init__(self):
        super().__init__((ExactSequentialMergeBatchNorm(), ResNetBottleneckCanonizer(), ResNetBasicBlockCanonizer()))


# ---- EfficientNet-Lite canonizers -------------------------------------------------------------


def _is_mbconv(module: nn.Module) -> bool:
    return type(module).__name__ == "MBConvBlock" and hasattr(module, "_block_args")


def has_identity_skip(block: nn.Module) -> bool:
    """The condition under which MBConvBlock.forward adds its input (same expression as the library's)."""
    args = block._block_args
    return bool(block.id_skip and args.stride == 1 and args.input_filters == args.output_filters)


def _mbconv_forward(self, inputs, drop_connect_rate=None):
    """MBConvBlock.forward of efficientnet_lite_pytorch (eval mode), with the skip addition as a Sum module."""
    x = inputs
    if self._block_args.expand_ratio != 1:
        x = self._swish(self._bn0(self._expand_conv(inputs)))
    x = self._swish(self._bn1(self._depthwise_conv(x)))
    if self.has_se:
        squeezed = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        squeezed = self._se_expand(self._swish(self._se_reduce(squeezed)))
        x = torch.sigmoid(squeezed) * x
    x = self._bn2(self._project_conv(x))
    if has_identity_skip(self):
        x = self.canonizer_sum(torch.stack([inputs, x], dim=-1))
    return x


class MBConvSkipCanonizer(AttributeCanonizer):
    """Replace each MBConv block's `x + inputs` by a `Sum` module (like zennit's ResNet canonizer)."""

    def __init__(self):
        super().__init__(self._attribute_map)

    @staticmethod
    def _attribute_map(name, module):
        if _is_mbconv(module) and has_identity_skip(module):
            return {"forward": _mbconv_forward.__get__(module), "canonizer_sum": Sum()}
        return None

    def copy(self):
        return MBConvSkipCanonizer()


def efficientnet_batchnorm_pairs(model: nn.Module) -> list[tuple[tuple[str, ...], str]]:
    """(convolution names, BatchNorm name) pairs of an efficientnet_lite_pytorch EfficientNet."""
    pairs: list[tuple[tuple[str, ...], str]] = [(("_conv_stem",), "_bn0")]
    for i, block in enumerate(model._blocks):
        prefix = f"_blocks.{i}."
        if hasattr(block, "_expand_conv"):
            pairs.append(((prefix + "_expand_conv",), prefix + "_bn0"))
        pairs.append(((prefix + "_depthwise_conv",), prefix + "_bn1"))
        pairs.append(((prefix + "_project_conv",), prefix + "_bn2"))
    pairs.append((("_conv_head",), "_bn1"))
    return pairs


def canonizers_for(loaded, model: nn.Module) -> list:
    """The canonizers that put `model` (a private copy of `loaded.model`) into a form LRP rules fit."""
    key = model_key(loaded)
    if key == "resnet50":
        return [ExactResNetCanonizer()]
    if key == "vgg16":
        return [VGGCanonizer()]  # VGG-16 has no BatchNorm: nothing to merge
    if key == "efficientnet_lite0" or (hasattr(model, "_blocks") and any(_is_mbconv(b) for b in model._blocks)):
        return [ExactNamedMergeBatchNorm(efficientnet_batchnorm_pairs(model)), MBConvSkipCanonizer()]
    return [ExactSequentialMergeBatchNorm()]


# ---- the method --------------------------------------------------------------------------------

RULES = ("alpha1beta0", "epsilon")


def lrp_composite(rule: str, epsilon: float, canonizers: list) -> LayerMapComposite:
    if rule == "alpha1beta0":
        make = lambda: AlphaBeta(alpha=1.0, beta=0.0)  # noqa: E731
    elif rule == "epsilon":
        make = lambda: Epsilon(epsilon=epsilon)  # noqa: E731
    else:
        raise ValueError(f"Unknown LRP rule {rule!r}; choose one of: {', '.join(RULES)}.")
    layer_map = layer_map_base() + [(Convolution, make()), (nn.Linear, make())]
    return LayerMapComposite(layer_map=layer_map, canonizers=canonizers)


class LRP(Method):
    signed = True

    def __init__(self, rule: str = "alpha1beta0", **settings):
        super().__init__(rule=rule, **settings)
        rule = self.settings["rule"]
        if rule not in RULES:
            raise ValueError(f"Unknown LRP rule {rule!r}; choose one of: {', '.join(RULES)}.")
        if rule == "alpha1beta0":
            self.key, self.name = "lrp_alpha1beta0", "LRP α=1, β=0"
            self.description = "Relevance of the target logit propagated with the α=1, β=0 rule, summed over channels."
        else:
            self.key, self.name = "lrp_epsilon", f"LRP ε={self.settings['epsilon']:g}"
            self.description = "Relevance of the target logit propagated with the ε rule, summed over channels."

    @classmethod
    def default_settings(cls) -> dict:
        return {"rule": "alpha1beta0", "epsilon": 0.25}

    def _compute(self, loaded, x, target):
        model = working_copy(loaded.model)
        composite = lrp_composite(self.settings["rule"], float(self.settings["epsilon"]), canonizers_for(loaded, model))
        x = x.clone().requires_grad_(True)
        with torch.enable_grad(), composite.context(model) as modified:
            out = modified(x)
            if target >= out.shape[-1]:
                raise ValueError(f"Class index {target} is out of range 0…{out.shape[-1] - 1}.")
            seed = torch.zeros_like(out)
            seed[:, target] = 1.0
            (relevance,) = torch.autograd.grad(out, x, grad_outputs=seed)
        return sum_channels(relevance)
