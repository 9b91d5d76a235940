"""CoIBA, the comprehensive information bottleneck (Hong et al., CVPR 2025): one damping mask λ shared by
bottlenecks at every layer of a range.

Each layer l of the range replaces its output R_l by Z_l = λ_l·R_l + (1 − λ_l)·ε_l with ε_l ~ N(μ_l, σ_l²), its
OWN feature statistics, and the same λ (paper §3, eq. 6). Which layers: the placement (`PLACEMENTS`,
`placement_of`) — the inputs of the transformer blocks' attention branches as the authors place them
(`branch_range`: each block's first normalisation, e.g. timm's `norm1`), or whole layer outputs (`layer_range`).
The information term is the KL at the FIRST layer only. With the output placement, by the data-processing
inequality I(R_1; Z_1) bounds the information that reaches any later layer (paper §3.2); with the branch placement
the residual stream stays clean, so it bounds only what passes the branches. Loss = the head's target term
(`heads.target_nll`) + β·Σ KL with β = β·k / k, k the elements of the first layer (the authors' β on the MEAN
capacity is β·k here: their scripts' β = 1, `CoIBASettings`).

The mask ("location", the paper's): one λ per location of the first layer's grid, shared by all channels; the
tokens off the grid (a ViT's class token) get one λ each, no blur; their bits count in `total_bits` and
`unlocated_bits`, not on the map, as the Per-Sample Bottleneck handles them (`per_sample.py`). "element": one λ
per unit, as the Per-Sample Bottleneck; only where every layer of the range has the first layer's shape (with a
one-layer range it IS the Per-Sample Bottleneck). A later layer on another grid (a CNN's next stage) gets λ
resized to its grid (`resize_mask`: the area average where the grid shrinks, bilinear where it grows); token
layers with the first layer's tokens use λ as it is.

How the network runs: where it has a stage list, the prefix up to the first layer runs once and the rest in
segments cut at the later layers, with Z_l injected between them ("stages"); else the first layer by a
`torch.fx` cut ("fx") or a forward hook ("hook"), and the later layers by forward hooks on their modules that
replace the output, removed after each pass (also on errors). An fx suffix may have traced through a later
layer's module (its hook would never fire): `for_network` checks that every later hook fires exactly once in
one pass through the cut, else it runs the whole network on the hook path.

The preset is the authors' setting (`CoIBASettings`: file and line of each value). Deviations from their code
(docs/science/coiba.md): the output placement on networks without an attention branch (a
CNN: their code has no working CNN path); λ resized across grids (theirs keeps one grid); the class token's bits
kept in `unlocated_bits`; statistics of the offline photos, not ImageNet's.
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import asdict, dataclass, fields
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .bottleneck import inject_noise
from .errors import UserError, quoted
from .feature_stats import FeatureStats
from .model_state import frozen_eval, replaced_output
from .network_cache import cache_of
from .networks.tokens import FeatureLayout
from .per_sample import BottleneckSettings, PerSampleBottleneck, _BatchFit
from .runners import HookRunner, SplitRunner, fast_format, module_key

#: CoIBA's masks: "location" (the paper's: one λ per location, shared by the channels), "element" (one per unit).
MASKS = ("location", "element")
#: What a person choosing CoIBA on a CNN should know first (the Per-Sample page, the CLI's --help): measured on the
#: offline network by `benchmarks/bench_coiba.py --effects` (docs/science/coiba.md).
CNN_NOTE = ("CoIBA on a CNN is this project's extension: the authors run it on vision transformers, at the input "
            "of each block's attention branch. A CNN has no such branch, so here the bottlenecks replace whole "
            "layer outputs, with the authors' β (β·k = 1): on the offline network that kept the class on all four "
            "sample photos, with 10–20 times the one-layer bottleneck's bits; at β·k = 10 it lost the class on all "
            "four (docs/science/coiba.md).")
#: Registered networks whose last stage is the classifier's own convolution (EfficientNet's 1×1 "head" to 1280
#: channels): the default range ends before it, on the last block (the paper inserts bottlenecks in blocks).
HEAD_STAGES = ("head",)


#: Where CoIBA's bottlenecks sit (`placement_of`):
#: - "branch": the input of each transformer block's attention branch — the block's first normalisation's output —
#:   as the authors place them (timm's `blocks.{i}.norm1`, `op=norm1` in run.sh:15-19 of the CoIBA authors' code,
#:   IBA/ in St0pien/rot-chefer at aeb36d3; `utils/iba_utils.py:29,39` builds the names). The residual stream stays
#:   clean: the prediction keeps every block's clean skip path, so a layer's KL no longer bounds what reaches the
#:   logits (docs/science/coiba.md).
#: - "output": a layer's whole output (for a block, the residual stream: a location's signal passes λ once per
#:   layer); this project's placement before the authors' was read, and the only one on a CNN.
#: - "auto": "branch" on a transformer with a class token (the authors' models), "output" elsewhere.
PLACEMENTS = ("auto", "output", "branch")
#: The authors' range on ViT-B/16: blocks.4 … blocks.11 of 12 (run.sh:16-17, st=4, et=12): from a third of the
#: depth to the last block. The same ratio gives the default range on any other depth.
BRANCH_FIRST_DEPTH = 4 / 12


@dataclass
class CoIBASettings(BottleneckSettings):
    """The Per-Sample Bottleneck's settings and checks, with CoIBA's defaults as the authors run it (IBA/ in
    St0pien/rot-chefer at aeb36d3):

    - β·k = 1: their run script's β = 1 on the MEAN capacity (run.sh:19, run_eval.sh:18; `coiba.py:237-238`
      `loss = model_loss + beta * capacity().mean()`), which is β·k = 1 here (β = β·k / k on the summed KL). Their
      class default is β = 10 (`coiba.py:55`); this project used β·k 10 before (measured
      effect: docs/science/coiba.md).
    - 10 steps, lr 1 (`parsing.py:23-24`), 10 noisy copies (`coiba.py:57`), α = 5 (`iba_base.py:72`);
    - no smoothing (σ_s = 0: `coiba.py:103` sets `self.smooth = None`);
    - the read point of the last forward pass (`read_point="last_step"`: `_get_saliency` reads the capacity of the
      10th pass, before the last Adam update; `coiba.py:231-248`);
    - one λ per location shared by the channels (`mask="location"`, `coiba.py:92`);
    - `placement` (`PLACEMENTS`): "auto" — their branch inputs on a transformer with a class token.
    """

    beta_k: float = 1.0
    sigma: float = 0.0
    read_point: str = "last_step"
    mask: str = "location"
    placement: str = "auto"

    @classmethod
    def for_range_row(cls, base: BottleneckSettings, beta_k: float) -> "CoIBASettings":
        """A β × layer grid's range cell (`beta_layer`): the grid's settings (steps, batch, lr, seed, …) at `beta_k`,
        with CoIBA's own smoothing and read point (the authors': none, the last forward pass), on the outputs of the
        layers the row names ("output": its labels name those layers)."""
        from dataclasses import fields

        values = {f.name: getattr(base, f.name) for f in fields(BottleneckSettings)}
        preset = cls()
        return cls(**{**values, "beta_k": beta_k, "sigma": preset.sigma, "read_point": preset.read_point,
                      "placement": "output"})

    def validate(self) -> "CoIBASettings":
        super().validate()
        if self.mask not in MASKS:
            raise UserError(f"Unknown CoIBA mask {str(self.mask)[:40]!r}; choose one of: {', '.join(MASKS)}.")
        if self.placement not in PLACEMENTS:
            raise UserError(f"Unknown CoIBA placement {str(self.placement)[:40]!r}; choose one of: "
                            f"{', '.join(PLACEMENTS)}.")
        return self


#: How every refusal of a layer range ends: the form expected, with an example.
RANGE_FORM = "two layer names as FIRST:LAST (e.g. block3_2:block7_1)"


def parse_range(given: str | Sequence[str]) -> tuple[str, str]:
    """(first, last) of a layer range as users write it: "FIRST:LAST" (the CLI's --layer-range, a link's `range`,
    CoIBA's `layers` setting, run.json) or a (first, last) pair; the one parser of a range's text. A UserError
    saying what is expected otherwise; the network checks the names once it is loaded (`layer_range`)."""
    if isinstance(given, str):
        first, sep, last = given.partition(":")
        parts = [first.strip(), last.strip()] if sep and ":" not in last else []
    elif isinstance(given, Sequence):
        parts = [str(name).strip() for name in given]
    else:
        parts = []
    if len(parts) != 2 or not all(parts):
        raise UserError(f"A layer range is {RANGE_FORM}, not {quoted(given, 60)}.")
    return parts[0], parts[1]


def range_text(first: str, last: str) -> str:
    """(first, last) as `parse_range` reads it back: "FIRST:LAST"."""
    return f"{first}:{last}"


def layer_range(network, first: str, last: str) -> list[str]:
    """The spec's layers from `first` to `last` inclusive, in network.spec.layers order; a UserError naming the
    layers when one is unknown, the range runs backwards, or a layer in it cannot share the first's mask.

    A later layer inside another layer of the range (a block's own sub-modules, where a network lists every
    module) is left out: the block's output carries the bottleneck, as the paper puts one per block."""
    spec = network.spec
    spec.check_layer(first)
    spec.check_layer(last)
    order = list(spec.layers)
    i, j = order.index(first), order.index(last)
    if j < i:
        raise UserError(f"The layer range runs backwards: {first} comes after {last} in {spec.title}; give the "
                        f"range as {last} … {first}.")
    span = order[i : j + 1]
    paths = {layer: spec.hook_modules.get(layer, layer) for layer in span}
    layers = [first] + [layer for layer in span[1:]
                        if not any(paths[layer].startswith(paths[other] + ".") for other in span if other != layer)]
    check_shared(network, layers)
    return layers


def check_shared(network, layers: Sequence[str]) -> None:
    """A UserError unless every layer can take the first layer's mask: layers in the network's order, each once,
    with the first layer's tokens off the grid (a class token that the first layer lacks would have no λ)."""
    if not layers:
        raise UserError("A CoIBA range needs at least one layer.")
    order = list(network.spec.layers)
    for layer in layers:
        network.spec.check_layer(layer)
    index = [order.index(layer) for layer in layers]
    if any(b <= a for a, b in zip(index, index[1:])):
        raise UserError(f"The layers of a CoIBA range must be distinct and in the network's order "
                        f"({', '.join(layers)}).")
    first = layers[0]
    extra = _extra_tokens(network.layout(first))
    for layer in layers[1:]:
        other = _extra_tokens(network.layout(layer))
        if other != extra:
            raise UserError(
                f"{layer} cannot share {first}'s mask: it has {other} token(s) off the patch grid (a class token) "
                f"and {first} has {extra}; start the range at a layer with the same tokens.")


def _extra_tokens(layout: FeatureLayout) -> int:
    return layout.extra_tokens if layout.form == "nlc" else 0


def default_range(network, first: str | None = None) -> tuple[str, str]:
    """(first, last): from `first` (default: the network's default layer) to the last layer on the grid before
    the head — the last transformer block for a ViT, the last stage with a grid larger than 1 × 1 for a CNN (not a
    registered network's classifier convolution, `HEAD_STAGES`) — among the layers that can share the first's
    mask."""
    spec = network.spec
    first = spec.check_layer(first) if first is not None else spec.default_layer
    table = {info.name: info for info in network.layer_table()}
    later = list(spec.layers[spec.layers.index(first):])
    extra = _extra_tokens(network.layout(first))
    blocks = set(network.blocks())

    def fits(layer: str) -> bool:
        info = table.get(layer)
        on_grid = info is None or info.kind == "tokens" or max(info.shape[-2:]) > 1
        return on_grid and layer not in HEAD_STAGES and _extra_tokens(network.layout(layer)) == extra

    candidates = [layer for layer in later if fits(layer)]
    if first in blocks:
        candidates = [layer for layer in candidates if layer in blocks] or candidates
    return first, (candidates[-1] if candidates else first)


def placement_of(network, placement: str) -> tuple[str, str]:
    """(the placement that runs, a note for the person, "" when there is none) for a setting of `PLACEMENTS`.

    "branch" needs transformer blocks: a CNN has no attention branch and its skip paths carry every location to
    the pooling, so the request is refused in one sentence. On a transformer without a class token (an average-
    pooled model) every patch's clean residual stream reaches the pooling around the bottlenecks: allowed, with
    that said. "auto" picks "branch" only where the authors' setting holds (blocks and a class token)."""
    if placement not in PLACEMENTS:
        raise UserError(f"Unknown CoIBA placement {str(placement)[:40]!r}; choose one of: {', '.join(PLACEMENTS)}.")
    blocks = network.blocks()
    class_token = bool(blocks) and _extra_tokens(network.layout(blocks[0])) > 0
    if placement == "auto":
        return ("branch", "") if class_token else ("output", CNN_NOTE if not blocks else AVERAGE_POOLED_NOTE)
    if placement == "branch" and not blocks:
        raise UserError(f"{network.spec.title} has no transformer blocks, so CoIBA cannot sit at their attention "
                        "branches: a CNN's skip paths carry every location past any branch. Use the placement "
                        "'output' (whole layer outputs).")
    if placement == "branch" and not class_token:
        return "branch", ("This transformer has no class token: every patch's clean residual stream reaches the "
                          "pooling around the bottlenecks at the attention branches, so the map may miss what "
                          "passes there.")
    return placement, ""


#: What "auto" says on a transformer without a class token (it places CoIBA on the block outputs there).
AVERAGE_POOLED_NOTE = ("This transformer has no class token, so CoIBA sits on the block outputs (the residual "
                       "stream): at the attention branches, every patch's clean stream would reach the pooling "
                       "around the bottlenecks.")


#: The input of a transformer block's attention branch, by the names the libraries give the block's first
#: normalisation: timm's `norm1` (the authors' `op=norm1`), transformers' `layernorm_before` (ViT, DeiT),
#: OpenAI CLIP's `ln_1`, transformers' CLIP `layer_norm1`.
BRANCH_NAMES = ("norm1", "layernorm_before", "ln_1", "layer_norm1")


def block_of(layer: str) -> str:
    """The block a branch input belongs to ("blocks.4.norm1" → "blocks.4"); any other layer name as it is. A range
    recorded with the branch placement names its blocks this way in a link (the page's range picker names blocks)."""
    parent, _, child = str(layer).rpartition(".")
    return parent if parent and child in BRANCH_NAMES else str(layer)


def branch_input(network, block: str) -> str:
    """The layer at the input of transformer block `block`'s attention branch, named "BLOCK.CHILD" (a direct child
    of the block named in `BRANCH_NAMES`, a normalisation); a UserError naming the block where it has none."""
    children = dict(network.hook_module(block).named_children())
    for name in BRANCH_NAMES:
        if name in children and "norm" in type(children[name]).__name__.lower():
            return f"{block}.{name}"
    raise UserError(f"Block {block} of {network.spec.title} has no normalisation at the input of its attention "
                    f"branch ({', '.join(BRANCH_NAMES)}), so CoIBA cannot sit there; use the placement 'output'.")


def branch_range(network, first: str | None = None, last: str | None = None) -> tuple[object, list[str]]:
    """(the network with its blocks' branch inputs among its layers, the branch inputs of the blocks from `first`
    to `last`): block names; None: the authors' range scaled to this depth, `BRANCH_FIRST_DEPTH` of the way to the
    last block. The returned network is a view of `network` (the same model and memo) whose spec lists each
    branch input right before its block, with the block's shape and token layout (a normalisation keeps both)."""
    from dataclasses import replace

    from .networks.spec import LayerInfo

    blocks = network.blocks()
    if not blocks:
        placement_of(network, "branch")  # the refusal's sentence
    if first is None:
        first = blocks[min(round(BRANCH_FIRST_DEPTH * len(blocks)), len(blocks) - 1)]
    last = blocks[-1] if last is None else last
    # a layer inside a block (a front end's layer choice, e.g. torchvision's `…encoder_layer_5.ln_1`) names its block
    first, last = (next((b for b in blocks if name.startswith(b + ".")), name) for name in (first, last))
    for name in (first, last):
        if name not in blocks:
            shown = ", ".join(blocks[:3]) + (f" … {blocks[-1]}" if len(blocks) > 3 else "")
            raise UserError(f"{str(name)[:80]!r} is not a transformer block of {network.spec.title}; with the "
                            f"placement 'branch' the range names blocks ({shown}).")
    i, j = blocks.index(first), blocks.index(last)
    if j < i:
        raise UserError(f"The layer range runs backwards: {first} comes after {last} in {network.spec.title}; give "
                        f"the range as {last} … {first}.")
    inputs = {block: branch_input(network, block) for block in blocks}
    spec = network.spec
    if all(name in spec.layers for name in inputs.values()):
        return network, [inputs[block] for block in blocks[i : j + 1]]
    layers, table = [], []
    for layer in spec.layers:
        if layer in inputs:
            layers.append(inputs[layer])
        layers.append(layer)
    for info in network.layer_table():
        if info.name in inputs:
            table.append(LayerInfo(inputs[info.name], info.shape, 1, info.layout))
        table.append(info)
    paths = {inputs[b]: spec.hook_modules.get(b, b) + inputs[b][len(b):] for b in blocks}  # the modules' own paths
    # no stage list in the view: its cuts are at the blocks, not at their branch inputs (torch.fx or hooks run it)
    view = replace(network, spec=replace(spec, layers=tuple(layers), layer_info=tuple(table), stages=None,
                                         hook_modules={**spec.hook_modules, **paths}))
    return view, [inputs[block] for block in blocks[i : j + 1]]


def resize_mask(lam: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """λ (N, 1 or C, h, w) on another grid: the area average of the cells each new cell covers where the grid
    shrinks (a coarse location keeps the mean damping of what it summarises), bilinear where it grows. Both are
    averages, so the resized λ and the resized 1 − λ still sum to 1."""
    size = (int(size[0]), int(size[1]))
    if tuple(lam.shape[-2:]) == size:
        return lam
    if size[0] <= lam.shape[-2] and size[1] <= lam.shape[-1]:
        return F.adaptive_avg_pool2d(lam, size)
    return F.interpolate(lam, size=size, mode="bilinear", align_corners=False)


# ---- how the network runs -------------------------------------------------------------------------------


class _SegmentsRunner:
    """The stages path: the prefix once; per pass the rest in segments cut at the later layers, with the pass's
    noise (`noise`, set by the fit for a pass with the bottleneck) injected between them."""

    def __init__(self, prefix: nn.Module, segments: list[nn.Module], later: list[str]):
        self.prefix, self.segments, self.later = prefix, segments, later
        self.modules = (prefix, *segments)
        self.noise: "_LaterNoise | None" = None

    def features(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.prefix(x)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        h = self.segments[0](fast_format(z))
        for layer, segment in zip(self.later, self.segments[1:]):
            if self.noise is not None:
                h = self.noise(layer, h)
            h = segment(h)
        return h

    def close(self) -> None:
        self.noise = None


class _HookedRunner:
    """The fx or hook path: the first layer's runner as the Per-Sample Bottleneck has it; the later layers' noise
    by forward hooks on their modules, registered for one pass and removed after it (also on errors)."""

    def __init__(self, base, later: dict[str, nn.Module]):
        self.base, self.later = base, later
        self.modules = base.modules
        self.noise: "_LaterNoise | None" = None
        #: the hook path replays the whole network: `features` first, as the Per-Sample Bottleneck's (`HookRunner`)
        self.replays_input = getattr(base, "replays_input", False)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.base.features(x)

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        if self.noise is None:
            return self.base.logits(z)
        noise = self.noise
        with ExitStack() as stack:
            for layer, module in self.later.items():
                stack.enter_context(replaced_output(module, lambda out, layer=layer: noise(layer, out)))
            return self.base.logits(z)

    def close(self) -> None:
        self.noise = None
        self.base.close()


def _fires_once(run, modules: dict[str, nn.Module]) -> bool:
    """Whether each module's forward hook fires exactly once while `run()` runs (hooks removed afterwards)."""
    counts = dict.fromkeys(modules, 0)
    with ExitStack() as stack:
        for layer, module in modules.items():
            def count(_m, _inp, _out, layer=layer) -> None:
                counts[layer] += 1
            stack.callback(module.register_forward_hook(count).remove)
        with torch.no_grad():
            run()
    return all(c == 1 for c in counts.values())


# ---- the fit ---------------------------------------------------------------------------------------------


class _LaterNoise:
    """Z_l for the later layers during one pass: λ_l from the pass's first-layer λ (resized to the layer's
    grid), ε_l from each image's own generator (after the first layer's draws, layer by layer, so every image
    draws what it would draw alone). Counts how often each layer ran."""

    def __init__(self, fit: "_CoIBAFit", lams: list[tuple[torch.Tensor, torch.Tensor]]):
        self.fit, self.lams = fit, lams
        self.counts = dict.fromkeys(fit.later, 0)

    def __call__(self, layer: str, out: torch.Tensor) -> torch.Tensor:
        fit = self.fit
        self.counts[layer] += 1
        layout, mean, std, shape = fit.later[layer]
        if tuple(out.shape[1:]) != shape:
            raise UserError(f"Statistics for {layer} are for a layer shaped {shape}, but the layer's output is "
                            f"{tuple(out.shape[1:])}.")
        grid, extra = layout.to_map(out.float())
        parts = [grid] if extra is None else [grid, extra]
        batch = fit.settings.batch
        noisy = []
        for p, (lam, one_minus), mean_p, std_p in zip(parts, fit.later_lambdas(self.lams, layer), mean, std):
            rows = [inject_noise(p[i * batch:(i + 1) * batch], lam[i:i + 1], one_minus[i:i + 1], mean_p, std_p,
                                 batch, g) for i, g in enumerate(fit.generators)]
            noisy.append(rows[0] if len(rows) == 1 else torch.cat(rows))
        return layout.from_map(noisy[0], noisy[1] if len(noisy) > 1 else None).to(out.dtype)

    def check(self) -> None:
        wrong = {layer: c for layer, c in self.counts.items() if c != 1}
        if wrong:
            raise RuntimeError(f"CoIBA's later layers must run once per pass; they ran {wrong} times.")


class _CoIBAFit(_BatchFit):
    """The Per-Sample Bottleneck's batched fit (`per_sample._BatchFit`) with CoIBA's mask (one λ per location
    unless mask="element") and noise at every later layer of the range; the KL stays the first layer's."""

    def __init__(self, bottleneck: "CoIBABottleneck", runner, x: torch.Tensor):
        super().__init__(bottleneck, runner, x)
        min_std = self.settings.min_std
        #: layer → (layout, μ parts, σ parts (floored), the statistics' shape), map view as `_parts` has it
        self.later: dict[str, tuple] = {}
        for layer, (layout, stats) in bottleneck.later.items():
            mean = stats.mean.to(self.device, torch.float32)[None]
            std = stats.std.to(self.device, torch.float32).clamp_min(min_std)[None]
            mean_parts = [p for p in layout.to_map(mean) if p is not None]
            std_parts = [p for p in layout.to_map(std) if p is not None]
            self.later[layer] = (layout, mean_parts, std_parts, tuple(stats.mean.shape))

    def start_optimiser(self) -> None:
        super().start_optimiser()
        s = self.settings
        if s.mask == "location":  # one α per location (and per token off the grid), shared by the channels
            self.alphas = [torch.full((r_p.shape[0], 1, *r_p.shape[2:]), s.init_alpha, device=self.device,
                                      requires_grad=True) for r_p in self.r]
            self.optimiser = torch.optim.Adam(self.alphas, lr=s.lr)

    def later_lambdas(self, lams: list[tuple[torch.Tensor, torch.Tensor]], layer: str
                      ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(λ_l, 1 − λ_l) per map-view part of a later layer: the grid's resized to its grid, the tokens off the
        grid as they are."""
        mean_parts = self.later[layer][1]
        size = tuple(mean_parts[0].shape[-2:])
        (lam, one_minus), rest = lams[0], lams[1:]
        return [(resize_mask(lam, size), resize_mask(one_minus, size)), *rest]

    def logits(self, z: list[torch.Tensor], lams: list[tuple[torch.Tensor, torch.Tensor]] | None = None
               ) -> torch.Tensor:
        if lams is None or not self.later:
            return super().logits(z)
        noise = _LaterNoise(self, lams)
        self.runner.noise = noise
        try:
            out = super().logits(z)
        finally:
            self.runner.noise = None
        noise.check()
        return out


class CoIBABottleneck(PerSampleBottleneck):
    """CoIBA attribution: one mask for a range of layers. One call: `attribute(x, target)`; results are the
    Per-Sample Bottleneck's `AttributionResult` (heatmap and bits of the FIRST layer, λ on its grid).

    Example:
        >>> network = load_network("efficientnet_lite0")
        >>> layers = layer_range(network, *default_range(network))
        >>> coiba = CoIBABottleneck.for_network(network, layers, stats_for_layers(network, layers))
        >>> result = coiba.attribute(network.preprocess(image), target=285)
    """

    _fit_class = _CoIBAFit
    layers: tuple[str, ...] = ()
    later: dict[str, tuple[FeatureLayout, FeatureStats]] = {}

    def __init__(self, *args, **kwargs):
        raise TypeError("Build a CoIBABottleneck with CoIBABottleneck.for_network(network, layers, stats).")

    @classmethod
    def from_split(cls, *args, **kwargs):
        raise TypeError("Build a CoIBABottleneck with CoIBABottleneck.for_network(network, layers, stats).")

    @classmethod
    def for_network(cls, network, layers: Sequence[str], stats: dict[str, FeatureStats],
                    settings: CoIBASettings | None = None) -> "CoIBABottleneck":
        """For an `iba_core.networks.Network` and the layers of a range (`layer_range`), with every layer's
        statistics. `path` says how it runs ("stages", "fx", "hook"; see the module docstring)."""
        layers = list(layers)
        check_shared(network, layers)
        missing = [layer for layer in layers if layer not in stats]
        if missing:
            raise UserError(f"No feature statistics for {', '.join(missing)}.")
        if settings is None:
            settings = CoIBASettings()
        elif not isinstance(settings, CoIBASettings):  # the Per-Sample Bottleneck's settings, taken as they are
            names = {f.name for f in fields(BottleneckSettings)}
            settings = CoIBASettings(**{k: v for k, v in asdict(settings).items() if k in names})
        first, later = layers[0], layers[1:]
        if settings.mask == "element":
            shape = tuple(stats[first].mean.shape)
            other = [layer for layer in later if tuple(stats[layer].mean.shape) != shape]
            if other:
                raise UserError(f"One λ per unit needs every layer of the range shaped like {first} {shape}; "
                                f"{', '.join(other)} differ: use the mask per location.")
        self = cls.__new__(cls)
        self._setup(stats[first], settings, network.layout(first), "", network.spec.head)
        self.layers = tuple(layers)
        self.later = {layer: (network.layout(layer), stats[layer]) for layer in later}
        self.path = network.split_path(first)
        if self.path == "stages":
            prefix, segments = _stage_segments(network, layers)
            self._make_runner = lambda: _SegmentsRunner(prefix, segments, later)
        elif self.path == "fx":
            prefix, suffix = network.fx_split(first)
            channels_last = self.layout.kind == "map"
            modules = _fx_later_modules(network, prefix, suffix, later)
            if modules is None:  # the cut traced through a later layer: the whole network on the hook path
                self.path = "hook"
            else:
                self._make_runner = lambda: _HookedRunner(SplitRunner(prefix, suffix, channels_last), modules)
        if self.path == "hook":
            first_module = network.hook_module(first)
            modules = {layer: network.hook_module(layer) for layer in later}
            self._make_runner = lambda: _HookedRunner(HookRunner(network.model, first_module), modules)
        cache = cache_of(network)
        key = "coiba:" + ",".join(layers)
        if cache is not None:
            self._memo, self._memo_key = cache.precision, (network.key, network.weights_id, key)
        else:
            self._memo_key = module_key(key, network.model)
        return self


def _stage_segments(network, layers: list[str]) -> tuple[nn.Module, list[nn.Module]]:
    """(prefix up to the first layer, [suffix segments from each layer of the range to the next, the last to
    the logits]), BatchNorms folded; built once per range and kept with the network."""
    if len(layers) == 1:
        prefix, suffix = network.fast_split(layers[0])
        return prefix, [suffix]

    def make() -> tuple[nn.Module, list[nn.Module]]:
        from .fast import fold_batchnorms

        stages = network.stages()
        names = [name for name, _ in stages]
        cuts = [names.index(layer) for layer in layers] + [len(stages) - 1]
        prefix = nn.Sequential(*(m for _, m in stages[: cuts[0] + 1]))
        segments = [nn.Sequential(*(m for _, m in stages[a + 1 : b + 1])) for a, b in zip(cuts, cuts[1:])]
        return fold_batchnorms(prefix), [fold_batchnorms(s) for s in segments]

    return network.memo.splits.get_or_make(("coiba", tuple(layers)), make)


def _fx_later_modules(network, prefix: nn.Module, suffix: nn.Module, later: list[str]
                      ) -> dict[str, nn.Module] | None:
    """The later layers' modules inside an fx suffix, where each one's hook fires exactly once in a pass through
    the cut; None where the trace went through one of them (it is no module of the suffix, or runs otherwise)."""
    try:
        modules = {layer: suffix.get_submodule(network.spec.hook_modules.get(layer, layer)) for layer in later}
    except AttributeError:
        return None
    spec = network.spec
    x = torch.zeros(1, spec.channels, spec.crop, spec.crop, device=network.device)
    with frozen_eval(prefix, suffix):
        return modules if _fires_once(lambda: suffix(prefix(x)), modules) else None
