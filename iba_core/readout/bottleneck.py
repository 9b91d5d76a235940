"""The Readout Bottleneck (paper §3.3): the readout network bound to an analysed network.

First pass (no noise): `NetworkPasses` collects the read-out layers and the logits; the readout
network predicts α, and λ = blur(σ_s, sigmoid(α)) exactly as for the Per-Sample Bottleneck
(`iba_core.bottleneck.lambda_from_alpha`). Second pass (training only): Z = λR + (1-λ)ε replaces R
and the rest of the network runs on Z. The analysed network is never trained; only the readout
network is.

- The noise ε ~ N(μ_R, σ_R²) uses *per-element* statistics of the bottleneck layer (`stats.get_stats`,
  like the Per-Sample Bottleneck); they are stored in the checkpoint too, so a checkpoint is
  self-contained.
- Inference (`heatmap`, `heatmaps`, `explain`) needs only the first pass: the information map is the
  KL between the bottleneck's and the noise's distributions, resized preserving its total.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import nn

from ..bottleneck import (
    DEFAULT_BETA_K,
    check_beta_k,
    check_sigma,
    information_map_bits,
    inject_noise,
    kl_per_element,
    lambda_from_alpha,
    resize_preserving_total,
    standardise,
)
from ..errors import UserError
from ..heads import head_of, predicted, probabilities, target_nll
from ..model_state import frozen_eval
from ..networks import LOGITS
from ..per_sample import AttributionResult, BottleneckSettings
from .config import DEFAULT_HIDDEN, ReadoutCheckpointError, ReadoutConfig, check_compatible
from .network import NetworkPasses, ReadoutNetwork, network_passes


@dataclass
class ReadoutOutput:
    """One training forward pass: the loss and its parts (scalars are batch means)."""

    loss: torch.Tensor
    ce: torch.Tensor
    info: torch.Tensor  # L_I in nats per sample
    logits: torch.Tensor  # noisy logits
    labels: torch.Tensor  # labels used (folder labels or the clean network's top-1)


class ReadoutBottleneck(nn.Module):
    """Readout network + bottleneck statistics, bound to an analysed network (`iba_core.networks.Network`).

    Build one for training with `ReadoutBottleneck.create(network)`, or load a trained one with
    `load_readout(path, network)`. Then:

        >>> rb = load_readout("assets/readout_efficientnet_lite0.pt", network)
        >>> bits = rb.heatmap(network.preprocess(image))   # (224, 224) bits per pixel, one pass

    Its state_dict holds only the readout network and the statistics; the analysed network is used,
    never owned, and stays frozen.
    """

    def __init__(self, config: ReadoutConfig):
        super().__init__()
        self.config = config
        self.readout = ReadoutNetwork(
            config.read_channels, config.feature_shape[0], config.hidden, config.init_alpha, config.alpha_max
        )
        self.register_buffer("mean", torch.zeros(config.feature_shape))
        self.register_buffer("std", torch.ones(config.feature_shape))
        self._passes: NetworkPasses | None = None
        self._network = None
        self.stats_info: dict = {}  # where the statistics came from
        self.source_path = ""  # the checkpoint file, when loaded from one
        self.training_info: dict = {}  # the checkpoint's training record (config, history, …)

    # ---- construction --------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        network,
        layer: str | None = None,
        reads: Sequence[str] | None = None,
        *,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        sigma: float = 1.0,
        beta_k: float = DEFAULT_BETA_K,
    ) -> "ReadoutBottleneck":
        """An untrained readout for `network`; its statistics still have to be set (`set_statistics`)."""
        spec = network.spec
        layer = layer or spec.readout_layer or spec.default_layer
        reads = tuple(reads) if reads else spec.reads()
        if layer not in reads:
            reads = (layer, *reads)
        if len(set(reads)) != len(reads):
            raise UserError(f"Read-out layers must be distinct, got {', '.join(reads)}.")
        check_beta_k(beta_k)  # before the probe pass; ReadoutConfig checks σ_s against the map too
        check_sigma(sigma)
        passes = network_passes(network, layer, reads)
        size = network.preprocess.crop_size
        probe = torch.zeros(1, network.preprocess.channels, size, size, device=network.device)
        with frozen_eval(*passes.modules), torch.inference_mode():
            out = passes.first_pass(probe)
        config = ReadoutConfig(
            model=network.key,
            weights_id=network.weights_id,
            layer=layer,
            reads=reads,
            feature_shape=tuple(out[layer].shape[1:]),
            read_channels=tuple(int(out[r].shape[1]) for r in reads),
            input_size=(size, size),
            hidden=tuple(int(h) for h in hidden),
            sigma=float(sigma),
            beta_k=float(beta_k),
        )
        self = cls(config).to(network.device)
        self._bind(network, passes)
        return self

    def bind(self, network) -> "ReadoutBottleneck":
        """Attach to `network` after checking it is the one this readout was made for."""
        check_compatible(self.config, network)
        self._bind(network, network_passes(network, self.config.layer, self.config.reads))
        return self.to(network.device)

    def _bind(self, network, passes: NetworkPasses) -> None:
        self._network, self._passes = network, passes

    @property
    def network(self):
        """The analysed network this readout is bound to (None until bound)."""
        return self._network

    @property
    def head(self) -> str:
        """The analysed network's head (`heads.py`): the training loss and p(target) follow it."""
        return head_of(self._network)

    @property
    def passes(self) -> NetworkPasses:
        if self._passes is None:
            raise RuntimeError("This ReadoutBottleneck is not bound to a network; call .bind(network).")
        return self._passes

    @property
    def network_modules(self) -> tuple[nn.Module, ...]:
        """The analysed network's modules in use (to freeze them during training)."""
        return (self._network.model, *self.passes.modules)

    def set_statistics(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        read_stats: Sequence[tuple[torch.Tensor, torch.Tensor]],
        info: dict | None = None,
    ) -> None:
        """Bottleneck statistics (per element) and read-out normalisation (per channel)."""
        if tuple(mean.shape) != self.config.feature_shape or tuple(std.shape) != self.config.feature_shape:
            raise ValueError(
                f"Statistics shaped {tuple(mean.shape)} do not fit the bottleneck layer "
                f"{self.config.layer} {self.config.feature_shape}."
            )
        with torch.no_grad():
            self.mean.copy_(mean)
            self.std.copy_(std)
            for i, (m, s) in enumerate(read_stats):
                self.readout.set_normalisation(i, m.to(self.mean.device), s.to(self.mean.device), self.config.min_std)
        self.stats_info = dict(info or {})

    # ---- passes --------------------------------------------------------------------------
    def _check_input(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:
            x = x[None]
        channels = getattr(getattr(self._network, "preprocess", None), "channels", 3)
        if x.dim() != 4 or x.shape[1] != channels:
            raise ValueError(f"Expected images shaped (N, {channels}, H, W), got {tuple(x.shape)}.")
        return x.to(self.mean.device)

    def first_pass(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Clean outputs of the analysed network at the bottleneck, the read-out layers and the logits."""
        out = self.passes.first_pass(x)
        r = out[self.config.layer]
        if tuple(r.shape[1:]) != self.config.feature_shape:
            raise ReadoutCheckpointError(
                f"The readout was made for {self.config.layer} feature maps shaped {self.config.feature_shape} "
                f"(inputs {self.config.input_size[0]}×{self.config.input_size[1]}), but this input gives "
                f"{tuple(r.shape[1:])}; use the network's standard preprocessing."
            )
        return out

    def alpha(self, out: dict[str, torch.Tensor]) -> torch.Tensor:
        """α from a first pass's outputs."""
        r = out[self.config.layer]
        return self.readout([out[name] for name in self.config.reads], r.shape[-2:])

    def _noise_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mean[None], self.std.clamp_min(self.config.min_std)[None]

    def forward(
        self,
        x: torch.Tensor,
        labels: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> ReadoutOutput:
        """Training pass: loss = CE(noisy logits, labels) + β·L_I, with β = beta_k / k.

        CE is the head's prediction term (`heads.target_nll`: cross-entropy, or −log σ(z_label) for a sigmoid
        head). labels: class indices; None or entries < 0 use the clean network's top-1 (unlabelled images).
        """
        x = self._check_input(x)
        with torch.no_grad(), frozen_eval(*self.passes.modules):
            out = self.first_pass(x)
            top1 = predicted(out[LOGITS], self.head)
            if labels is None:
                labels = top1
            else:
                labels = labels.to(top1.device)
                labels = torch.where(labels >= 0, labels, top1)
        r = out[self.config.layer]
        alpha = self.alpha(out)
        lam, one_minus = lambda_from_alpha(alpha, self.config.sigma)
        mean, std = self._noise_stats()
        z = inject_noise(r, lam, one_minus, mean, std, r.shape[0], generator)
        with frozen_eval(*self.passes.modules):  # gradients reach Z, never the analysed network
            logits = self.passes.suffix(z)
        ce = target_nll(logits, labels, self.head)
        info = kl_per_element(standardise(r, mean, std), lam, one_minus).flatten(1).sum(dim=1).mean()
        return ReadoutOutput(ce + self.config.beta * info, ce, info, logits, labels)

    # ---- inference -----------------------------------------------------------------------
    def _maps(self, x: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.first_pass(x)
        lam, one_minus = lambda_from_alpha(self.alpha(out), self.config.sigma)
        mean, std = self._noise_stats()
        kl = kl_per_element(standardise(out[self.config.layer], mean, std), lam, one_minus)
        return out, lam, one_minus, kl

    def heatmaps(self, x: torch.Tensor) -> torch.Tensor:
        """Bits per input pixel for a batch (N, 3, H, W) → (N, H, W); each map sums to its total bits."""
        x = self._check_input(x)
        with frozen_eval(*self.passes.modules, self), torch.inference_mode():
            _, _, _, kl = self._maps(x)
            size = tuple(x.shape[-2:])
            return torch.stack([resize_preserving_total(information_map_bits(k), size) for k in kl])

    def heatmap(self, x: torch.Tensor) -> np.ndarray:
        """Bits per pixel (H, W) for one preprocessed image (1, 3, H, W), in one forward pass."""
        if x.dim() == 4 and x.shape[0] != 1:
            raise ValueError(f"heatmap() takes one image; use heatmaps() for a batch of {x.shape[0]}.")
        return self.heatmaps(x)[0].cpu().numpy()

    def explain(self, x: torch.Tensor, target: int | None = None, batch: int = 10, seed: int = 0) -> "ReadoutResult":
        """Heatmap plus what views show next to it, as a Per-Sample-like AttributionResult.

        The readout's λ does not depend on `target` (it is predicted from the image, as in the paper);
        target only selects which probabilities are reported. p_with is measured on `batch` noisy
        copies (a second pass; batch=0 skips it and reports NaN).
        """
        start = time.perf_counter()
        x = self._check_input(x)
        if x.shape[0] != 1:
            raise ValueError(f"Expected one image shaped (1, 3, H, W), got {tuple(x.shape)}.")
        with frozen_eval(*self.passes.modules, self), torch.inference_mode():
            out, lam, one_minus, kl = self._maps(x)
            probs = probabilities(out[LOGITS], self.head)[0]
            target = int(probs.argmax()) if target is None else int(target)
            if not 0 <= target < probs.numel():
                raise UserError(f"Class index {target} is out of range 0…{probs.numel() - 1}.")
            p_with = float("nan")
            if batch > 0:
                mean, std = self._noise_stats()
                gen = torch.Generator(device=x.device).manual_seed(seed)
                z = inject_noise(out[self.config.layer], lam, one_minus, mean, std, batch, gen)
                p_with = float(probabilities(self.passes.suffix(z), self.head)[:, target].mean())
            feature_bits = information_map_bits(kl)
            heatmap = resize_preserving_total(feature_bits, tuple(x.shape[-2:]))
            lambda_mean = lam[0].mean(dim=0)
        c = self.config
        return ReadoutResult(
            heatmap=heatmap.cpu().numpy(),
            feature_bits=feature_bits.cpu().numpy(),
            lambda_mean=lambda_mean.cpu().numpy(),
            total_bits=float(feature_bits.sum()),
            target=target,
            p_without=float(probs[target]),
            p_with=p_with,
            seconds=time.perf_counter() - start,
            settings=BottleneckSettings(beta_k=c.beta_k, steps=0, batch=max(batch, 1), sigma=c.sigma, seed=seed),
            feature_shape=c.feature_shape,
            checkpoint=getattr(self, "source_path", ""),
            readout=c.to_dict(),
            head=self.head,
        )


@dataclass
class ReadoutResult(AttributionResult):
    """AttributionResult of the Readout Bottleneck: no optimisation history; the checkpoint used."""

    checkpoint: str = ""
    readout: dict = field(default_factory=dict)

    def summary(self) -> dict:
        s = super().summary()
        s.update(method="readout", checkpoint=self.checkpoint, layer=self.readout.get("layer"),
                 reads=self.readout.get("reads"))
        return s
