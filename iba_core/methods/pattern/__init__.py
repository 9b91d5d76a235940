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

Where it runs: `graph.py` (the support rule). Patterns, their estimation and their cache: `estimation.py`.

Cost: "slow", because the first use estimates patterns (many passes); afterwards one forward and one
backward pass (plus one convolution per pattern layer). A randomised network (the sanity check) has a new
weights id and needs new patterns — the IBA paper left PatternAttribution out of the sanity check for that
reason (§4.3).

The package
-----------
layer_kinds   what each operation is (tables of module, function and method kinds); a pattern layer's
              forward with other weights, and the transpose of that map (the estimator's sums)
graph         the torch.fx analysis: trace, kinds along the data path, each layer's BatchNorms and regime
runner        runs the traced graph with a say over each pattern layer (estimation and the backward pass)
estimation    the two-component estimator, `Patterns`, and their cache (disk and the network's memo)
method        `PatternAttribution`, the registered method
"""
from __future__ import annotations

from .estimation import (
    DEFAULT_SAMPLES,
    ESTIMATOR_VERSION,
    Patterns,
    compute_patterns,
    estimate_patterns,
    get_patterns,
    patterns_cache_path,
    source_key,
)
from .graph import PatternGraph, PatternLayer, UnsupportedNetwork, pattern_graph
from .layer_kinds import is_pattern_layer
from .method import PatternAttribution

__all__ = [
    "DEFAULT_SAMPLES", "ESTIMATOR_VERSION", "PatternAttribution", "PatternGraph", "PatternLayer", "Patterns",
    "UnsupportedNetwork", "compute_patterns", "estimate_patterns", "get_patterns", "is_pattern_layer",
    "pattern_graph", "patterns_cache_path", "source_key",
]
