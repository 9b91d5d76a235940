"""The Per-Sample Bottleneck (paper §3.2): fit λ for one image, read off bits per pixel.

Two ways to run the network, with identical results for the same seed:
- split path: the prefix runs once; each step runs only the suffix, without parameter gradients. The
  registered networks are cut from their stage lists ("stages"), any other network where `torch.fx` can
  cut it at the layer ("fx", `networks/fx_split.py`);
- hook path (any nn.Module): a forward hook replaces the layer's output by Z; the whole network runs.
`AttributionResult.path` says which ran.

Vision transformers: a layer's tokens on a patch grid (ViT (N, 1 + h·w, C), Swin (N, h, w, C)) are viewed
as a (N, C, h, w) map (`networks/tokens.py`), so the noise, λ, the σ_s blur over the h×w grid and the bits
per pixel are exactly those of a CNN layer; Z is put back into the layer's layout for the rest of the
network. The class token (and any other token off the grid) gets a bottleneck too, with its own λ per
channel and no blur: after the first block it mixes all patches, so letting it through unrestricted would
leak everything the bottleneck holds back. Its bits count in the loss and in `total_bits`, but it has no
place on the image: the heatmap leaves them out and `AttributionResult.unlocated_bits` reports them
(heatmap.sum() == total_bits − unlocated_bits).

Fidelity to the authors' code (docs/science/fidelity.md): the mask smoothing is theirs (5 × 5 at
σ_s = 1, reflection padding; `bottleneck.blur`). The heatmap reads the final λ, after the last Adam update
(the authors read the last step's forward pass: `read_point="last_step"`); on the offline network the final
λ gave −0.4 to +20.8 % total bits over five photos (chelsea +9.0, coffee +11.0, astronaut +1.1, rocket +20.8,
motorcycle −0.4 %; mean of seeds 0–3, `scripts/fidelity_effects.py`), so totals compare only at one read
point. Inactive units are not masked unless `inactive_threshold` is set (the authors: 0.01; no effect at the
default layer). The steps' maps (`StepInfo`: live view, replay, GIF) are read
at the same point, so the last step's map is the heatmap and its bits are `total_bits`; a step's losses and
p(target) are those of its forward pass.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from .bottleneck import (  # the settings live beside the math; imported here too, where callers look
    BottleneckSettings,
    check_sigma,
    information_map_bits,
    inject_noise,
    kl_per_element,
    lambda_from_alpha,
    nats_to_bits,
    resize_preserving_total,
    standardise,
)
from .errors import UserError
from .heads import check_head, probabilities, target_nll
from .model_state import frozen_eval
from .networks.tokens import MAP, FeatureLayout, infer_layout
from .precision import autocast
from .precision import resolve as resolve_precision
from .precision import would_measure as would_measure_precision
from .feature_stats import FeatureStats, standard_normal_stats
from .network_cache import Recent, cache_of
from .runners import HookRunner, SplitRunner, fast_format, module_key
from .results import (  # result types live low (results.py); imported here too, where callers look for them
    LOST_CLASS_MESSAGE,
    LOW_P_TARGET,
    AttributionResult,
    StepCallback,
    StepInfo,
    bottleneck_lost_class,
    target_note,
)

__all__ = [  # the names callers take from here; the result types and settings are defined lower (results, bottleneck)
    "PerSampleBottleneck", "layer_shape", "BottleneckSettings", "AttributionResult", "StepInfo", "StepCallback",
    "target_note", "bottleneck_lost_class", "LOST_CLASS_MESSAGE", "LOW_P_TARGET",
]


@dataclass
class _StepRecord:
    """One step of a (batched) run as tensors on the network's device; `step_infos` reads them back."""

    step: int
    lambda_mean: torch.Tensor  # (N, h, w) at the read point
    feature_bits: torch.Tensor  # (N, h, w) bits per feature-map cell at the read point
    unlocated: torch.Tensor  # (N,) bits at the read point without a place on the image
    ce: torch.Tensor  # (N,)
    info: torch.Tensor  # (N,) nats
    p_target: torch.Tensor  # (N,)

    def step_infos(self, steps: int, beta: float, size: tuple[int, int]) -> list[StepInfo]:
        """One StepInfo per image (one transfer to the CPU for all of them)."""
        heatmaps = resize_preserving_total(self.feature_bits, size).cpu().numpy()
        lam, unlocated, ce, info, p = (t.float().cpu().numpy() for t in (
            self.lambda_mean, self.unlocated, self.ce, self.info, self.p_target))
        return [StepInfo(step=self.step, steps=steps, lambda_mean=lam[i], bits_per_pixel=heatmaps[i],
                         ce=float(ce[i]), info=float(info[i]), beta_info=float(beta * info[i]),
                         p_target=float(p[i]), image=i, unlocated_bits=float(unlocated[i]))
                for i in range(len(ce))]


