"""PatternAttribution (Kindermans et al. 2018, "Learning how to explain neural networks: PatternNet and
PatternAttribution") with the two-component signal estimator: for plain ReLU networks such as VGG-16, as in
the paper, and — beyond the paper — for networks with BatchNorm, ReLU6 and skip connections such as
ResNet-50 and the offline EfficientNet-Lite0.

What it computes
----------------
For every *pattern layer* — each convolution (also grouped and depthwise ones) and fully connected layer,
y = wᵀx + b per output neuron — a *pattern* a (shaped like the layer's weights) is estimated from data:
the direction in input space along which the neuron's signal varies. Kindermans et al.'s two-component
estimator S_a+− splits the samples by the rectifier's regime; PatternAttribution only uses the one in
which the rectifier passes its input on, because the rectifier blocks the other:

    a₊ = (E₊[x y] − E₊[x] E₊[y]) / (wᵀ E₊[x y] − wᵀ E₊[x] E₊[y])         E₊: mean over samples in the regime

i.e. a₊ = Cov₊(x, y) / Var₊(y) (so wᵀa₊ = 1); x is the layer's input (a patch, for a convolution: each
spatial position of each image is a sample, padded as the layer's own forward pads).
The regime is "passes linearly": y > 0 for a ReLU, 0 < y < 6 for a ReLU6. A layer whose output reaches no
rectifier before the next pattern layer (the logits; EfficientNet's projection convolution → BatchNorm →
addition) passes both regimes, so it gets their linear estimator S_a: the same formula over all samples;
so does one whose output reaches two different rectifiers, or a rectifier on one path and none on another.
A neuron with fewer than two samples in its regime, or no variance there (dead, or constant), gets the
pattern 0.

The map is a modified backward pass from the target logit (relevance 1 there, like the other methods
here) to the input: it is the gradient, except that every pattern layer propagates with the weights
w ⊙ a instead of w (PatternAttribution). So rectifiers and max-pooling gate as in the forward pass, average
pooling, flattening, padding and dropout (eval mode: identity) pass it on, BatchNorm multiplies it by its
per-channel scale, and additions (skip connections) hand it to both summands, which sum where the branches
meet — all as the gradient does. The map is the input signal summed over colour channels (signed).

BatchNorm. In eval mode a BatchNorm is a per-channel affine map y = s·u + t (s = γ/√(σ² + ε)). The
pattern of a layer that BatchNorms follow is estimated against their output y = BN(conv(x)) — the
signal of the folded layer, weights s·w — and the regime is decided by y (the rectifier's input):

    a' = Cov(x, y) / Var(y),  normalised so that (s·w)ᵀ a' = 1   (Var(y) = (s·w)ᵀ Cov(x, y))

The pair conv → BN back-propagates s·(w ⊙ a') = (s·w) ⊙ a': exactly PatternAttribution of the folded
layer, so BatchNorm needs no folding (a test compares with the folded network). Since Cov(x, y) =
s·Cov(x, u) and Var(y) = s²·Var(u), a' = a_u / s for the pattern a_u of the bare layer against u.

Skip connections (beyond the paper). Where a layer's output is added to another branch before the
rectifier (ResNet-50: conv3 → BN → + identity → ReLU), the backward signal reaches it gated by that
rectifier, whose regime is decided by the sum: its pattern is estimated against its own output y over the
samples where the rectifier passes (E₊ above with the regime of the sum). Additions then just sum the
backward signals, as the gradient does. This extension is ours: the IBA paper (§4.1) reports
PatternAttribution only for VGG-16, its implementation "does not support skip connections", and Kindermans
et al. derive the estimator for chains of linear layers and ReLUs.

Where it runs (the support rule)
--------------------------------
The network's forward function is traced with torch.fx into its graph of module calls and functional
operations (additions of skip connections, `torch.flatten`, `x.view`), so the structure read is the one the
network computes, whatever its stage list. It is supported when every operation on the input's data path
is one of:

- pattern layers: `nn.Conv2d` (any stride, padding, padding mode, dilation, groups — depthwise included),
  `nn.Linear`, and the same-padding convolutions of the efficientnet(-lite)_pytorch packages
  (`Conv2dStaticSamePadding`, `Conv2dDynamicSamePadding`: their forward is followed, padding included);
  each called once per forward;
- `nn.BatchNorm1d/2d` with running statistics (eval mode: per-channel affine);
- rectifiers `nn.ReLU`, `nn.ReLU6`, `F.relu`, `F.relu6`;
- `nn.MaxPool2d` / `F.max_pool2d` (commute with the rectifiers: a rectifier after a max-pooling decides
  the regime at the pooling's input), average and adaptive average pooling, `nn.ZeroPad2d` / `F.pad`, mean;
- additions and subtractions of tensors, multiplication / division by constants;
- flatten / view / reshape, `nn.Identity`, `nn.Dropout` (eval mode), and shape arithmetic (`x.size(0)`).

Exact module types are checked. Everything else is refused by `available_for` with one sentence naming the
offending module type or operation: nonlinearities that are not piecewise linear with a zero and an
identity piece (SiLU/Swish, GELU, sigmoid, softmax attention, LeakyReLU), normalisations over other axes
(LayerNorm, GroupNorm), products of two activations (squeeze-and-excitation gates), concatenation, and any
module type it does not know (it does not guess), as well as forward functions torch.fx cannot trace.
VGG-16, ResNet-50 and EfficientNet-Lite0 are supported; torchvision's efficientnet_b0 (SiLU, sigmoid gates),
vit_b_16, swin_t and convnext (GELU, LayerNorm, attention) are refused.

Patterns: estimated, cached, rough
----------------------------------
Patterns are estimated from an image folder (setting `images`) or, without one, from augmented crops of
the offline sample photos; the latter are marked *rough* (as are fewer than `RECOMMENDED_SAMPLES`
images), like feature statistics. Kindermans et al. trained theirs on ImageNet (the IBA paper used
those for VGG-16); `samples` = 256 images by default keeps the first run to minutes (2 CPU cores shared with
other jobs: VGG-16 about 1.7 s per 224-px image, ~7 min, and the cache file is as large as the weights, 553 MB;
ResNet-50 about 1.7 s per image, 102 MB; the offline EfficientNet-Lite0 about 0.5 s per image, 127 s for the 256
crops, 18 MB, 1.2 GB peak memory for the whole `compare` run) — point to a folder of natural images and raise
`samples` for better ones.
Each conv layer sees every spatial position of every image as a sample; a linear layer sees one sample per
image, so 256 images give rough patterns for VGG-16's 25088-input fc6 in particular. Memory: per pattern
layer two weight-shaped sums (input patch × output channels: Σ x y and Σ x per output neuron in its regime; a
depthwise convolution's patches are per channel) and a few numbers per output neuron — twice the weights —
besides one batch's activations; no covariance matrix of the patches is formed.
They are cached on disk (`cache_dir()/patterns`) keyed by network key, weights id and the source
(folder path or "offline photos", sample count, estimator version), like `stats.get_stats`, and kept in
the network's memo for the session. Tests and callers can pass `patterns` (a `Patterns` or a dict
layer name → tensor) to skip estimation. The estimator version is unchanged from the plain-network
implementation: for plain networks the patterns are the same, so their cache files stay valid.

Cost: "slow", because the first use estimates patterns (many passes); afterwards one forward and one
backward pass (plus one convolution per pattern layer). A randomised network (the sanity check) has a new
weights id and needs new patterns — the IBA paper left PatternAttribution out of the sanity check for that
reason (§4.3).
"""
from __future__ import annotations

