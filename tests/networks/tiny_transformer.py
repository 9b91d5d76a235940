"""A tiny ViT-like network (patch embedding, optional class token, 4 blocks) for fast transformer tests."""
from __future__ import annotations

import torch
from torch import nn


class TinyViT(nn.Module):
    """Patch embedding → optional class token → 4 blocks → head reading the class token (or the mean)."""

    def __init__(self, class_token: bool = True, dim: int = 8, classes: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Conv2d(3, dim, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, dim)) if class_token else None
        self.blocks = nn.Sequential(*(Block(dim) for _ in range(4)))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        if self.cls is not None:
            t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        t = self.blocks(t)
        return self.head(t[:, 0] if self.cls is not None else t.mean(dim=1))


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mix = nn.Linear(dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        # token mixing (mean over tokens) so the class token sees every patch, as attention would
        return t + torch.tanh(self.mix(self.norm(t) + self.norm(t).mean(dim=1, keepdim=True)))