def layer_shape(network, layer: str) -> tuple[int, ...]:
    """The shape of `layer`'s output for one image at the network's crop (no batch axis), from its layer table."""
    layer = network.spec.check_layer(layer)
    for info in network.layer_table():
        if info.name == layer:
            return tuple(info.shape[1:])
    raise UserError(f"{layer} is not in the layer table of {network.spec.title}.")


class PerSampleBottleneck:
    """Per-Sample Bottleneck attribution. One call: `attribute(x, target)`.

    Example:
        >>> network = load_network("efficientnet_lite0")
        >>> stats = get_stats(network, "block3_2")
        >>> iba = PerSampleBottleneck.for_network(network, "block3_2", stats)
        >>> result = iba.attribute(network.preprocess(image), target=285)
        >>> result.heatmap.shape, result.total_bits
    """

    def __init__(
        self,
        model: nn.Module,
        layer: str | nn.Module,
        stats: FeatureStats,
        settings: BottleneckSettings | None = None,
        layout: FeatureLayout | None = None,
        head: str = "softmax",
    ):
        """Generic hook path: `layer` is a module of `model` or its dotted name.

        layout: how the layer's output is arranged (`networks.tokens`); None: guessed from the statistics'
        shape (`tokens.infer_layout`: a token sequence for (L, C) on a grid, else a CNN map; give a Swin
        grid's layout). `for_network` takes it from the network's spec.
        head: what the outputs mean (`heads.HEADS`): the loss's prediction term and p(target) follow it;
        `for_network` takes it from the network's spec.
        """
        module = model.get_submodule(layer) if isinstance(layer, str) else layer
        self._setup(stats, settings, layout, "hook", head)
        self._make_runner = lambda: HookRunner(model, module)
        self._memo_key = module_key("hook", model)

    def _setup(self, stats: FeatureStats, settings: BottleneckSettings | None, layout: FeatureLayout | None,
               path: str, head: str = "softmax") -> None:
        self.settings = (settings or BottleneckSettings()).validate()
        if self.settings.prior == "standard_normal":  # M2IB's prior: the statistics' shape is all that counts
            stats = standard_normal_stats(stats.mean.shape, stats.layer, stats.model, stats.weights)
        self.stats = stats
        self.layout = layout or infer_layout(tuple(stats.mean.shape))
        self.path = path
        self.head = check_head(head)
        check_sigma(self.settings.sigma, self._map_size())  # before any computation

    def _map_size(self) -> tuple[int, int] | None:
        """(h, w) of the layer's map view, from the statistics; None where they do not fit the layout
        (statistics of another layer: `attribute_batch` says so)."""
        if self.stats.mean.dim() < 2:
            return None
        try:
            return tuple(self.layout.to_map_stats(self.stats.mean)[0].shape[-2:])
        except (RuntimeError, ValueError):
            return None

    @classmethod
    def for_network(
        cls, network, layer: str, stats: FeatureStats | None, settings: BottleneckSettings | None = None
    ) -> "PerSampleBottleneck":
        """For an `iba_core.networks.Network`: the split path where the network can be cut at `layer`
        (registered stage lists; else a `torch.fx` cut), else the hook path on the layer's module.
        `path` says which ("stages", "fx", "hook"). `stats` may be None with the standard-normal prior."""
        if stats is None:
            if settings is None or settings.prior != "standard_normal":
                raise UserError("The Per-Sample Bottleneck needs the layer's feature statistics.")
            stats = standard_normal_stats(layer_shape(network, layer), layer, network.key, network.weights_id)
        layout = network.layout(layer)
        path = network.split_path(layer)
        head = network.spec.head
        if path == "stages":
            self = cls.from_split(*network.fast_split(layer), stats, settings, layout, head)
        elif path == "fx":
            self = cls.from_split(*network.fx_split(layer), stats, settings, layout, head)
        else:
            self = cls(network.model, network.hook_module(layer), stats, settings, layout, head)
        self.path = path
        # "auto" precision is measured once per network, layer and machine, and remembered with the network
        cache = cache_of(network)
        if cache is not None:
            self._memo, self._memo_key = cache.precision, (network.key, network.weights_id, layer)
        return self

    @classmethod
    def from_split(
        cls, prefix: nn.Module, suffix: nn.Module, stats: FeatureStats, settings: BottleneckSettings | None = None,
        layout: FeatureLayout | None = None, head: str = "softmax",
    ) -> "PerSampleBottleneck":
        """Fast split path for any network given as prefix (input → layer) and suffix (layer → logits)."""
        self = cls.__new__(cls)
        self._setup(stats, settings, layout, "split", head)
        channels_last = self.layout.kind == "map"
        self._make_runner = lambda: SplitRunner(prefix, suffix, channels_last)
        self._memo_key = module_key("split", suffix)
        return self

    #: Where an "auto" precision choice is kept in memory: the network's cache (`for_network`), else nowhere —
    #: a bottleneck built without a Network keeps it on disk only (`module_key`), like every choice.
    _memo: Recent | None = None
    #: The class that runs one batched fit (`_BatchFit`); a bottleneck family that fits λ the same way with
    #: another mask or noise (CoIBA, `coiba.py`) names its subclass here.
    _fit_class: type["_BatchFit"]
    layout: FeatureLayout = MAP
    path: str = ""
    head: str = "softmax"

    def _raw_format(self, z: torch.Tensor) -> torch.Tensor:
        """A layer output in the memory format its suffix runs fastest with (channels-last for CNN maps)."""
        return fast_format(z) if self.layout.kind == "map" else z

    def precision_for(self, x: torch.Tensor) -> str:
        """The concrete precision a run on x would use (measures once if the setting is "auto")."""
        runner = self._make_runner()
        with frozen_eval(*runner.modules):
            try:
                device = next((p.device for m in runner.modules for p in m.parameters()), x.device)
                return self.resolved_precision(runner, x.to(device), device)
            finally:
                runner.close()

    def resolved_precision(self, runner, x: torch.Tensor, device: torch.device) -> str:
        """The precision the network passes run in: the setting, or for "auto" the measured faster one — measured
        on one image's noisy copies, whatever the number of images the run holds (one decision for both)."""
        copies = self.settings.batch

        def workload(precision: str):
            z = self.stats.mean.to(device)[None].expand(copies, *self.stats.mean.shape)
            z = self._raw_format(z + 0.1 * torch.randn_like(z)).requires_grad_(True)

            def run() -> None:
                with autocast(precision, device):
                    out = runner.logits(z.clone())  # clone: the suffix may start with an in-place ReLU
                out.float().sum().backward()
                z.grad = None

            return run

        if self.settings.precision == "auto" and getattr(runner, "replays_input", False):
            with torch.no_grad():
                runner.features(x)  # the hook path replays the whole network on the image
        return resolve_precision(self.settings.precision, device, workload, memo=self._memo,
                                 key=self._precision_key(device), persist=True)

    def _precision_key(self, device: torch.device) -> tuple:
        """What an "auto" choice is remembered under: the network and layer, the layer's shape, the noisy copies
        per image, the device (the disk memo adds the machine). Not the number of images: one image and a
        folder's batch of them get the same choice, so their bits agree (`attribute IMG` and `attribute FOLDER`)."""
        return (*self._memo_key, tuple(self.stats.mean.shape), self.settings.batch, str(device))

    def measures_precision(self) -> bool:
        """Whether a run would first measure the precision ("auto" on hardware with a lower precision, no choice
        remembered yet for this network, layer and noisy copies per image; the number of images does not
        matter); call it where the run will run (the app: inside the network's turn, whose thread count the disk
        memo's key names)."""
        runner = self._make_runner()
        try:
            device = next((p.device for m in runner.modules for p in m.parameters()), torch.device("cpu"))
        finally:
            runner.close()
        return would_measure_precision(self.settings.precision, device, memo=self._memo,
                                       key=self._precision_key(device), persist=True)

    def _active_mask(self, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor] | None:
        """Per part of the map view: 1 for units that count, 0 for inactive ones (settings.inactive_threshold);
        None: no masking."""
        threshold = self.settings.inactive_threshold
        if threshold is None:
            return None
        if self.stats.active is None:
            raise UserError(
                "These feature statistics do not record which units are active, so inactive units cannot be "
                "masked.",
                cli_hint="Estimate them again with `python -m iba_core stats --refresh`.",
                app_hint="Estimate them again: change the image folder or the number of samples under "
                "Feature statistics.",
            )
        return self._parts((self.stats.active.to(device, dtype) > threshold).to(dtype)[None])

    def _parts(self, raw: torch.Tensor) -> list[torch.Tensor]:
        """The map view of a layer output (or of statistics with a leading 1): [grid (N, C, h, w)], plus
        [unlocated tokens (N, C, E, 1)] where the layer has some. The grid is channels-last (the blur and
        noise work on any layout; CNN suffixes want channels-last)."""
        grid, extra = self.layout.to_map(raw)
        grid = fast_format(grid)
        return [grid] if extra is None else [grid, extra.contiguous()]

    def _raw(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The layer's own layout from the map-view parts (the inverse of `_parts`)."""
        return self.layout.from_map(parts[0], parts[1] if len(parts) > 1 else None)

    def attribute(
        self,
        x: torch.Tensor,
        target: int | None = None,
        callback: StepCallback | None = None,
    ) -> AttributionResult:
        """Fit the bottleneck for one preprocessed image (1, 3, H, W) and return its heatmap.

        target: class index; None explains the network's top-1 prediction.
        callback: called after every step with a StepInfo (for live views and progress bars).
        """
        if x.dim() == 3:
            x = x[None]
        if x.dim() != 4 or x.shape[0] != 1:
            raise ValueError(f"Expected one image shaped (1, 3, H, W), got {tuple(x.shape)}.")
        return self.attribute_batch(x, None if target is None else [target], callback)[0]

    def attribute_batch(
        self,
        x: torch.Tensor,
        targets: Sequence[int | None] | None = None,
        callback: StepCallback | None = None,
    ) -> list[AttributionResult]:
        """Fit one bottleneck per image for N images at once: N × B noisy copies per step, one α per image.

        Each image's loss depends only on its own α, and Adam works element by element, so every image
        gets the heatmap it would get alone with the same seed (up to float rounding of the larger
        batches): its own noise generator, seeded like a single run. callback(StepInfo) is called for
        each image after every step (StepInfo.image says which).
        """
        start = time.perf_counter()
        if x.dim() != 4 or x.shape[0] < 1:
            raise ValueError(f"Expected images shaped (N, 3, H, W), got {tuple(x.shape)}.")
        targets = [None] * x.shape[0] if targets is None else list(targets)
        if len(targets) != x.shape[0]:
            raise ValueError(f"{x.shape[0]} images but {len(targets)} targets.")
        runner = self._make_runner()
        with ExitStack() as stack:
            stack.enter_context(frozen_eval(*runner.modules))
            stack.callback(runner.close)
            fit = self._fit_class(self, runner, x)
            fit.choose_targets(targets)
            fit.start_optimiser()
            for step in range(1, self.settings.steps + 1):
                fit.step(step, callback)
            return fit.results(start)


class _BatchFit:
    """One batched run of the Per-Sample Bottleneck, in the order it happens: the layer's output R in the map
    view (`__init__`), the targets and p(target) without the bottleneck (`choose_targets`), α, the noise
    generators and Adam (`start_optimiser`), the optimisation steps (`step`), the results (`results`).

    The map view: `r[0]` is the grid (N, C, h, w) (the CNN map itself), `r[1]` the tokens off the grid (a ViT's
    class token) where there are any. R, μ, σ, α and so Z share one memory layout: channels-last, which the
    suffix convolutions want. λ, the KL, Adam and the heatmap are fp32; only the network passes use
    `precision`.
    """

    def __init__(self, bottleneck: "PerSampleBottleneck", runner, x: torch.Tensor):
        self.bottleneck, self.runner, self.settings = bottleneck, runner, bottleneck.settings
        self.device = next((p.device for m in runner.modules for p in m.parameters()), x.device)
        self.x = x.to(self.device)
        self.n_images, self.size = x.shape[0], tuple(x.shape[-2:])
        self.precision = self._choose_precision()
        raw = self._layer_output()
        self._map_view(raw)
        self.k = raw[0].numel()  # all elements with a bottleneck, the class token's included
        self.beta = self.settings.beta_k / self.k
        self.feature_shape = tuple(self.r[0].shape[1:])
        self.history: list[list[StepInfo]] = [[] for _ in range(self.n_images)]
        self.pending: list[_StepRecord] = []  # steps not yet read back to the CPU (no callback)
        self.last_step: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def _choose_precision(self) -> str:
        try:
            return self.bottleneck.resolved_precision(self.runner, self.x, self.device)
        except RuntimeError:
            # "auto"'s timing pass feeds the statistics' shape to the suffix; statistics of another layer
            # fail there with a kernel error. Run in fp32: the shape check then says what is wrong.
            return "fp32"

    def network_pass(self):
        """The precision of a network pass (λ, KL, Adam stay fp32)."""
        return autocast(self.precision, self.device)

    def _layer_output(self) -> torch.Tensor:
        """R for the images, in fp32; a UserError when the statistics are for a layer of another shape.

        The prefix runs in fp32 whatever the precision: it runs once per image (the steps' passes are the cost),
        and R and p(target) without the bottleneck are then the unmodified network's own (a bf16 prefix moved
        a sigmoid card's p_without from 0.35612 to 0.35488, measured on an AVX512-BF16 Xeon)."""
        stats = self.stats = self.bottleneck.stats
        raw = self.runner.features(self.x).float()
        if self.settings.prior == "standard_normal" and raw.shape[1:] != stats.mean.shape:
            # a prior has no shape of its own: this fit's follows the layer's output for this input size
            self.stats = standard_normal_stats(raw.shape[1:], stats.layer, stats.model, stats.weights)
        elif raw.shape[1:] != stats.mean.shape:
            raise UserError(
                f"Statistics are for a layer shaped {tuple(stats.mean.shape)}, "
                f"but the layer's output is {tuple(raw.shape[1:])}."
            )
        return raw

    def _map_view(self, raw: torch.Tensor) -> None:
        """R, μ_R, σ_R (floored at min_std) and the standardised R in the map view; σ_s per part; the mask of
        active units."""
        b, stats, s = self.bottleneck, self.stats, self.settings
        self.r = b._parts(raw)
        self.mean = b._parts(stats.mean.to(self.device, raw.dtype)[None])
        self.std = b._parts(stats.std.to(self.device, raw.dtype).clamp_min(s.min_std)[None])
        self.r_std = [standardise(*parts) for parts in zip(self.r, self.mean, self.std)]
        self.sigmas = [s.sigma] + [0.0] * (len(self.r) - 1)  # tokens off the grid have no neighbours to blur with
        self.active = b._active_mask(raw.dtype, self.device)

    def choose_targets(self, targets: list[int | None]) -> None:
        """The class of each image (None: the network's top-1) and p(target) without the bottleneck: the
        unmodified network's, so in fp32 whatever the precision of the steps' passes."""
        with torch.no_grad():
            # clone: the suffix may start with an in-place ReLU
            logits = self.logits([p.clone() for p in self.r]).float()
            probs = probabilities(logits, self.bottleneck.head)
        top = probs.max(dim=1)
        self.predicted = [int(i) for i in top.indices]
        self.p_predicted = [float(v) for v in top.values]
        self.targets = [self.predicted[i] if t is None else int(t) for i, t in enumerate(targets)]
        self.p_without = [float(probs[i, t]) for i, t in enumerate(self.targets)]

    def start_optimiser(self) -> None:
        """One noise generator per image, seeded alike (every image draws the noise it would draw alone); α at
        its initial value; Adam; the labels of the noisy copies."""
        s = self.settings
        seed = s.seed if s.seed is not None else int(torch.seed() % (2**63))
        self.generators = []
        for _ in range(self.n_images):
            self.generators.append(torch.Generator(device=self.device))
            self.generators[-1].manual_seed(seed)
        self.alphas = [torch.full_like(r_p, s.init_alpha, requires_grad=True) for r_p in self.r]
        self.optimiser = torch.optim.Adam(self.alphas, lr=s.lr)
        self.labels = [torch.full((s.batch,), t, device=self.device, dtype=torch.long) for t in self.targets]

    def lambdas(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(λ, 1 − λ) per part of the map view, from the current α."""
        return [lambda_from_alpha(a, sigma) for a, sigma in zip(self.alphas, self.sigmas)]

    def noisy(self, lams: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """Z = λR + (1 − λ)ε per part: `batch` noisy copies of each image, image after image."""
        out = []
        for r_p, (lam, one_minus), mean_p, std_p in zip(self.r, lams, self.mean, self.std):
            parts = [inject_noise(r_p[i : i + 1], lam[i : i + 1], one_minus[i : i + 1], mean_p, std_p,
                                  self.settings.batch, g) for i, g in enumerate(self.generators)]
            out.append(parts[0] if self.n_images == 1 else torch.cat(parts))
        return out

    def logits(self, z: list[torch.Tensor], lams: list[tuple[torch.Tensor, torch.Tensor]] | None = None
               ) -> torch.Tensor:
        """The network's outputs from the layer's map-view parts z; `lams`: the pass's (λ, 1 − λ), None for the
        pass without the bottleneck (a subclass that injects noise further on reads them)."""
        return self.runner.logits(self.bottleneck._raw(z))

    def information(self, lams: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        """The KL per element (nats) per part."""
        return [kl_per_element(r_std_p, lam, one_minus) for r_std_p, (lam, one_minus) in zip(self.r_std, lams)]

    def masked(self, parts: list[torch.Tensor]) -> list[torch.Tensor]:
        """`parts` with inactive units zeroed (settings.inactive_threshold), else unchanged."""
        return parts if self.active is None else [p * m for p, m in zip(parts, self.active)]

    def step(self, step: int, callback: StepCallback | None) -> None:
        """One Adam step on L = Σ_images [CE + β·L_I], then the step's record (to the callback, or kept).

        CE is the head's prediction term (`heads.target_nll`): the cross-entropy for softmax, −log σ(z_target)
        for a sigmoid head, −log σ(±z) for a binary one."""
        s, n = self.settings, self.n_images
        self.optimiser.zero_grad(set_to_none=True)
        lams = self.lambdas()
        z, kl = self.masked(self.noisy(lams)), self.masked(self.information(lams))
        with self.network_pass():
            logits = self.logits(z, lams).float()
        per_image = logits.view(n, s.batch, -1)
        head = self.bottleneck.head
        ce = [target_nll(per_image[i], self.labels[i], head) for i in range(n)]
        info = [sum(kl_p[i].sum() for kl_p in kl) for i in range(n)]
        loss = sum(c + self.beta * inf for c, inf in zip(ce, info))
        loss.backward()
        self.optimiser.step()
        with torch.no_grad():
            if s.read_point == "final":
                # The maps where the heatmap reads them: λ after this update, so the last step shows the final
                # map. Its KL is a blur and an element-wise formula, no network pass.
                shown = self.lambdas()
                shown_kl = self.masked(self.information(shown))
            else:  # "last_step": this step's forward pass, as the authors read it
                shown, shown_kl = lams, kl
            # What the step looked like, as tensors on the device; read back to the CPU at once for a live view
            # (callback), else after the last step: one synchronisation per run, not five per image and step
            # (on a GPU those waits cost more than the step itself).
            record = _StepRecord(
                step=step,
                lambda_mean=shown[0][0].detach().mean(dim=1),
                feature_bits=nats_to_bits(shown_kl[0].detach().sum(dim=1)),
                unlocated=self._unlocated_bits(shown_kl),
                ce=torch.stack(ce).detach(),
                info=torch.stack([torch.as_tensor(v) for v in info]).detach(),
                p_target=torch.stack([probabilities(per_image[i], head)[:, self.targets[i]].mean() for i in range(n)]),
            )
            if callback is None:
                self.pending.append(record)
            else:
                for info_i in record.step_infos(s.steps, self.beta, self.size):
                    self.history[info_i.image].append(info_i)
                    callback(info_i)
        if s.read_point == "last_step":
            self.last_step = ([lam.detach() for lam, _ in lams], [kl_p.detach() for kl_p in kl])

    def _unlocated_bits(self, kl: list[torch.Tensor]) -> torch.Tensor:
        """(N,) bits of the parts without a place on the image (a ViT's class token); zeros for a CNN map."""
        total = torch.zeros(self.n_images, device=self.device)
        for kl_p in kl[1:]:
            total = total + nats_to_bits(kl_p.detach().flatten(1).sum(dim=1))
        return total

    def results(self, start: float) -> list[AttributionResult]:
        """One AttributionResult per image: the heatmap at the read point, p(target) with the final λ on a fresh
        noisy batch, the history of the steps."""
        s, n = self.settings, self.n_images
        with torch.no_grad():
            for record in self.pending:
                for info_i in record.step_infos(s.steps, self.beta, self.size):
                    self.history[info_i.image].append(info_i)
            lams = self.lambdas()
            z, kl = self.masked(self.noisy(lams)), self.masked(self.information(lams))
            lam = [lam_p for lam_p, _ in lams]
            with self.network_pass():
                logits = self.logits(z, lams).float()
                probs_with = probabilities(logits, self.bottleneck.head).view(n, s.batch, -1)
            if s.read_point == "last_step" and self.last_step is not None:
                lam, kl = self.last_step  # the authors' read point: the last forward pass, before its update
            seconds = time.perf_counter() - start
            return [self._result(i, lam, kl, probs_with, seconds) for i in range(n)]

    def _result(self, i: int, lam: list[torch.Tensor], kl: list[torch.Tensor], probs_with: torch.Tensor,
                seconds: float) -> AttributionResult:
        feature_bits = information_map_bits(kl[0][i])
        unlocated = float(sum(nats_to_bits(kl_p[i].sum()) for kl_p in kl[1:]))
        return AttributionResult(
            heatmap=resize_preserving_total(feature_bits, self.size).cpu().numpy(),
            feature_bits=feature_bits.cpu().numpy(),
            lambda_mean=lam[0][i].mean(dim=0).cpu().numpy(),
            total_bits=float(feature_bits.sum()) + unlocated,
            target=self.targets[i],
            p_without=self.p_without[i],
            p_with=float(probs_with[i, :, self.targets[i]].mean()),
            history=self.history[i],
            seconds=seconds / self.n_images,
            settings=self.settings,
            feature_shape=self.feature_shape,
            precision=self.precision,
            unlocated_bits=unlocated,
            path=self.bottleneck.path,
            predicted=self.predicted[i],
            p_predicted=self.p_predicted[i],
            head=self.bottleneck.head,
        )


PerSampleBottleneck._fit_class = _BatchFit  # defined after the bottleneck it serves