import hashlib
import math
import operator
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn

from ..model_state import frozen_eval
from ..progress import ProgressFn
from ..stats import FolderBatches
from .base import Method, device_of, spec_of, sum_channels

#: Bumped when the estimator changes, so cached patterns of an older estimator are not reused.
ESTIMATOR_VERSION = "two-component-v1"
DEFAULT_SAMPLES = 256


class UnsupportedNetwork(ValueError):
    """PatternAttribution cannot run on this network; the message says why in one sentence."""


#: The name of the error before networks other than plain sequences were supported.
NotPlainError = UnsupportedNetwork


# ---- what each operation is --------------------------------------------------------------------

_SAME_PADDING_CONVS = {
    (package + ".utils", kind + "SamePadding"): kind
    for package in ("efficientnet_lite_pytorch", "efficientnet_pytorch")
    for kind in ("Conv2dStatic", "Conv2dDynamic")
}


def _same_padding(m: nn.Module) -> str | None:
    """The kind ("Conv2dStatic", "Conv2dDynamic") of an efficientnet package's same-padding convolution, or None."""
    kind = type(m)
    return _SAME_PADDING_CONVS.get((kind.__module__, kind.__name__))


def is_pattern_layer(m: nn.Module) -> bool:
    return type(m) in (nn.Conv2d, nn.Linear) or _same_padding(m) is not None


#: Leaf modules by exact type → kind. "affine": per-channel affine (BatchNorm, eval); "relu"/"relu6":
#: rectifiers; "maxpool": commutes with them; "identity", "reshape": change no value; "linear": other
#: linear maps (the regime of a rectifier after them is not the layer's).
_MODULE_KINDS = {
    nn.BatchNorm1d: "affine", nn.BatchNorm2d: "affine",
    nn.ReLU: "relu", nn.ReLU6: "relu6",
    nn.MaxPool2d: "maxpool",
    nn.Dropout: "identity", nn.Dropout2d: "identity", nn.Identity: "identity",
    nn.Flatten: "reshape",
    nn.AvgPool2d: "linear", nn.AdaptiveAvgPool2d: "linear", nn.ZeroPad2d: "linear",
}

