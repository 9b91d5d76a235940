"""The network as PatternAttribution reads it: its forward function traced with torch.fx into a graph of
module calls and functional operations, the kind of every operation on the input's data path, and for each
pattern layer the BatchNorms that follow it and the rectifier regime its pattern is estimated in.

Where it runs (the support rule)
--------------------------------
The structure read is the one the network computes, whatever its stage list (additions of skip
connections, `torch.flatten`, `x.view` included). It is supported when every operation on the input's data
path is one of:

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

Exact module types are checked (`layer_kinds`). Everything else is refused by `available_for` with one
sentence naming the offending module type or operation: nonlinearities that are not piecewise linear with a
zero and an identity piece (SiLU/Swish, GELU, sigmoid, softmax attention, LeakyReLU), normalisations over
other axes (LayerNorm, GroupNorm), products of two activations (squeeze-and-excitation gates),
concatenation, and any module type it does not know (it does not guess), as well as forward functions
torch.fx cannot trace. VGG-16, ResNet-50 and EfficientNet-Lite0 are supported; torchvision's
efficientnet_b0 (SiLU, sigmoid gates), vit_b_16, swin_t and convnext (GELU, LayerNorm, attention) are refused.

The analysis is kept in the network's `memo` (with the model's structure it was made for), so it lives
and dies with the network; nothing is cached in this module.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch import fx, nn

from ...model_state import frozen_eval
from ...network_cache import cache_of
from ..base import spec_of
from .layer_kinds import SHAPE_METHODS, call_kind, is_pattern_layer, module_kind, module_label, where


class UnsupportedNetwork(ValueError):
    """PatternAttribution cannot run on this network; the message says why in one sentence."""


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


@dataclass
class _DataPath:
    """The nodes the input's data flows through, with their kinds."""

    kinds: dict[str, str]  # node name → kind ("input", a kind of `layer_kinds`, or "unknown")
    module_kinds: dict[str, str]  # call_module target → kind

    def users(self, node: fx.Node) -> list[fx.Node]:
        """The nodes on the data path (or the output) that use `node`'s value."""
        return [u for u in node.users if u.name in self.kinds or u.op == "output"]


