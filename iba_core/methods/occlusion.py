"""Occlusion (Zeiler & Fergus 2014) with square tiles, as in the paper's baselines (8×8 and 14×14).

Each tile (stride = tile size, so tiles do not overlap; edge tiles are cut at the border) is painted
with the occluder — the image's mean colour by default, or zeros in the normalised input space
(`occluder="zero"`, what the paper's code used inside Sensitivity-n, whose own masking also writes zeros) — and the map holds, on every pixel of the tile, the resulting **drop of the
target logit**: logit(x) − logit(x with the tile occluded). We use logits rather than probabilities
because the paper's Sensitivity-n discussion reads Occlusion-8×8 scores as "the drop in logits per 8x8
tile", and logits do not saturate the way softmax probabilities do. Positive: the tile supports the
class; negative: hiding it makes the class more likely.
"""
from __future__ import annotations

import torch
from captum.attr import Occlusion as _CaptumOcclusion

from ..errors import UserError
from .base import Method, image_mean


class Occlusion(Method):
    signed = True
    cost = "slow"
    description = "Drop of the target logit when the tile is painted with the image's mean colour."
    OCCLUDERS = ("mean", "zero")

    def __init__(self, size: int = 8, **settings):
        super().__init__(size=size, **settings)
        size = int(self.settings["size"])
        if size < 1:
            raise UserError(f"The occlusion tile size must be ≥ 1, got {size}.")
        if self.settings["occluder"] not in self.OCCLUDERS:
            raise UserError(f"Unknown occluder {self.settings['occluder']!r}; choose one of: {', '.join(self.OCCLUDERS)}.")
        self.key = f"occlusion_{size}"
        self.name = f"Occlusion-{size}×{size}"

    @classmethod
    def default_settings(cls) -> dict:
        # perturbations_per_eval: occluded copies per forward pass (memory vs. speed; the result is the same)
        return {"size": 8, "perturbations_per_eval": 16, "occluder": "mean"}

    def forward_passes(self, network, height: int, width: int) -> int:
        """One forward pass per tile (cut at the border) and one of the whole image."""
        size = int(self.settings["size"])
        return -(-height // size) * -(-width // size) + 1

    def _compute(self, network, x: torch.Tensor, target: int) -> torch.Tensor:
        size = int(self.settings["size"])
        h, w = x.shape[-2:]
        window = (x.shape[1], min(size, h), min(size, w))
        with torch.no_grad():
            attr = _CaptumOcclusion(network.model).attribute(
                x,
                sliding_window_shapes=window,
                strides=window,
                baselines=image_mean(x) if self.settings["occluder"] == "mean" else 0.0,
                target=target,
                perturbations_per_eval=int(self.settings["perturbations_per_eval"]),
            )
        # The window spans all colour channels, so every channel holds the same value.
        return attr[0, 0]
