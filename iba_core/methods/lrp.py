"""Layer-wise Relevance Propagation (Bach et al. 2015) with zennit, in three variants.

- `lrp_alpha1beta0`: the α=1, β=0 rule on every convolution and fully connected layer (the paper's main
  LRP variant, "most commonly used").
- `lrp_epsilon`: the ε rule on every convolution and fully connected layer, ε = 0.25 by default (setting
  `epsilon`); the usual counterpart to α1β0.
- `lrp_alpha0beta1eps5`: the paper's second variant, "α=0, β=−1, ε=5" in §4.1 and "α=0, β=1, ε=5" in
  the results table (Table 1, degradation and bounding box), the one evaluated in Sensitivity-n and
  the sanity check. See "The α=0, β=1, ε=5 rule" below.

All start with relevance 1 at the target logit (all other logits 0) and propagate it to the input; the
map is the input relevance summed over colour channels (signed). Activations pass relevance through,
average pooling and residual sums split it in proportion to their inputs (zennit's `Pass` and `Norm`
rules), max-pooling routes it to the maximum (plain gradient).

Networks are canonised first, on a private copy (zennit's canonizers rewrite parameters and forward
functions while active, so the user's network — possibly shared with another session — is never touched).
The canonizers come from the network's spec (`NetworkSpec.canonizers`: BatchNorms merged exactly into the
convolutions, residual additions as explicit `Sum` modules so relevance splits between skip and block).
A spec that knows none (a derived spec) makes LRP unavailable: residual additions would silently get plain
gradient. A bare hand-built network without a spec gets the sequential BatchNorm merge. The paper had no
canonizers for skip connections and reported LRP for VGG-16 only; with them, all three variants also run
on ResNet-50 and EfficientNet-Lite0 (beyond the paper).

The α=0, β=1, ε=5 rule
----------------------
The paper took this variant from Böhle & Eitel's PyTorch LRP ("b-rule" with beta = −1, epsilon = 5). That
implementation splits each contribution z_ij = x_i w_ij into its positive and negative part and computes

    R_i = Σ_j [ (1+β) z⁺_ij / (Σ_i z⁺_ij + ε) − β z⁻_ij / (Σ_i z⁻_ij − ε) ] R_j          (biases left out)

i.e. the usual α-β rule with α = 1+β, each denominator shifted by ε away from zero. With β = −1 (α = 0)
only the negative contributions carry relevance, with weight +1:

    R_i = Σ_j z⁻_ij / (Σ_i z⁻_ij − ε) · R_j,        z⁻_ij = min(x_i w_ij, 0) = x⁺_i w⁻_ij + x⁻_i w⁺_ij.

In the convention α − β = 1 this is α = 0, β = −1 (§4.1); Table 1's "β = 1" names the weight of the
negative part, the same rule. zennit's `AlphaBeta` has the same form, α·(positive part) − β·(negative
part), but requires α, β ≥ 0, so it cannot take β = −1; `NegativeContributions` below is a zennit
`BasicHook` with exactly these modifiers: inputs (x⁺, x⁻), weights (w⁻, w⁺), biases zeroed (as in Böhle &
Eitel), the sum of both outputs stabilised by zennit's `Stabilizer` (adds ε with the sign of the
denominator, +ε at 0; Böhle & Eitel's special case for all-zero denominators only touches neurons whose
contributions are all zero, so it changes nothing). The setting `epsilon` (default 5, the paper's)
changes ε, and the key with it (`lrp_alpha0beta1eps1` for ε = 1). The absolute ε absorbs relevance at every layer, so with
relevance 1 at the logit the maps' values are tiny (around 1e-17 on EfficientNet-Lite0 at 224 px); only
their relative sizes matter. On ReLU networks without residual sums (VGG-16) the map is non-negative.
"""
from __future__ import annotations

import torch
from torch import nn
from zennit.composites import LayerMapComposite, layer_map_base
from zennit.core import BasicHook, Stabilizer
from zennit.rules import AlphaBeta, ClampMod, Epsilon
from zennit.types import Convolution

from ..networks.canonizers import sequential_canonizers
from ..errors import UserError
from .base import Method, key_number, spec_of, sum_channels, working_copy
from .gradients import per_image


def canonizers_for(network, model: nn.Module) -> list:
    """The canonizers that put `model` (a private copy of `network.model`) into a form LRP rules fit."""
    spec = spec_of(network)
    if spec is None:
        return sequential_canonizers(model)
    if spec.canonizers is None:
        raise UserError(no_canonizers(spec))
    return spec.canonizers(model)


def no_canonizers(spec) -> str:
    return (f"no LRP canonizers are known for {spec.title}: LRP's rules need each skip connection and normalisation "
            "of a network described, as the built-in networks' are.")


# ---- the rules ---------------------------------------------------------------------------------