_ADD = {operator.add, operator.iadd, operator.sub, operator.isub, torch.add, torch.sub}
_SCALE = {operator.mul, operator.imul, operator.truediv, operator.itruediv, operator.neg, torch.mul, torch.div,
          torch.neg}
_FUNCTION_KINDS = {
    **{f: "add" for f in _ADD},
    **{f: "scale" for f in _SCALE},
    torch.flatten: "reshape", torch.reshape: "reshape",
    torch.clone: "identity", F.dropout: "identity", F.dropout2d: "identity",
    F.relu: "relu", torch.relu: "relu", torch.relu_: "relu", F.relu6: "relu6",
    F.max_pool2d: "maxpool", torch.max_pool2d: "maxpool",
    F.adaptive_avg_pool2d: "linear", F.avg_pool2d: "linear", torch.mean: "linear", F.pad: "linear",
}
_METHOD_KINDS = {
    "add": "add", "add_": "add", "sub": "add", "sub_": "add",
    "mul": "scale", "mul_": "scale", "div": "scale", "div_": "scale", "neg": "scale",
    "flatten": "reshape", "view": "reshape", "reshape": "reshape", "contiguous": "identity", "clone": "identity",
    "relu": "relu", "relu_": "relu", "mean": "linear",
}
#: Operations that give shapes, not data (`x.size(0)` for a `view`).
_SHAPE_METHODS = {"size", "dim"}
#: In-place operations, run out of place (the values before them are still needed).
_OUT_OF_PLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                 operator.itruediv: operator.truediv, torch.relu_: torch.relu}
_CONDITIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": lambda v: v > 0,
    "relu6": lambda v: (v > 0) & (v < 6),
}


def _function_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return getattr(node.target, "__name__", str(node.target))