class _Tracer(fx.Tracer):
    """torch.fx's tracer with the pattern layers as leaves (their forward is run, not traced)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return is_pattern_layer(m) or super().is_leaf_module(m, qualname)


def pattern_graph(network) -> PatternGraph:
    """The network's PatternGraph, or UnsupportedNetwork saying (one sentence) why it is not supported.

    Kept in the network's cache (`memo.pattern_graph`) with the model's structure (module names, objects, types,
    running statistics) and made again when that changes; a bare wrapper without a cache is analysed every time.
    """
    model = network.model
    structure = (_title(network), tuple((name, id(m), type(m), getattr(m, "running_mean", 0) is None)
                                        for name, m in model.named_modules()))
    cache = cache_of(network)
    kept = cache.pattern_graph.get(()) if cache is not None else None
    if kept is not None and kept[0] == structure:
        result = kept[1]
    else:
        try:
            result = _analyse(network)
        except UnsupportedNetwork as err:
            result = str(err)  # the refusal is kept too: `available_for` asks often
        if cache is not None:
            cache.pattern_graph[()] = (structure, result)
    if isinstance(result, str):
        raise UnsupportedNetwork(result)
    return result


def _analyse(network) -> PatternGraph:
    """Trace the network, read the kind of every operation on the data path, and describe each pattern layer."""
    model, title = network.model, _title(network)
    modules = dict(model.named_modules())
    graph = _trace(model, modules, title)
    path = _read_data_path(graph, modules, title)
    layers = {node.target: _pattern_layer(node, modules, path)
              for node in graph.nodes if path.kinds.get(node.name) == "pattern"}
    if not layers:
        raise UnsupportedNetwork(f"{title} has no convolution or linear layer to estimate patterns for.")
    return PatternGraph(title, fx.GraphModule(model, graph), layers, path.module_kinds)


def _title(network) -> str:
    spec = spec_of(network)
    return getattr(spec, "title", None) or type(network.model).__name__


def _refusal(title: str, offenders: list[str]) -> UnsupportedNetwork:
    # three names say what kind of network it is; the whole list can run to hundreds of characters
    shown = ", ".join(offenders[:3]) + (f" and {len(offenders) - 3} more" if len(offenders) > 3 else "")
    return UnsupportedNetwork(
        f"{title} contains {shown}, which PatternAttribution cannot propagate: its signal estimator covers "
        "convolutions, linear layers, BatchNorm, ReLU/ReLU6, pooling and skip connections only."
    )


# ---- step 1: trace -----------------------------------------------------------------------------


def _trace(model: nn.Module, modules: dict[str, nn.Module], title: str) -> fx.Graph:
    """The model's forward as a torch.fx graph with the pattern layers as leaves, or the refusal.

    When tracing fails and the model has leaf modules of unknown kinds, those are named (they are the
    likelier reason, and the user can act on them); otherwise the tracer's own first line is.
    """
    tracer = _Tracer()
    unknown_leaves = list(dict.fromkeys(
        module_label(m) for name, m in modules.items()
        if tracer.is_leaf_module(m, name) and module_kind(m) is None
        and not isinstance(m, (nn.Sequential, nn.ModuleList, nn.ModuleDict))
    ))
    try:
        with frozen_eval(model):
            return tracer.trace(model)
    except Exception as err:  # noqa: BLE001 - any tracing failure means: unsupported
        if unknown_leaves:
            raise _refusal(title, unknown_leaves) from err
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise UnsupportedNetwork(
            f"PatternAttribution reads the layer graph of {title} by tracing its forward function with torch.fx, "
            f"which cannot trace it ({type(err).__name__}: {first[:200].rstrip('.')})."
        ) from err


# ---- step 2: the kind of every operation on the data path --------------------------------------


def _read_data_path(graph: fx.Graph, modules: dict[str, nn.Module], title: str) -> _DataPath:
    """The kinds along the data path; refuses unknown operations (all named) and layers called twice."""
    path = _DataPath({}, {})
    unknown_modules: list[str] = []
    unknown_operations: list[str] = []
    calls: Counter[str] = Counter()
    for node in graph.nodes:
        kind, offender = _node_kind(node, modules, path.kinds)
        if kind is None:
            continue
        path.kinds[node.name] = kind  # "unknown" too: read on, to name every offender
        if offender is not None:
            (unknown_modules if node.op == "call_module" else unknown_operations).append(offender)
        elif node.op == "call_module":
            path.module_kinds[node.target] = kind
            if kind == "pattern":
                calls[node.target] += 1
    offenders = list(dict.fromkeys(unknown_modules + unknown_operations))
    if offenders:
        raise _refusal(title, offenders)
    twice = [name for name, n in calls.items() if n > 1]
    if twice:
        raise UnsupportedNetwork(f"{title} calls {', '.join(twice)} more than once per forward pass; "
                                 "PatternAttribution estimates one pattern per layer call.")
    return path


def _node_kind(node: fx.Node, modules: dict[str, nn.Module], kinds: dict[str, str]) -> tuple[str | None, str | None]:
    """(kind, None) for a node on the data path, ("unknown", label) for one it cannot propagate, and
    (None, None) for one off the path (constants, shape arithmetic, the output)."""
    if node.op == "placeholder":
        return "input", None
    if node.op in ("get_attr", "output") or not any(a.name in kinds for a in node.all_input_nodes):
        return None, None
    if node.op == "call_module":
        m = modules[node.target]
        kind = module_kind(m)
        return (kind, None) if kind is not None else ("unknown", module_label(m))
    if node.op == "call_method" and node.target in SHAPE_METHODS or (
            node.op == "call_function" and node.target is getattr and node.args[1] in ("shape", "ndim")):
        return None, None  # a shape, not data
    kind, label = call_kind(node, kinds)
    return (kind, None) if kind is not None else ("unknown", label + where(node))


# ---- step 3: each pattern layer: its BatchNorms and its regime ---------------------------------


def _pattern_layer(node: fx.Node, modules: dict[str, nn.Module], path: _DataPath) -> PatternLayer:
    layer = modules[node.target]
    y, batchnorms = _batchnorms_after(node, layer, modules, path)
    regime, mask = _regime(y, path)
    return PatternLayer(node.target, layer, node.name, y.name, tuple(batchnorms), regime, mask)


def _batchnorms_after(node: fx.Node, layer: nn.Module, modules: dict[str, nn.Module],
                      path: _DataPath) -> tuple[fx.Node, list[nn.Module]]:
    """The BatchNorms that directly and only follow the layer, over its output channels, and the node of y:
    the last of them (or the layer's own call)."""
    channels = layer.out_features if type(layer) is nn.Linear else layer.out_channels
    y, batchnorms = node, []
    while True:
        after = path.users(y)
        if len(after) != 1 or path.kinds.get(after[0].name) not in ("affine", "identity"):
            break
        if path.kinds[after[0].name] == "affine":
            if modules[after[0].target].num_features != channels:
                break
            batchnorms.append(modules[after[0].target])
        y = after[0]
    return y, batchnorms


def _regime(y: fx.Node, path: _DataPath) -> tuple[str, str | None]:
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
        for u in path.users(node):
            kind = path.kinds.get(u.name)
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
