"""Running a PatternGraph on the network's own modules, with a say over each pattern layer: estimation reads
the layers' inputs and outputs through it, the attribution swaps in the backward pass with w ⊙ a."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import fx, nn

from .graph import PatternGraph
from .layer_kinds import METHOD_KINDS, OUT_OF_PLACE

#: (layer name, layer, its input) → its output: how the runner calls each pattern layer.
PatternCall = Callable[[str, nn.Module, torch.Tensor], torch.Tensor]


class GraphRunner(fx.Interpreter):
    """Runs the traced graph on the real modules: pattern layers through `pattern_call`, callbacks on values
    (`watch`: node name → callbacks), rectifiers and in-place operations out of place (the values before
    them are still needed)."""

    def __init__(self, graph: PatternGraph, pattern_call: PatternCall,
                 watch: dict[str, list[Callable[[torch.Tensor], None]]] | None = None):
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
        target = OUT_OF_PLACE.get(target, target)
        if "inplace" in kwargs:
            kwargs = {**kwargs, "inplace": False}
        return super().call_function(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        if target.endswith("_") and not target.startswith("_") and target[:-1] in METHOD_KINDS:
            target = target[:-1]
        return super().call_method(target, args, kwargs)