def _where(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        _, kind = list(stack.values())[-1]
        return f" (in {getattr(kind, '__name__', kind)})"
    return ""


class _Tracer(fx.Tracer):
    """torch.fx's tracer with the pattern layers as leaves (their forward is run, not traced)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return is_pattern_layer(m) or super().is_leaf_module(m, qualname)


# ---- the network's graph -----------------------------------------------------------------------


@dataclass
class PatternLayer:
    """One pattern layer: where it is called, what its pattern is estimated against, and in which regime."""

    name: str  # qualified module name: the key of its pattern
    module: nn.Module
    node: str  # the fx node calling it
    #: The node whose value y the pattern is estimated against: the call itself, or the BatchNorm(s) that
    #: directly and only follow it.
    y_node: str
    batchnorms: tuple[nn.Module, ...]
    regime: str  # "relu" (y > 0), "relu6" (0 < y < 6) or "linear" (all samples)
    #: The node at which the rectifier's pass condition is evaluated (its input, or the input of the
    #: max-pooling in front of it); None for "linear".
    mask_node: str | None

    @property
    def rectified(self) -> bool:
        return self.regime != "linear"

    def scale(self) -> torch.Tensor | None:
        """s per output channel of the BatchNorms after the layer (product), None without any."""
        s = None
        for bn in self.batchnorms:
            factor = torch.rsqrt(bn.running_var.detach().float() + bn.eps)
            if bn.weight is not None:
                factor = factor * bn.weight.detach().float()
            s = factor if s is None else s * factor
        return s


@dataclass
class PatternGraph:
    """A supported network as its traced graph; `layers` lists its pattern layers in execution order."""

    title: str
    module: fx.GraphModule
    layers: dict[str, PatternLayer]
    module_kinds: dict[str, str]  # call_module target → kind

    @property
    def names(self) -> list[str]:
        return list(self.layers)

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: layer.module.weight for name, layer in self.layers.items()}


def _title(network) -> str:
    spec = spec_of(network)
    return getattr(spec, "title", None) or type(network.model).__name__


def _module_kind(m: nn.Module) -> str | None:
    if is_pattern_layer(m):
        return "pattern"
    kind = _MODULE_KINDS.get(type(m))
    if kind == "affine" and (not m.track_running_stats or m.running_mean is None or m.running_var is None):
        return None  # normalises with the batch's statistics even in eval mode: not affine
    if kind == "maxpool" and m.return_indices:
        return None
    return kind


def _module_label(m: nn.Module) -> str:
    kind = type(m).__name__
    if isinstance(m, nn.modules.batchnorm._BatchNorm) and kind in ("BatchNorm1d", "BatchNorm2d"):
        return f"{kind} without running statistics"
    return kind


def _refusal(title: str, offenders: list[str]) -> UnsupportedNetwork:
    shown = ", ".join(offenders[:6]) + (f" and {len(offenders) - 6} more" if len(offenders) > 6 else "")
    return UnsupportedNetwork(
        f"{title} contains {shown}, which PatternAttribution cannot propagate: its two-component signal "
        "estimator is defined for convolutions, linear layers, BatchNorm, ReLU/ReLU6, pooling and additions "
        "(skip connections), not for other nonlinearities, normalisations or operations."
    )


def _call_kind(node: fx.Node, data) -> tuple[str | None, str]:
    """(kind or None if unknown, label) of a call_function / call_method node with data inputs."""
    args = [a for a in node.all_input_nodes if a.name in data]
    if node.op == "call_method":
        kind = _METHOD_KINDS.get(node.target)
    else:
        kind = _FUNCTION_KINDS.get(node.target)
    label = _function_name(node)
    if kind == "scale":
        divides = node.target in (operator.truediv, operator.itruediv, torch.div, "div", "div_")
        if len(args) != 1 or (divides and node.args[0] is not args[0]):
            return None, f"{label} of two activations"
    if kind == "identity" and node.target in (F.dropout, F.dropout2d) and node.kwargs.get("training", True):
        return None, "dropout in training mode"
    if kind == "maxpool" and node.kwargs.get("return_indices", False):
        return None, label
    if kind == "linear" and node.target is F.pad and node.kwargs.get("mode", "constant") != "constant":
        return None, f"{label} (mode {node.kwargs.get('mode')!r})"
    return kind, label


def _analyse(network) -> PatternGraph:
    model = network.model
    title = _title(network)
    tracer = _Tracer()
    modules = dict(model.named_modules())
    unknown_leaves = list(dict.fromkeys(
        _module_label(m) for name, m in modules.items()
        if tracer.is_leaf_module(m, name) and _module_kind(m) is None
        and not isinstance(m, (nn.Sequential, nn.ModuleList, nn.ModuleDict))
    ))
    try:
        with frozen_eval(model):
            graph = tracer.trace(model)
    except Exception as err:  # noqa: BLE001 - any tracing failure means: unsupported
        if unknown_leaves:
            raise _refusal(title, unknown_leaves) from err
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UnsupportedNetwork(
            f"PatternAttribution reads the layer graph of {title} by tracing its forward function with torch.fx, "
            f"which cannot trace it ({type(err).__name__}: {first[:200].rstrip('.')})."
        ) from err

    kinds: dict[str, str] = {}  # node name → kind, for nodes on the data path
    module_kinds: dict[str, str] = {}
    offenders: list[str] = []  # unknown module types
    operations: list[str] = []  # unknown functions and methods
    calls: dict[str, int] = {}
    for node in graph.nodes:
        data_args = [a for a in node.all_input_nodes if a.name in kinds]
        if node.op == "placeholder":
            kinds[node.name] = "input"
        elif node.op in ("get_attr", "output"):
            continue
        elif not data_args:
            continue  # constants and shape arithmetic
        elif node.op == "call_module":
            m = modules[node.target]
            kind = _module_kind(m)
            if kind is None:
                offenders.append(_module_label(m))
                kinds[node.name] = "unknown"  # read on, to name every offender
                continue
            module_kinds[node.target] = kinds[node.name] = kind
            if kind == "pattern":
                calls[node.target] = calls.get(node.target, 0) + 1
        elif node.op == "call_method" and node.target in _SHAPE_METHODS or (
                node.op == "call_function" and node.target is getattr and node.args[1] in ("shape", "ndim")):
            continue  # a shape, not data
        else:
            kind, label = _call_kind(node, kinds)
            if kind is None:
                operations.append(label + _where(node))
                kinds[node.name] = "unknown"
                continue
            kinds[node.name] = kind
    offenders = list(dict.fromkeys(offenders + operations))
    if offenders:
        raise _refusal(title, offenders)
    twice = [name for name, n in calls.items() if n > 1]
    if twice:
        raise UnsupportedNetwork(f"{title} calls {', '.join(twice)} more than once per forward pass; "
                                 "PatternAttribution estimates one pattern per layer call.")

    def users(node: fx.Node) -> list[fx.Node]:
        return [u for u in node.users if u.name in kinds or u.op == "output"]

    layers: dict[str, PatternLayer] = {}
    for node in graph.nodes:
        if kinds.get(node.name) != "pattern":
            continue
        # the BatchNorms that directly and only follow the layer, over its output channels
        layer = modules[node.target]
        channels = layer.out_features if type(layer) is nn.Linear else layer.out_channels
        y, batchnorms = node, []
        while True:
            after = users(y)
            if len(after) != 1 or kinds.get(after[0].name) not in ("affine", "identity"):
                break
            if kinds[after[0].name] == "affine":
                if modules[after[0].target].num_features != channels:
                    break
                batchnorms.append(modules[after[0].target])
            y = after[0]
        regime, mask = _regime(y, users, kinds)
        layers[node.target] = PatternLayer(node.target, modules[node.target], node.name, y.name, tuple(batchnorms),
                                           regime, mask)
    if not layers:
        raise UnsupportedNetwork(f"{title} has no convolution or linear layer to estimate patterns for.")
    return PatternGraph(title, fx.GraphModule(model, graph), layers, module_kinds)


def _regime(y: fx.Node, users, kinds: dict[str, str]) -> tuple[str, str | None]:
    """The rectifier y reaches on every path before any other linear layer, and where its regime is read.

    Paths may pass per-element operations (BatchNorm, additions, scaling, reshapes, identities); a
    max-pooling only right before the rectifier (they commute; the regime is then read at its input). Any
    path that ends elsewhere (a pattern layer, average pooling, the output), or two different rectifiers:
    the linear estimator.
    """
    found: set[tuple[str, str]] = set()
    stack: list[tuple[fx.Node, fx.Node | None]] = [(y, None)]
    seen: set[tuple[str, str | None]] = set()
    while stack:
        node, before_pool = stack.pop()
        for u in users(node):
            kind = kinds.get(u.name)
            if kind in ("relu", "relu6"):
                found.add((kind, (before_pool or node).name))
                continue
            if kind == "maxpool" or (before_pool is not None and kind in ("identity", "reshape")):
                nxt = (u, before_pool or node)
            elif before_pool is None and kind in ("affine", "add", "scale", "identity", "reshape"):
                nxt = (u, None)
            else:
                return "linear", None
            key = (nxt[0].name, nxt[1].name if nxt[1] is not None else None)
            if key not in seen:
                seen.add(key)
                stack.append(nxt)
    if len(found) != 1:
        return "linear", None
    return next(iter(found))


_GRAPHS: "weakref.WeakKeyDictionary[nn.Module, tuple]" = weakref.WeakKeyDictionary()


def pattern_graph(network) -> PatternGraph:
    """The network's PatternGraph, or UnsupportedNetwork saying (one sentence) why it is not supported.

    Cached per model object and structure (module names, objects, types, running statistics).
    """
    model = network.model
    signature = (_title(network), tuple((name, id(m), type(m), getattr(m, "running_mean", 0) is None)
                                        for name, m in model.named_modules()))
    cached = _GRAPHS.get(model)
    if cached is not None and cached[0] == signature:
        result = cached[1]
    else:
        try:
            result = _analyse(network)
        except UnsupportedNetwork as err:
            result = str(err)
        _GRAPHS[model] = (signature, result)
    if isinstance(result, str):
        raise UnsupportedNetwork(result)
    return result


# ---- running the graph -------------------------------------------------------------------------


def _apply_weight(m: nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The pattern layer's own forward with `weight` instead of its weights, without bias."""
    if type(m) is nn.Linear:
        return F.linear(x, weight)
    if type(m) is nn.Conv2d:
        return m._conv_forward(x, weight, None)  # its padding mode and padding, as its forward
    kind = _same_padding(m)
    if kind == "Conv2dStatic":  # Conv2dStaticSamePadding.forward
        return F.conv2d(m.static_padding(x), weight, None, m.stride, m.padding, m.dilation, m.groups)
    if kind == "Conv2dDynamic":  # Conv2dDynamicSamePadding.forward
        ih, iw = x.shape[-2:]
        kh, kw = weight.shape[-2:]
        sh, sw = m.stride
        oh, ow = math.ceil(ih / sh), math.ceil(iw / sw)
        pad_h = max((oh - 1) * sh + (kh - 1) * m.dilation[0] + 1 - ih, 0)
        pad_w = max((ow - 1) * sw + (kw - 1) * m.dilation[1] + 1 - iw, 0)
        if pad_h > 0 or pad_w > 0:
            x = F.pad(x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])
        return F.conv2d(x, weight, None, m.stride, m.padding, m.dilation, m.groups)
    raise TypeError(f"{type(m).__name__} is not a pattern layer")  # pragma: no cover - checked by the analysis


