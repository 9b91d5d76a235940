"""What each operation of a traced network is to PatternAttribution, and how a pattern layer computes with
other weights.

Kinds: "pattern" (convolutions and linear layers: a pattern is estimated for each), "affine" (BatchNorm in
eval mode: per-channel affine), "relu"/"relu6" (rectifiers), "maxpool" (commutes with them), "identity" and
"reshape" (change no value), "linear" (other linear maps: the regime of a rectifier after them is not the
layer's), "add" (additions of branches), "scale" (multiplication by a constant). Exact module types are
looked up: a type not in the tables is unknown, and the network is refused (it does not guess).
"""
from __future__ import annotations

import math
import operator
from typing import Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

_SAME_PADDING_CONVS = {
    (package + ".utils", kind + "SamePadding"): kind
    for package in ("efficientnet_lite_pytorch", "efficientnet_pytorch")
    for kind in ("Conv2dStatic", "Conv2dDynamic")
}


def same_padding(m: nn.Module) -> str | None:
    """The kind ("Conv2dStatic", "Conv2dDynamic") of an efficientnet package's same-padding convolution, or None."""
    kind = type(m)
    return _SAME_PADDING_CONVS.get((kind.__module__, kind.__name__))


def is_pattern_layer(m: nn.Module) -> bool:
    """Whether `m` gets a pattern: a convolution or linear layer (exact types), y = wᵀx + b per output neuron."""
    return type(m) in (nn.Conv2d, nn.Linear) or same_padding(m) is not None


#: Leaf modules by exact type → kind.
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
#: Tensor methods by name → kind.
METHOD_KINDS = {
    "add": "add", "add_": "add", "sub": "add", "sub_": "add",
    "mul": "scale", "mul_": "scale", "div": "scale", "div_": "scale", "neg": "scale",
    "flatten": "reshape", "view": "reshape", "reshape": "reshape", "contiguous": "identity", "clone": "identity",
    "relu": "relu", "relu_": "relu", "mean": "linear",
}
#: Operations that give shapes, not data (`x.size(0)` for a `view`).
SHAPE_METHODS = {"size", "dim"}
#: In-place operations, run out of place (the values before them are still needed).
OUT_OF_PLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                operator.itruediv: operator.truediv, torch.relu_: torch.relu}
#: Where each rectifier passes its input on linearly: the regime a pattern is estimated in.
PASS_CONDITIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": lambda v: v > 0,
    "relu6": lambda v: (v > 0) & (v < 6),
}


def module_kind(m: nn.Module) -> str | None:
    """The kind of a leaf module, None for one PatternAttribution cannot propagate."""
    if is_pattern_layer(m):
        return "pattern"
    kind = _MODULE_KINDS.get(type(m))
    if kind == "affine" and (not m.track_running_stats or m.running_mean is None or m.running_var is None):
        return None  # normalises with the batch's statistics even in eval mode: not affine
    if kind == "maxpool" and m.return_indices:
        return None
    return kind


def module_label(m: nn.Module) -> str:
    """How a refusal names a module: its type, and why a BatchNorm is not affine."""
    kind = type(m).__name__
    if isinstance(m, nn.modules.batchnorm._BatchNorm) and kind in ("BatchNorm1d", "BatchNorm2d"):
        return f"{kind} without running statistics"
    return kind


def _function_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return getattr(node.target, "__name__", str(node.target))


def where(node: fx.Node) -> str:
    """The suffix " (in Module)" naming the module whose forward calls `node`, for refusals ("" at the top)."""
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        _, kind = list(stack.values())[-1]
        return f" (in {getattr(kind, '__name__', kind)})"
    return ""


def call_kind(node: fx.Node, data) -> tuple[str | None, str]:
    """(kind or None if unknown, label) of a call_function / call_method node; `data`: names of data nodes."""
    args = [a for a in node.all_input_nodes if a.name in data]
    if node.op == "call_method":
        kind = METHOD_KINDS.get(node.target)
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


# ---- a pattern layer with other weights --------------------------------------------------------


def apply_weight(m: nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The pattern layer's own forward with `weight` instead of its weights, without bias."""
    if type(m) is nn.Linear:
        return F.linear(x, weight)
    if type(m) is nn.Conv2d:
        return m._conv_forward(x, weight, None)  # its padding mode and padding, as its forward
    kind = same_padding(m)
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


def weight_sums(m: nn.Module, x: torch.Tensor, outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Σ over samples of g ⊗ (input patch) for each g shaped like the layer's output: weight-shaped sums.

    The transpose of the layer's map w ↦ layer(x; w) (it is linear in w), applied to g.
    """
    if type(m) is nn.Linear:
        flat = x.reshape(-1, x.shape[-1])
        return [g.reshape(-1, g.shape[-1]).T @ flat for g in outputs]
    if type(m) is nn.Conv2d and m.padding_mode == "zeros" and not isinstance(m.padding, str):
        padded, padding = x, m.padding
    elif same_padding(m) == "Conv2dStatic":
        padded, padding = m.static_padding(x), m.padding
    else:  # padding modes, "same"/"valid", dynamic same padding: through autograd of the layer's own map
        with torch.enable_grad():
            w = m.weight.detach().clone().requires_grad_(True)
            out = apply_weight(m, x.detach(), w)
            return [torch.autograd.grad(out, w, g, retain_graph=True)[0] for g in outputs]
    return [torch.nn.grad.conv2d_weight(padded, m.weight.shape, g, m.stride, padding, m.dilation, m.groups)
            for g in outputs]
