"""The readout network and the analysed network cut at the layers it reads.

First pass (no noise): the analysed network runs once (`NetworkPasses`) and we collect the feature
maps of several layers and the logits. The *readout network* (`ReadoutNetwork`) maps them to α at
the bottleneck layer's resolution:

    normalise each map per channel  →  resize bilinearly to (h, w) (logits: broadcast over space)
    →  concatenate  →  1×1 conv → ReLU → 1×1 conv → ReLU → 1×1 conv  →  α

Implementation notes
- The first 1×1 convolution is applied to each map *before* resizing: a 1×1 convolution and a
  per-channel affine normalisation are linear per pixel, and bilinear interpolation is a per-channel
  weighted average whose weights sum to 1, so the order does not change the result (a test checks
  this) — but the expensive part then runs at each map's own, mostly lower, resolution.
- Input normalisation is *per channel*: mean and std of each channel pooled over images and space
  (logits: per class over images), estimated once before training and stored in the checkpoint.
- Initialisation: the last convolution's weights are zero and its bias gives α = INIT_ALPHA = 5
  everywhere, so λ ≈ 0.993 and the bottleneck starts transparent, as the Per-Sample one does.
- Range: α = A·tanh(a / A) with A = ALPHA_MAX = 10, so λ ∈ [4.5e-5, 1 - 4.5e-5]: log(1-λ) and the
  KL stay finite for any weights, and the gradient never vanishes abruptly (as a clamp's would).
- The passes are built once per (network, layer, reads) and kept in the network's cache
  (`memo.readout_passes`), so they live and die with the network.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..bottleneck import INIT_ALPHA, MIN_STD
from ..errors import UserError
from ..model_state import layer_tensor
from ..networks import LOGITS
from .config import ALPHA_MAX, DEFAULT_HIDDEN, ReadoutCheckpointError

# --------------------------------------------------------------------------------------------
# The analysed network, cut at the read-out layers.


class NetworkPasses:
    """The analysed network as segments ending at the bottleneck and read-out layers.

    Built from `Network.stages()`, with BatchNorms folded into convolutions per segment (the same
    function, faster). Not an nn.Module on purpose: a ReadoutBottleneck holding it must not register
    the analysed network as its submodule (its parameters would be trained, saved and synced).
    """

    def __init__(self, network, layer: str, reads: Sequence[str]):
        from ..fast import fold_batchnorms

        stages = network.stages()
        index = {name: i for i, (name, _) in enumerate(stages) if name is not None}
        for name in (layer, *reads):
            if name != LOGITS and name not in index:
                raise ReadoutCheckpointError(
                    f"{network.spec.title} has no layer {name!r}; layers: {', '.join(network.spec.layers)}, "
                    f"and {LOGITS!r} for the logits."
                )
        if layer == LOGITS:
            raise UserError("The bottleneck cannot sit on the logits.")
        cuts = sorted({index[layer]} | {index[r] for r in reads if r != LOGITS})
        modules = [m for _, m in stages]
        self.segments: list[tuple[str, nn.Module]] = []
        start = 0
        for cut in cuts:
            self.segments.append((stages[cut][0], fold_batchnorms(nn.Sequential(*modules[start : cut + 1]))))
            start = cut + 1
        self.segments.append((LOGITS, fold_batchnorms(nn.Sequential(*modules[start:]))))
        self.layer = layer
        self.split = next(i for i, (name, _) in enumerate(self.segments) if name == layer) + 1
        self.modules = tuple(m for _, m in self.segments)
        self.wanted = set(reads) | {layer}

    def first_pass(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Outputs of the bottleneck layer, the read-out layers and the logits, without noise.

        Captured maps are cloned: a following in-place ReLU (VGG) must not alter them.
        """
        out: dict[str, torch.Tensor] = {}
        h = x
        last = len(self.segments) - 1
        for i, (name, module) in enumerate(self.segments):
            h = module(h)
            if name in self.wanted or name == LOGITS:
                out[name] = h if i == last else h.clone()
        return out

    def suffix(self, z: torch.Tensor) -> torch.Tensor:
        """Logits from the bottleneck layer's (noisy) output onwards."""
        h = z.contiguous(memory_format=torch.channels_last)
        for _, module in self.segments[self.split :]:
            h = module(h)
        return h


