"""The PatternAttribution method: the target logit propagated back with the weights w ⊙ a."""
from __future__ import annotations

import torch

from ...errors import UserError
from ...heads import class_logits, head_of
from ..base import Method, sum_channels
from .estimation import DEFAULT_SAMPLES, Patterns, get_patterns
from .graph import UnsupportedNetwork, pattern_graph
from .layer_kinds import apply_weight
from .runner import GraphRunner


class PatternAttribution(Method):
    """Kindermans et al.'s PatternAttribution with the two-component estimator (the package docstring)."""

    key = "pattern_attribution"
    name = "PatternAttribution"
    signed = True
    cost = "slow"
    sanity_checkable = False  # patterns belong to the weights they were estimated on (paper §4.3)
    takes_label_sets = False  # it runs its own traced graph, not the network the label set's score hooks
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
        """The patterns given in the settings, else those of the network's memo, the disk cache, or estimated."""
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
            z = apply_weight(module, inp, backward[target_name])
            return y + (z - z.detach())  # the value y exactly; the gradient of z

        h = x.clone().requires_grad_(True)
        with torch.enable_grad():
            out = GraphRunner(graph, pattern_call).run(h)
            if not isinstance(out, torch.Tensor):
                raise UserError(f"{graph.title} returns {type(out).__name__}, not a tensor of logits.")
            out = class_logits(out, head_of(network))  # the traced graph runs without Method's binary view
            if target >= out.shape[-1]:
                raise UserError(f"Class index {target} is out of range 0…{out.shape[-1] - 1}.")
            seed = torch.zeros_like(out)
            seed[:, target] = 1.0
            (signal,) = torch.autograd.grad(out, h, grad_outputs=seed)
        extra = {"patterns": patterns.describe(), "patterns_rough": patterns.is_rough, "pattern_images": patterns.n}
        if patterns.source == "given":
            extra = {"patterns": "given by the caller"}
        return sum_channels(signal), extra
