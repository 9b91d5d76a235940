"""Feature layouts: how a layer's output lies on the image, and its view as a (N, C, h, w) map.

The bottleneck's mathematics (noise, λ, the σ_s blur, bits per pixel) works on maps shaped (N, C, h, w).
CNN layers give such maps directly; vision transformers give token sequences that lie on a patch grid:

- ViT-style ``(N, E + h·w, C)``: E leading tokens without a place on the grid (the class token; E = 1
  for torchvision's ViT), then the patch tokens in row-major order;
- Swin-style ``(N, h, w, C)``: the grid itself, channels last.

`FeatureLayout.to_map` views such an output as the grid map (N, C, h, w) plus the *unlocated* tokens
(N, C, E, 1) (None when E = 0); `from_map` puts both back into the layer's own layout, so the rest of
the network runs unchanged. The map is a permuted view (channels-last strides), not a copy.

Deciding the layout from a shape (`layout_of_shape`), with the square input crops this library uses:
a 4-D output (N, a, b, c) is a Swin-style grid when a == b != c (rows and columns equal, channels last)
and a CNN map otherwise; a 3-D output (N, L, C) is a token sequence when L − E is a square h·w with
h ≥ 2 for the smallest E in 0…MAX_EXTRA_TOKENS. Rare shapes can fool this (a CNN map with as many
channels as rows and columns counts as a map; so does a Swin grid with C == h); a spec may then state
the layout itself (`NetworkSpec.layouts`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

#: At most this many leading tokens off the grid (a class token, a distillation token, a few registers).
MAX_EXTRA_TOKENS = 8

Form = Literal["nchw", "nlc", "nhwc"]


@dataclass(frozen=True)
class FeatureLayout:
    """How one layer's output is arranged. See the module docstring."""

    form: Form = "nchw"
    #: (h, w) of the patch grid for "nlc" sequences (the other forms carry it in their shape).
    grid: tuple[int, int] | None = None
    #: Leading tokens without a place on the grid ("nlc" only), e.g. ViT's class token.
    extra_tokens: int = 0

    @property
    def kind(self) -> str:
        """"map" for CNN feature maps, "tokens" for transformer tokens on a patch grid."""
        return "map" if self.form == "nchw" else "tokens"

    def to_map(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(grid map (N, C, h, w), unlocated tokens (N, C, E, 1) or None) of a layer output in this layout."""
        if self.form == "nchw":
            return out, None
        if self.form == "nhwc":
            return out.permute(0, 3, 1, 2), None
        n, length, c = out.shape
        h, w = self.grid_for(length)
        grid = out[:, self.extra_tokens:].reshape(n, h, w, c).permute(0, 3, 1, 2)
        extra = out[:, : self.extra_tokens].permute(0, 2, 1)[..., None] if self.extra_tokens else None
        return grid, extra

    def grid_for(self, length: int) -> tuple[int, int]:
        """(h, w) of an "nlc" sequence of `length` tokens: the grid found in the dry pass, or for another input
        size the grid with the same aspect ratio (a network that takes several sizes has as many grids)."""
        h, w = self.grid
        if length == self.extra_tokens + h * w:
            return h, w
        other = _grid(length - self.extra_tokens, h / w)
        if other is None:
            raise ValueError(f"{length} tokens do not make {self.extra_tokens} unlocated token(s) plus an "
                             f"{h}:{w} patch grid.")
        return other

    def from_map(self, grid: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        """The inverse of `to_map`: the layer's own layout from the grid map and the unlocated tokens."""
        if self.form == "nchw":
            return grid
        tokens = grid.permute(0, 2, 3, 1)  # (N, h, w, C): contiguous when the map has channels-last strides
        if self.form == "nhwc":
            return tokens.contiguous()
        tokens = tokens.reshape(grid.shape[0], -1, grid.shape[1])
        if self.extra_tokens:
            if extra is None:
                raise ValueError(f"This layer has {self.extra_tokens} unlocated token(s); give them too.")
            tokens = torch.cat([extra[..., 0].permute(0, 2, 1), tokens], dim=1)
        return tokens.contiguous()

    def to_map_stats(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`to_map` for per-element statistics shaped like one sample (no batch axis): ((C, h, w), (C, E, 1))."""
        grid, extra = self.to_map(values[None])
        return grid[0], None if extra is None else extra[0]

    def describe(self, shape: tuple[int, ...]) -> str:
        """A short text for a layer of this layout and output shape (batch axis included), for layer pickers."""
        dims = "×".join(str(v) for v in shape[1:])
        if self.form == "nchw":
            return f"{dims} map"
        if self.form == "nhwc":
            return f"{dims} tokens ({shape[1]}×{shape[2]} grid, {shape[3]} channels)"
        h, w = self.grid
        extra = {0: "", 1: " + class token"}.get(self.extra_tokens, f" + {self.extra_tokens} unlocated tokens")
        return f"{dims} tokens ({h}×{w} grid{extra}, {shape[2]} channels)"


MAP = FeatureLayout()


def layout_of_shape(shape: tuple[int, ...], input_size: tuple[int, int] | int | None = None) -> FeatureLayout | None:
    """The layout of an output shaped `shape` (batch axis included), or None when it lies on no grid.

    input_size: the input's (H, W), used for the patch grid's aspect ratio (square when not given).
    """
    if isinstance(input_size, int):
        input_size = (input_size, input_size)
    ratio = 1.0 if not input_size else input_size[0] / input_size[1]
    if len(shape) == 4:
        _, a, b, c = shape
        return FeatureLayout("nhwc") if a == b != c else MAP
    if len(shape) == 3:
        _, length, channels = shape
        if channels < 1:
            return None
        for extra in range(0, min(MAX_EXTRA_TOKENS, length) + 1):
            grid = _grid(length - extra, ratio)
            if grid is not None:
                return FeatureLayout("nlc", grid, extra)
    return None


def _grid(cells: int, ratio: float) -> tuple[int, int] | None:
    """(h, w) with h·w == cells, h/w == ratio and h, w ≥ 2; None when there is none."""
    if cells < 4:
        return None
    w = round(math.sqrt(cells / ratio))
    for cand in (w - 1, w, w + 1):
        if cand >= 2 and cells % cand == 0:
            h = cells // cand
            if h >= 2 and abs(h / cand - ratio) < 1e-6:
                return h, cand
    return None


def infer_layout(sample_shape: tuple[int, ...]) -> FeatureLayout:
    """The layout of one sample's shape (no batch axis), e.g. of feature statistics, where nothing else says it:
    a token sequence for (L, C) on a patch grid, else a CNN map. 3-D shapes are always maps here (as they
    were before transformers were supported): a Swin grid (h, w, C) needs its layout given."""
    if len(sample_shape) == 2:
        return layout_of_shape((1, *sample_shape)) or MAP
    return MAP