class TracedPasses:
    """The same two passes for a network without a stage list (a model card, `torchvision:NAME`).

    First pass: the whole network once, forward hooks copying the read-out layers' outputs (removed
    again, also on errors). Suffix: the part after the bottleneck layer cut from a `torch.fx` trace
    (`Network.fx_split`); a network that cannot be cut there has no readout, and the error says why.
    """

    def __init__(self, network, layer: str, reads: Sequence[str]):
        if layer == LOGITS:
            raise UserError("The bottleneck cannot sit on the logits.")
        for name in (layer, *reads):
            if name != LOGITS and name not in network.spec.layers:
                known = list(network.spec.layers)
                listed = ", ".join(known[:12]) + (f", … ({len(known)} in all; `models` lists them)" if len(known) > 12 else "")
                raise ReadoutCheckpointError(
                    f"{network.spec.title} has no layer {name!r}; layers: {listed}, and {LOGITS!r} for the logits.")
        for name in (layer, *reads):
            if name != LOGITS and network.layout(name).kind != "map":
                raise ReadoutCheckpointError(
                    f"The readout reads feature maps (N, C, H, W); {name!r} of {network.spec.title} is a token "
                    "sequence, which the readout does not support (the Per-Sample Bottleneck does).")
        cut = network.fx_split(layer)
        if cut is None:
            raise ReadoutCheckpointError(
                f"The readout needs {network.spec.title} cut at {layer!r} (prefix once, suffix per step), but "
                f"it cannot be cut there: {network.fx_split_reason(layer)}.")
        self._suffix = cut[1]
        self._model = network.model
        self._reads = {name: network.hook_module(name) for name in dict.fromkeys((layer, *reads)) if name != LOGITS}
        self.layer = layer
        self.modules = (network.model, self._suffix)

    def first_pass(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Outputs of the bottleneck layer, the read-out layers and the logits, without noise (copies: a
        later in-place operation must not alter them)."""
        out: dict[str, torch.Tensor] = {}
        handles = []

        def keep(name: str):
            def hook(_m, _inp, output):
                out[name] = layer_tensor(output).clone()  # a block returning (hidden states, …): the first
            return hook

        try:
            for name, module in self._reads.items():
                handles.append(module.register_forward_hook(keep(name)))
            out[LOGITS] = self._model(x)
        finally:
            for h in handles:
                h.remove()
        return out

    def suffix(self, z: torch.Tensor) -> torch.Tensor:
        """Logits from the bottleneck layer's (noisy) output onwards."""
        return self._suffix(z)


def network_passes(network, layer: str, reads: Sequence[str]) -> NetworkPasses | TracedPasses:
    """The analysed network's passes for (network, layer, reads), built once and kept in `network.memo.readout_passes`:
    from the stage list where the network has one, else from hooks and a traced cut."""
    kind = NetworkPasses if network.can_split else TracedPasses
    return network.memo.readout_passes.get_or_make((layer, tuple(reads)), lambda: kind(network, layer, reads))


# --------------------------------------------------------------------------------------------
# The readout network.


class ReadoutNetwork(nn.Module):
    """Feature maps at several depths → α at the bottleneck's resolution (three 1×1 convolutions).

    forward(features, size): `features` is a list, one entry per read-out layer: (N, C_i, h_i, w_i)
    maps or (N, C_i) vectors (logits). Returns α shaped (N, out_channels, *size).
    """

    def __init__(
        self,
        read_channels: Sequence[int],
        out_channels: int,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        init_alpha: float = INIT_ALPHA,
        alpha_max: float = ALPHA_MAX,
    ):
        super().__init__()
        h1, h2 = (int(h) for h in hidden)
        if not 0 < init_alpha < alpha_max:
            raise ValueError(f"init_alpha must lie in (0, alpha_max), got {init_alpha} and {alpha_max}.")
        self.alpha_max = float(alpha_max)
        # First 1×1 conv, split by source: conv(concat(maps)) == Σ_i conv_i(map_i).
        self.sources = nn.ModuleList(nn.Conv2d(int(c), h1, 1, bias=False) for c in read_channels)
        self.bias1 = nn.Parameter(torch.zeros(h1))
        bound = 1.0 / math.sqrt(sum(int(c) for c in read_channels))  # PyTorch's default for the bias
        nn.init.uniform_(self.bias1, -bound, bound)
        self.conv2 = nn.Conv2d(h1, h2, 1)
        self.conv3 = nn.Conv2d(h2, int(out_channels), 1)
        nn.init.zeros_(self.conv3.weight)
        nn.init.constant_(self.conv3.bias, self.alpha_max * math.atanh(init_alpha / self.alpha_max))
        for i, c in enumerate(read_channels):
            self.register_buffer(f"in_mean_{i}", torch.zeros(int(c)))
            self.register_buffer(f"in_std_{i}", torch.ones(int(c)))

    def normalisation(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return getattr(self, f"in_mean_{i}"), getattr(self, f"in_std_{i}")

    def set_normalisation(self, i: int, mean: torch.Tensor, std: torch.Tensor, min_std: float = MIN_STD) -> None:
        """Per-channel mean and std of read-out layer i (std floored so dead channels stay finite)."""
        m, s = self.normalisation(i)
        m.copy_(mean.reshape(m.shape))
        s.copy_(std.reshape(s.shape).clamp_min(min_std))

    def forward(self, features: Sequence[torch.Tensor], size: tuple[int, int]) -> torch.Tensor:
        if len(features) != len(self.sources):
            raise ValueError(f"Expected {len(self.sources)} feature maps, got {len(features)}.")
        size = tuple(int(s) for s in size)
        h = self.bias1.view(1, -1, 1, 1)
        for i, (f, conv) in enumerate(zip(features, self.sources)):
            if f.dim() == 2:  # logits: a 1×1 map, broadcast over space
                f = f[:, :, None, None]
            mean, std = self.normalisation(i)
            y = conv((f - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1))
            if tuple(y.shape[-2:]) not in (size, (1, 1)):
                y = F.interpolate(y, size=size, mode="bilinear", align_corners=False)
            h = h + y
        if tuple(h.shape[-2:]) != size:
            h = h.expand(-1, -1, *size)
        h = self.conv2(F.relu(h))
        a = self.conv3(F.relu(h))
        return self.alpha_max * torch.tanh(a / self.alpha_max)
