"""Cutting any traceable network at one layer with `torch.fx`: prefix (input → layer), suffix (layer → logits).

The Per-Sample Bottleneck changes only the layer's output, so everything before the layer is the same in
every step: with a prefix and a suffix it runs the prefix once and only the suffix per step, as it does
for the registered networks' stage lists. Any `nn.Module` that `torch.fx` can trace symbolically (all of
torchvision's classifiers, most hand-written CNNs) can be cut this way:

1. trace the network with the layer's module kept as one call (a leaf), so the graph has one node for it;
2. the prefix is the graph up to that node; the suffix is the rest, with the node's value as its input;
3. refuse the cut when the suffix needs any other value computed from the image (a skip connection
   around the layer, e.g. inside a ResNet block; the image itself): those values would be missing;
   values computed from parameters alone (ViT's class token, Swin's position biases) are recomputed
   in the suffix;
4. check the cut once: suffix(prefix(x)) must equal model(x) on two random images.

Every refusal is a `CutError` with the reason; the caller then uses the forward-hook path (whole network
per step). The cut modules share the network's submodules and parameters (nothing is copied or changed).
"""
from __future__ import annotations

import inspect

import torch
from torch import fx, nn

from ..model_state import frozen_eval


class CutError(RuntimeError):
    """The network cannot be cut at the layer (the message says why)."""


class _LayerLeafTracer(fx.Tracer):
    """fx's default tracer, but the bottleneck layer's module stays one call (one graph node)."""

    def __init__(self, layer: str):
        super().__init__()
        self.layer = layer

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return qualname == self.layer or super().is_leaf_module(m, qualname)


def cut_at(model: nn.Module, layer: str, *, input_size: int = 224, check: bool = True,
           rtol: float = 1e-4, channels: int = 3) -> tuple[fx.GraphModule, fx.GraphModule]:
    """(prefix, suffix) of `model` cut after the module `layer` (a dotted path). See the module docstring.

    input_size, channels: the side and channels of the random images the cut is checked on (the network's).
    Raises CutError when the network cannot be traced, the layer is not one call in the graph, other
    values cross the cut, or the cut computes something else than the network.
    """
    try:
        model.get_submodule(layer)
    except AttributeError as err:
        raise CutError(f"the network has no module {layer!r}") from err
    # fx stores tensor constants it meets (plain tensor attributes) as `_tensor_constant<i>` on the traced
    # module: the cut modules take them over below, then they are removed again so the network is as it was.
    attributes = set(vars(model))
    try:
        prefix, suffix = _cut(model, layer)
    finally:
        for name in set(vars(model)) - attributes:
            delattr(model, name)
    if check:
        _check(model, prefix, suffix, input_size, rtol, channels)
    # no .eval() here: it would switch the network's own (shared) modules; runs use `frozen_eval`
    return prefix, suffix


def _cut(model: nn.Module, layer: str) -> tuple[fx.GraphModule, fx.GraphModule]:
    """The unchecked cut of `cut_at` (steps 1–3 of the module docstring)."""
    with frozen_eval(model):  # the trace bakes in Python branches on self.training: take the eval ones
        try:
            graph = _LayerLeafTracer(layer).trace(model, concrete_args=_optional_args(model))
        except Exception as err:  # noqa: BLE001 - any trace failure means: use the hook path
            raise CutError(f"torch.fx cannot trace the network ({type(err).__name__}: {err})") from err
    nodes = list(graph.nodes)
    calls = [n for n in nodes if n.op == "call_module" and n.target == layer]
    if len(calls) != 1:
        raise CutError(f"{layer!r} is {len(calls)} calls in the traced graph, not one")
    cut = calls[0]
    output = next(n for n in nodes if n.op == "output")

    from_image: set[fx.Node] = set()  # values computed from the input
    after_cut: set[fx.Node] = {cut}  # values computed from the layer's output
    for n in nodes:
        inputs = n.all_input_nodes
        if n.op == "placeholder" or any(a in from_image for a in inputs):
            from_image.add(n)
        if any(a in after_cut for a in inputs):
            after_cut.add(n)
    needed = _ancestors(output, stop=cut)
    # The values the suffix would need from before the cut: image-derived, not from the layer, used after it.
    crossing = [n for n in nodes if n in needed and n in from_image and n not in after_cut
                and any(u in needed and u in after_cut for u in n.users)]
    if crossing:
        names = ", ".join(n.name for n in crossing[:5])
        raise CutError(f"values other than {layer!r}'s output cross the cut ({names}), e.g. a skip connection "
                       "around the layer")

    prefix_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    wanted = _ancestors(cut)
    for n in nodes:
        if n in wanted:
            env[n] = prefix_graph.node_copy(n, lambda a: env[a])
    prefix_graph.output(env[cut])

    suffix_graph = fx.Graph()
    env = {cut: suffix_graph.placeholder("z")}
    for n in nodes:
        if n in needed and n is not cut and n.op != "placeholder":
            env[n] = suffix_graph.node_copy(n, lambda a: env[a])

    # GraphModule takes the modules and parameters the graph calls from `model` by reference: nothing is copied.
    prefix = fx.GraphModule(model, prefix_graph, "Prefix")
    suffix = fx.GraphModule(model, suffix_graph, "Suffix")
    return prefix, suffix


def _optional_args(model: nn.Module) -> dict | None:
    """The forward's optional arguments at their defaults (timm's ViT: attn_mask=None), baked into the trace: the
    network is called with the image alone, and as placeholders they would count as values from the input."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    optional = {p.name: p.default for p in params
                if p.default is not inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD}
    return optional or None


def _ancestors(node: fx.Node, stop: fx.Node | None = None) -> set[fx.Node]:
    """`node` and every node it depends on, not looking behind `stop`."""
    seen: set[fx.Node] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n is not stop:
            todo.extend(n.all_input_nodes)
    return seen


def _check(model: nn.Module, prefix: nn.Module, suffix: nn.Module, size: int, rtol: float,
           channels: int = 3) -> None:
    """CutError unless suffix(prefix(x)) == model(x) on two seeded random images (fp32, relative tolerance)."""
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, channels, size, size, generator=g).to(device)
    try:
        with frozen_eval(model), torch.no_grad():
            expected = model(x)
            middle = prefix(x)
            got = suffix(middle)
    except Exception as err:  # noqa: BLE001 - a cut that does not run is no cut
        raise CutError(f"the cut network does not run ({type(err).__name__}: {err})") from err
    if not isinstance(middle, torch.Tensor):  # a block returning (hidden states, attention): the hook path takes it
        raise CutError("the layer's output is not one tensor")
    if not isinstance(expected, torch.Tensor) or not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        raise CutError("the cut network's output differs in type or shape from the network's")
    scale = float(expected.abs().max()) or 1.0
    if not torch.allclose(got, expected, rtol=rtol, atol=rtol * scale):
        raise CutError("the cut network computes different logits than the network (the trace missed something)")
