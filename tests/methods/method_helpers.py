"""Helpers for the baseline tests (imported by name; fixtures live in conftest.py)."""
from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn

#: Random networks run on 32×32 inputs: both are fully convolutional up to an adaptive pooling (VGG-16's
#: conv5_3 is then 2×2, ResNet-50's layer4 1×1), and this keeps the every-method tests within seconds on a
#: shared CPU.
SMALL = 32

#: Cheap settings for the slow methods (the defaults are the paper's: 50 steps / samples, 10 IBA steps).
FAST_SETTINGS = {
    "integrated_gradients": {"steps": 4, "batch": 4},
    "smoothgrad": {"samples": 4, "batch": 4},
    "iba_1": {"steps": 2, "batch": 2},
    "iba_10": {"steps": 2, "batch": 2},
    "iba_100": {"steps": 2, "batch": 2},
    "coiba": {"steps": 2, "batch": 2},
    # Patterns from 2 offline photos when a test does not pass precomputed ones (`vgg_patterns`).
    "pattern_attribution": {"samples": 2},
    # One forward pass per channel: 8 of them, not 512 (VGG-16) or 2,048 (ResNet-50). test_cam_variants.py checks
    # every channel against pytorch-grad-cam.
    "score_cam": {"channels": 8, "batch_size": 4},
}


def fast_method(key: str, **extra):
    from iba_core.methods import get_method

    return get_method(key, **{**FAST_SETTINGS.get(key, {}), **extra})


def stats_settings(key: str, network, stats, x_size: int = SMALL) -> dict:
    """The statistics settings of a method that needs them (else {}): the default layer's `stats` for the
    Per-Sample Bottleneck; for CoIBA a two-layer range from the default layer, with small statistics of both."""
    from iba_core.methods import get_method

    if not get_method(key).needs_stats:
        return {}
    if key != "coiba":
        return {"stats": stats}
    layers = list(network.spec.layers)
    i = layers.index(network.spec.default_layer)
    pair = layers[i:i + 2]
    return {"layers": (pair[0], pair[-1]),
            "stats": {layer: stats if layer == pair[0] else small_stats(network, x_size, layer) for layer in pair}}


def small_stats(network, x_size: int = SMALL, layer: str | None = None):
    """Feature statistics at a layer (default: the default layer) for small random inputs (IBA needs matching
    shapes)."""
    from iba_core.feature_stats import FeatureStats, estimate_stats

    layer = layer or network.spec.default_layer
    g = torch.Generator().manual_seed(1)
    mean, std, n = estimate_stats(network.prefix(layer), [torch.randn(8, 3, x_size, x_size, generator=g)])
    return FeatureStats(mean, std, n, network.key, network.weights_id, layer, "random noise")


def fingerprint(model: nn.Module) -> dict:
    """Everything a method must leave unchanged: flags, requires_grad, .grad, parameter/buffer values, hooks."""
    from reference_impl import hook_count

    tensors = {}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        d = t.detach()  # sums without copies: VGG-16 has 138 M parameters
        tensors[name] = (tuple(d.shape), d.data_ptr(), float(d.sum()), float(torch.linalg.vector_norm(d.float())) if d.is_floating_point() else 0.0)
    return {
        "training": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "grad": [p.grad is None for p in model.parameters()],
        "types": [type(m).__name__ for m in model.modules()],
        "instance_attrs": [sorted(k for k in vars(m) if k in ("forward", "canonizer_sum")) for m in model.modules()],
        "inplace": [getattr(m, "inplace", None) for m in model.modules()],
        "tensors": tensors,
        "hooks": hook_count(model),
    }


class TinyLinear(nn.Module):
    """logit_c = Σ_i W[c, i] · x_i + b_c over all pixels and channels: Occlusion can be computed by hand."""

    def __init__(self, size: int, classes: int = 3):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = nn.Parameter(torch.randn(classes, 3 * size * size, generator=g), requires_grad=False)
        self.bias = nn.Parameter(torch.randn(classes, generator=g), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight.T + self.bias


class TinyConvNet(nn.Module):
    """conv → ReLU → conv → ReLU (the CAM layer `act2`) → global average pool → linear."""

    def __init__(self, classes: int = 4):
        super().__init__()
        torch.manual_seed(3)
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.act1 = nn.ReLU()
        self.conv2 = nn.Conv2d(6, 5, 3, stride=2, padding=1)
        self.act2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(5, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.act2(self.conv2(self.act1(self.conv1(x))))).flatten(1))


def wrap(model: nn.Module):
    """A minimal stand-in for Network: what the baselines need from a non-registered network."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return SimpleNamespace(model=model, device=torch.device("cpu"))