class NegativeContributions(BasicHook):
    """The ε-stabilised α-β rule with α = 0 and the negative part weighted by 1 (see the module docstring).

    R_i = Σ_j z⁻_ij / stabilise(Σ_i z⁻_ij, ε) · R_j with z⁻_ij = x⁺_i w⁻_ij + x⁻_i w⁺_ij; biases are zeroed.
    """

    def __init__(self, epsilon: float = 5.0):
        stabilise = Stabilizer.ensure(float(epsilon))
        super().__init__(
            input_modifiers=[lambda x: x.clamp(min=0), lambda x: x.clamp(max=0)],
            param_modifiers=[ClampMod(max=0.0, zero_params=["bias"]), ClampMod(min=0.0, zero_params=["bias"])],
            output_modifiers=[lambda z: z] * 2,
            gradient_mapper=lambda out_grad, outputs: [out_grad / stabilise(outputs[0] + outputs[1])] * 2,
            reducer=lambda inputs, gradients: inputs[0] * gradients[0] + inputs[1] * gradients[1],
        )


# ---- the method --------------------------------------------------------------------------------

RULES = ("alpha1beta0", "epsilon", "alpha0beta1")
#: The rule's ε when the setting `epsilon` is None (α1β0 has none; 0.25 is kept there for old records).
DEFAULT_EPSILON = {"alpha1beta0": 0.25, "epsilon": 0.25, "alpha0beta1": 5.0}


def lrp_composite(rule: str, epsilon: float, canonizers: list) -> LayerMapComposite:
    if rule == "alpha1beta0":
        make = lambda: AlphaBeta(alpha=1.0, beta=0.0)  # noqa: E731
    elif rule == "epsilon":
        make = lambda: Epsilon(epsilon=epsilon)  # noqa: E731
    elif rule == "alpha0beta1":
        make = lambda: NegativeContributions(epsilon=epsilon)  # noqa: E731
    else:
        raise UserError(f"Unknown LRP rule {rule!r}; choose one of: {', '.join(RULES)}.")
    layer_map = layer_map_base() + [(Convolution, make()), (nn.Linear, make())]
    return LayerMapComposite(layer_map=layer_map, canonizers=canonizers)


class LRP(Method):
    signed = True

    def __init__(self, rule: str = "alpha1beta0", **settings):
        super().__init__(rule=rule, **settings)
        rule = self.settings["rule"]
        if rule not in RULES:
            raise UserError(f"Unknown LRP rule {rule!r}; choose one of: {', '.join(RULES)}.")
        if self.settings["epsilon"] is None:
            self.settings["epsilon"] = DEFAULT_EPSILON[rule]
        epsilon = float(self.settings["epsilon"])
        if rule == "alpha1beta0":
            self.key, self.name = "lrp_alpha1beta0", "LRP α=1, β=0"
            self.description = "Relevance of the target logit propagated with the α=1, β=0 rule, summed over channels."
        elif rule == "epsilon":
            self.key = "lrp_epsilon" + ("" if epsilon == DEFAULT_EPSILON[rule] else key_number(epsilon))
            self.name = f"LRP ε={epsilon:g}"
            self.description = "Relevance of the target logit propagated with the ε rule, summed over channels."
        else:  # the key names its ε (the paper's 5 by default), so a map keyed by it says which ε made it
            self.key, self.name = f"lrp_alpha0beta1eps{key_number(epsilon)}", f"LRP α=0, β=1, ε={epsilon:g}"
            self.description = ("Relevance of the target logit propagated along negative contributions only "
                                "(α=0, β=1, ε-stabilised; the paper's second LRP variant), summed over channels.")

    @classmethod
    def default_settings(cls) -> dict:
        return {"rule": "alpha1beta0", "epsilon": None}  # epsilon None: the rule's default (DEFAULT_EPSILON)

    def available_for(self, network) -> str | None:
        spec = spec_of(network)
        return no_canonizers(spec) if spec is not None and spec.canonizers is None else None

    batched = True  # one private canonised copy and one pass for the batch (the rules work image by image)

    def _compute_batch(self, network, x, targets):
        model = working_copy(network.model)
        composite = lrp_composite(self.settings["rule"], float(self.settings["epsilon"]), canonizers_for(network, model))
        x = x.clone().requires_grad_(True)
        with torch.enable_grad(), composite.context(model) as modified:
            out = modified(x)
            if max(targets) >= out.shape[-1]:
                raise UserError(f"Class index {max(targets)} is out of range 0…{out.shape[-1] - 1}.")
            seed = torch.zeros_like(out)
            seed[torch.arange(len(targets)), targets] = 1.0  # relevance 1 at each image's own target logit
            (relevance,) = torch.autograd.grad(out, x, grad_outputs=seed)
        return per_image(sum_channels(relevance))