def _weight_sums(m: nn.Module, x: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Σ over samples of g ⊗ (input patch) for each g shaped like the layer's output: weight-shaped sums.

    The transpose of the layer's map w ↦ layer(x; w) (it is linear in w), applied to g.
    """
    if type(m) is nn.Linear:
        flat = x.reshape(-1, x.shape[-1])
        return [g.reshape(-1, g.shape[-1]).T @ flat for g in outputs]
    if type(m) is nn.Conv2d and m.padding_mode == "zeros" and not isinstance(m.padding, str):
        padded, padding = x, m.padding
    elif _same_padding(m) == "Conv2dStatic":
        padded, padding = m.static_padding(x), m.padding
    else:  # padding modes, "same"/"valid", dynamic same padding: through autograd of the layer's own map
        with torch.enable_grad():
            w = m.weight.detach().clone().requires_grad_(True)
            out = _apply_weight(m, x.detach(), w)
            return [torch.autograd.grad(out, w, g, retain_graph=True)[0] for g in outputs]
    return [torch.nn.grad.conv2d_weight(padded, m.weight.shape, g, m.stride, padding, m.dilation, m.groups)
            for g in outputs]


class _Runner(fx.Interpreter):
    """Runs the traced graph on the real modules: pattern layers through `pattern_call`, callbacks on values,
    rectifiers and in-place operations out of place (the values before them are still needed)."""

    def __init__(self, graph: PatternGraph, pattern_call, watch: dict[str, list[Callable]] | None = None):
        super().__init__(graph.module)
        self.graph_info, self.pattern_call, self.watch = graph, pattern_call, watch or {}

    def run_node(self, n: fx.Node):
        value = super().run_node(n)
        for callback in self.watch.get(n.name, ()):
            callback(value)
        return value

    def call_module(self, target, args, kwargs):
        kind = self.graph_info.module_kinds.get(target)
        if kind == "pattern":
            return self.pattern_call(target, self.fetch_attr(target), args[0])
        if kind == "relu":
            return F.relu(args[0])
        if kind == "relu6":
            return F.relu6(args[0])
        return super().call_module(target, args, kwargs)

    def call_function(self, target, args, kwargs):
        target = _OUT_OF_PLACE.get(target, target)
        if "inplace" in kwargs:
            kwargs = {**kwargs, "inplace": False}
        return super().call_function(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        if target.endswith("_") and not target.startswith("_") and target[:-1] in _METHOD_KINDS:
            target = target[:-1]
        return super().call_method(target, args, kwargs)


# ---- patterns ----------------------------------------------------------------------------------


@dataclass
class Patterns:
    """Signal patterns a₊ per convolution / linear layer (shaped like its weights), with provenance."""

    tensors: dict[str, torch.Tensor]
    n: int
    model: str = ""
    weights: str = ""
    source: str = ""
    skipped: int = 0
    estimator: str = ESTIMATOR_VERSION

    @property
    def is_rough(self) -> bool:
        """True for the offline sample photos, or fewer than RECOMMENDED_SAMPLES images."""
        from ..settings import RECOMMENDED_SAMPLES

        return self.n < RECOMMENDED_SAMPLES or not self.source.startswith("folder")

    def describe(self) -> str:
        text = f"patterns from {self.n} images ({self.source or 'unknown source'})"
        if self.skipped:
            text += f", {self.skipped} unreadable files skipped"
        if self.is_rough:
            text += "; rough — estimate them from a folder of natural images for better ones"
        return text

    def check_fits(self, chain: "PatternGraph") -> None:
        """ValueError unless there is one pattern per layer of `chain`, shaped like its weights."""
        for name, weight in chain.weights().items():
            got = self.tensors.get(name)
            if got is None:
                raise ValueError(f"The patterns have none for layer {name!r}; they belong to another network.")
            if tuple(got.shape) != tuple(weight.shape):
                raise ValueError(f"The pattern for layer {name!r} is shaped {tuple(got.shape)}, its weights "
                                 f"{tuple(weight.shape)}; the patterns belong to another network.")

    def save(self, path: str | os.PathLike) -> Path:
        """Write an .npz atomically (uncompressed: VGG-16's patterns are as large as its weights)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        names = list(self.tensors)
        arrays = {f"p{i}": self.tensors[n].detach().cpu().numpy().astype(np.float32) for i, n in enumerate(names)}
        np.savez(tmp, names=np.array(names), n=np.int64(self.n), skipped=np.int64(self.skipped),
                 meta=np.array([self.model, self.weights, self.source, self.estimator]), **arrays)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Patterns":
        """Read an .npz written by `save`; ValueError if it is corrupt."""
        try:
            with np.load(path, allow_pickle=False) as data:
                names = [str(s) for s in data["names"]]
                tensors = {n: torch.from_numpy(np.array(data[f"p{i}"])) for i, n in enumerate(names)}
                n, skipped = int(data["n"]), int(data["skipped"])
                model, weights, source, estimator = (str(s) for s in data["meta"])
        except Exception as err:
            raise ValueError(f"Corrupt patterns file {path}: {err}") from err
        if n <= 0 or not all(torch.isfinite(t).all() for t in tensors.values()):
            raise ValueError(f"Corrupt patterns file {path}: inconsistent contents")
        return cls(tensors, n, model, weights, source, skipped, estimator)


class _Moments:
    """Sums over the samples in one layer's regime, per output neuron, for Cov(x, y) and Var(y).

    y is shifted by a per-neuron constant (its mean in the first batch) so that E[x y] − E[x] E[y] does not
    cancel catastrophically; covariances do not change under the shift.
    """

    def __init__(self, layer: PatternLayer):
        self.layer, self.module = layer, layer.module
        self.n = self.sy = self.syy = self.shift = None
        self.sx = self.sxy = None

    def update(self, x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor | None) -> None:
        """x: the layer's input; y: its (BatchNorm'd) output; mask: the regime, shaped like y (None: all)."""
        m = self.module
        conv = type(m) is not nn.Linear
        if not conv and y.dim() != 2:  # a linear layer on (N, …, features): every position is a sample
            if self.layer.batchnorms:
                raise ValueError(f"{self.layer.name}: a BatchNorm after a linear layer on {y.dim()}-d activations "
                                 "normalises another axis than its features; PatternAttribution does not support it.")
            x, y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
            mask = None if mask is None else mask.reshape(y.shape)
        dims = (0, 2, 3) if conv else (0,)
        mask = torch.ones_like(y) if mask is None else mask.to(y.dtype)
        count = mask.sum(dims).double()
        if self.shift is None:
            self.shift = ((y * mask).sum(dims).double() / count.clamp_min(1)).to(y.dtype)
        view = (1, -1, 1, 1) if conv else (1, -1)
        yc = (y - self.shift.view(view)) * mask
        sx, sxy = _weight_sums(m, x, [mask, yc])
        stats = (count, yc.sum(dims).double(), (yc * yc).sum(dims).double())
        if self.n is None:
            self.n, self.sy, self.syy = stats
            self.sx, self.sxy = sx.float(), sxy.float()
        else:
            self.n, self.sy, self.syy = self.n + stats[0], self.sy + stats[1], self.syy + stats[2]
            self.sx += sx
            self.sxy += sxy

    def pattern(self) -> torch.Tensor:
        w = self.module.weight.detach()
        if self.n is None:
            return torch.zeros_like(w)
        shape = (-1,) + (1,) * (w.dim() - 1)
        n = self.n.clamp_min(1)
        ey = (self.sy / n).float().view(shape)
        cov = self.sxy / n.float().view(shape) - (self.sx / n.float().view(shape)) * ey
        scale = self.layer.scale()
        w_eff = w if scale is None else w * scale.to(w.device, w.dtype).view(shape)  # the folded layer's weights
        denom = (w_eff * cov).flatten(1).sum(1).double()  # (s·w)ᵀ Cov(x, y) = Var(y)
        valid = (self.n >= 2) & (denom > 0) & torch.isfinite(denom)
        if valid.any():
            valid &= denom > 1e-10 * denom[valid].max()
        safe = torch.where(valid, denom, torch.ones_like(denom)).float().view(shape)
        pattern = torch.where(valid.view(shape), cov / safe, torch.zeros_like(cov))
        return pattern.to(w.dtype)


def estimate_patterns(
    network,
    batches: Iterable[torch.Tensor],
    *,
    progress: ProgressFn | None = None,
    total: int = 0,
) -> tuple[dict[str, torch.Tensor], int]:
    """Patterns for every pattern layer of a supported `network` from input batches: (name → pattern, images)."""
    graph = pattern_graph(network)
    device = device_of(network)
    moments = {name: _Moments(layer) for name, layer in graph.layers.items()}
    pending: dict[str, list] = {}  # layer name → [x, y] until its regime is known

    def pattern_call(target, module, x):
        y = module(x)
        pending[target] = [x, y]
        return y

    watch: dict[str, list[Callable]] = {}
    for name, layer in graph.layers.items():
        def store_y(value, name=name):
            pending[name][1] = value

        def finish(value, name=name, layer=layer):
            x, y = pending.pop(name)
            mask = None
            if layer.rectified:
                mask = _CONDITIONS[layer.regime](value)
                if mask.shape != y.shape:
                    mask = mask.reshape(y.shape)
            moments[name].update(x, y, mask)

        if layer.y_node != layer.node:
            watch.setdefault(layer.y_node, []).append(store_y)
        watch.setdefault(layer.mask_node or layer.y_node, []).append(finish)

    seen = 0
    model = network.model
    with frozen_eval(model), torch.no_grad():
        runner = _Runner(graph, pattern_call, watch)
        for batch in batches:
            runner.run(batch.to(device=device, dtype=torch.float32))
            pending.clear()
            seen += batch.shape[0]
            if progress is not None:
                progress(seen, total, "images")
    if seen == 0:
        raise ValueError("No images to estimate patterns from.")
    patterns = {name: mom.pattern().cpu() for name, mom in moments.items()}
    return patterns, seen


def _preprocess_of(network):
    pre = getattr(network, "preprocess", None)
    if pre is None:
        from ..networks.spec import IMAGENET_MEAN, IMAGENET_STD, Preprocess

        pre = Preprocess(IMAGENET_MEAN, IMAGENET_STD)
    return pre


def compute_patterns(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int = DEFAULT_SAMPLES,
    batch_size: int = 8,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> Patterns:
    """Estimate patterns for a plain `network` from an image folder or the offline sample photos."""
    from ..stats import sample_photo_batches

    preprocess = _preprocess_of(network)
    skipped = 0
    if images is not None:
        from ..images import find_images

        files = find_images(images)[:n]
        if not files:
            raise FileNotFoundError(f"No images (jpg, png, …) found below {images}.")
        batches = FolderBatches(files, preprocess, batch_size)
        try:
            tensors, count = estimate_patterns(network, batches, progress=progress, total=len(files))
        except ValueError as err:
            if batches.skipped == len(files):
                raise ValueError(f"None of the {len(files)} files below {images} could be read as an image.") from err
            raise
        source, skipped = f"folder {Path(images).expanduser().resolve()}", batches.skipped
    else:
        batches = sample_photo_batches(preprocess, n, batch_size, seed)
        tensors, count = estimate_patterns(network, batches, progress=progress, total=n)
        source = "augmented crops of the offline sample photos"
    return Patterns(tensors, count, getattr(network, "key", ""), getattr(network, "weights_id", ""), source, skipped)


def patterns_cache_path(model: str, weights: str, source_key: str) -> Path:
    """Cache file keyed by network, weights, and the source (folder or offline photos, sample count, estimator)."""
    from ..settings import cache_dir

    digest = hashlib.sha1(f"{source_key}|{ESTIMATOR_VERSION}".encode()).hexdigest()[:10]
    return cache_dir() / "patterns" / f"{model}__{weights}__{digest}.npz"


def source_key(images: str | os.PathLike | None, n: int) -> str:
    return f"folder:{Path(images).expanduser().resolve()}:{n}" if images else f"samples:{n}"


def get_patterns(
    network,
    *,
    images: str | os.PathLike | None = None,
    n: int = DEFAULT_SAMPLES,
    progress: ProgressFn | None = None,
    refresh: bool = False,
) -> Patterns:
    """Patterns for (network, weights, source): from the network's memo, the disk cache, or estimated and saved.

    A corrupt or ill-fitting cache file is re-estimated rather than raised. Networks without a key and
    weights id (bare wrappers of an nn.Module) are estimated every time and not cached on disk.
    """
    key = source_key(images, n)
    memo = getattr(network, "memo", None)
    memo_key = ("patterns", key)
    chain = pattern_graph(network)
    if memo is not None and not refresh and memo_key in memo:
        return memo[memo_key]
    model, weights = getattr(network, "key", None), getattr(network, "weights_id", None)
    path = patterns_cache_path(model, weights, key) if model and weights else None
    patterns = None
    if path is not None and path.is_file() and not refresh:
        try:
            patterns = Patterns.load(path)
            patterns.check_fits(chain)
        except ValueError:
            patterns = None  # recompute and overwrite
    if patterns is None:
        patterns = compute_patterns(network, images=images, n=n, progress=progress)
        if path is not None:
            try:
                patterns.save(path)
            except OSError:
                pass  # a read-only cache must not stop the user from getting a result
    if memo is not None:
        memo[memo_key] = patterns
    return patterns


# ---- the method --------------------------------------------------------------------------------


class PatternAttribution(Method):
    key = "pattern_attribution"
    name = "PatternAttribution"
    signed = True
    cost = "slow"
    sanity_checkable = False  # patterns belong to the weights they were estimated on (paper §4.4)
    description = ("Target logit propagated back with weights ⊙ learned signal patterns (two-component estimator), "
                   "summed over channels.")

    @classmethod
    def default_settings(cls) -> dict:
        return {
            "images": None,  # folder of natural images for the patterns; None: the offline photos (rough)
            "samples": DEFAULT_SAMPLES,  # images behind the patterns
            "patterns": None,  # precomputed Patterns (or dict layer name → tensor); None: cached / estimated
        }

    def available_for(self, network) -> str | None:
        try:
            pattern_graph(network)
        except UnsupportedNetwork as err:
            return str(err)
        return None

    def patterns(self, network) -> Patterns:
        given = self.settings["patterns"]
        if given is None:
            return get_patterns(network, images=self.settings["images"], n=int(self.settings["samples"]))
        if isinstance(given, Patterns):
            return given
        return Patterns({k: torch.as_tensor(v) for k, v in dict(given).items()}, 0, source="given")

    def _compute(self, network, x, target):
        graph = pattern_graph(network)
        patterns = self.patterns(network)
        patterns.check_fits(graph)
        device = x.device
        backward = {
            name: layer.module.weight.detach() * patterns.tensors[name].to(device, layer.module.weight.dtype)
            for name, layer in graph.layers.items()
        }

        def pattern_call(target_name, module, inp):
            """Forward: the layer itself. Backward to the input: the same layer with the weights w ⊙ a."""
            with torch.no_grad():
                y = module(inp)
            z = _apply_weight(module, inp, backward[target_name])
            return y + (z - z.detach())  # the value y exactly; the gradient of z

        h = x.clone().requires_grad_(True)
        with torch.enable_grad():
            out = _Runner(graph, pattern_call).run(h)
            if not isinstance(out, torch.Tensor):
                raise ValueError(f"{graph.title} returns {type(out).__name__}, not a tensor of logits.")
            if target >= out.shape[-1]:
                raise ValueError(f"Class index {target} is out of range 0…{out.shape[-1] - 1}.")
            seed = torch.zeros_like(out)
            seed[:, target] = 1.0
            (signal,) = torch.autograd.grad(out, h, grad_outputs=seed)
        extra = {"patterns": patterns.describe(), "patterns_rough": patterns.is_rough, "pattern_images": patterns.n}
        if patterns.source == "given":
            extra = {"patterns": "given by the caller"}
        return sum_channels(signal), extra
