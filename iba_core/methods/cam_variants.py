"""The CAM variants people compare against: Grad-CAM++, Score-CAM, LayerCAM and Eigen-CAM.

All four read the activations A (B, C, h, w) of the same layer as Grad-CAM (`cam.cam_module`: the spec's CAM
layer or the settings `layer` / `layer_input`), rectify a map at that layer's resolution and upsample it
bilinearly to the image (as Grad-CAM does). They follow pytorch-grad-cam (1.5.7) where the papers leave a
choice open, so maps can be checked against it:

- Grad-CAM++ (Chattopadhyay et al. 2018, eq. 19 with the exponential's derivatives written as powers of the
  logit's gradient G): α = G² / (2 G² + Σ_ij A · G³), zero where G = 0; weight_k = Σ_ij α · ReLU(G);
  map = ReLU(Σ_k weight_k A_k).
- Score-CAM (Wang et al. 2020): each channel, upsampled to the image and min–max scaled to [0, 1], masks the
  image; the target's logit on each masked image, softmax over the channels, weights the channels;
  map = ReLU(Σ_k weight_k A_k). The paper scores a masked image by the class's softmax *probability* (its
  increase over a baseline image); like pytorch-grad-cam this takes the softmax over channels of the target
  logit, which needs no head-specific probability (binary and sigmoid heads explain a logit as every CAM does).
  One forward pass per channel (EfficientNet-Lite0: 1,280), in batches of `batch_size` masked images; the
  setting `channels` = k keeps only the k channels whose activations vary most over the positions (the
  "Faster Score-CAM" shortcut; its key is then `score_cam_topk`).
- LayerCAM (Jiang et al. 2021), at one layer: map = ReLU(Σ_k ReLU(G_k) ⊙ A_k), the gradient kept per position.
- Eigen-CAM (Muhammad & Yeasin 2020): the activations as (h·w) × C, centred per channel, projected on their
  first right singular vector; the sign, which the SVD leaves open, is chosen so that the larger magnitude is
  positive (pytorch-grad-cam's `get_2d_projection_with_sign_correction`), then rectified. It does not depend on
  the target class: every class gets the same map.

Token layers (ViT, DeiT, Swin, …) are laid on their patch grid first, unlocated tokens dropped (`cam.grid_map`),
so the same formulas run on every network the dry pass understands.
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import UserError
from .cam import CamMethod, activations, activations_and_gradients, cam_module, target_scores, upsampled

#: pytorch-grad-cam's ε in Grad-CAM++'s α denominator (keeps α finite where G = 0 and Σ A · G³ = −2 G²).
PLUSPLUS_EPS = 1e-6


def plusplus_weights(a: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Grad-CAM++'s channel weights (B, C) from activations and gradients (B, C, h, w) (module docstring)."""
    g2 = grad.pow(2)
    alpha = g2 / (2 * g2 + a.sum(dim=(2, 3), keepdim=True) * g2 * grad + PLUSPLUS_EPS)
    alpha = torch.where(grad != 0, alpha, torch.zeros_like(alpha))
    return (alpha * grad.clamp(min=0)).sum(dim=(2, 3))


def unit_scaled(maps: torch.Tensor) -> torch.Tensor:
    """Each (H, W) map of (K, H, W) min–max scaled to [0, 1]; a constant map becomes 0 (it masks everything)."""
    flat = maps.flatten(1)
    low, high = flat.min(dim=1).values, flat.max(dim=1).values
    span = (high - low)[:, None, None]
    return torch.where(span > 0, (maps - low[:, None, None]) / span.clamp(min=torch.finfo(maps.dtype).tiny),
                       torch.zeros_like(maps))


def score_weights(network, x: torch.Tensor, a: torch.Tensor, targets: list[int], batch_size: int) -> torch.Tensor:
    """Score-CAM's channel weights (B, C): softmax over channels of the target logit on each channel-masked
    image; the masked images of all (image, channel) pairs run `batch_size` at a time."""
    b, c = a.shape[:2]
    size = tuple(x.shape[-2:])
    scores = torch.empty(b * c, dtype=torch.float32, device=a.device)
    target_of = torch.as_tensor(targets, device=a.device)
    with torch.no_grad():
        for start in range(0, b * c, batch_size):
            pairs = torch.arange(start, min(start + batch_size, b * c), device=a.device)
            image, channel = pairs // c, pairs % c
            chosen = a[image, channel]
            # A channel constant at the layer masks everything: decided here, as its upsampled copy can vary by
            # rounding alone, which min–max scaling would blow up to a mask of noise.
            varies = chosen.flatten(1).amax(dim=1) > chosen.flatten(1).amin(dim=1)
            masks = unit_scaled(upsampled(chosen, size)) * varies[:, None, None]
            logits = network.model(x[image] * masks[:, None])
            scores[pairs] = target_scores(logits, target_of[image]).float()
    return scores.view(b, c).softmax(dim=1)


def most_varying_channels(a: torch.Tensor, k: int | None) -> torch.Tensor:
    """(B, k, h, w): per image the k channels of a (B, C, h, w) with the largest variance over positions (ties: the
    lower channel index first, so a batch picks what each image alone picks); all of them when k is None or ≥ C."""
    if k is None or k >= a.shape[1]:
        return a
    order = torch.sort(a.flatten(2).var(dim=2, unbiased=False), dim=1, descending=True, stable=True).indices[:, :k]
    return a.gather(1, order[:, :, None, None].expand(-1, -1, *a.shape[2:]))


def eigen_projection(a: torch.Tensor) -> torch.Tensor:
    """(B, h, w): each image's activations, centred per channel, on their first principal direction, its sign
    chosen so that |max| ≥ |min| (module docstring). In float64: the SVD's direction is then stable."""
    b, c, h, w = a.shape
    rows = a.double().flatten(2).transpose(1, 2)  # (B, h·w, C)
    rows = rows - rows.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(rows, full_matrices=False)
    projection = (rows @ vh[:, 0, :, None])[..., 0]  # (B, h·w)
    flip = projection.min(dim=1).values.abs() > projection.max(dim=1).values.abs()
    projection = torch.where(flip[:, None], -projection, projection)
    return projection.view(b, h, w).float()


class _LayerMapMethod(CamMethod):
    """A CAM variant: the map at the layer's resolution (`layer_map`), rectified and upsampled."""

    batched = True  # one pass (Score-CAM: its masked images) for the whole batch

    def layer_map(self, network, x: torch.Tensor, targets: list[int], module: nn.Module, path: str,
                  is_input: bool) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _compute_batch(self, network, x, targets):
        module, path, is_input = cam_module(network, self.settings["layer"], self.settings["layer_input"])
        cam = self.layer_map(network, x, list(targets), module, path, is_input).clamp(min=0)
        return list(upsampled(cam, tuple(x.shape[-2:])))


class GradCamPlusPlus(_LayerMapMethod):
    key = "grad_cam_pp"
    name = "Grad-CAM++"
    description = ("The CAM layer's activations weighted by their positive gradients, each position by Grad-CAM++'s "
                   "α, rectified and upsampled.")

    def layer_map(self, network, x, targets, module, path, is_input):
        a, grad = activations_and_gradients(network, x, targets, module, path, is_input, self.name)
        return (plusplus_weights(a, grad)[:, :, None, None] * a).sum(dim=1)


class ScoreCam(_LayerMapMethod):
    key = "score_cam"
    name = "Score-CAM"
    cost = "slow"  # one forward pass per channel of the layer
    description = ("The CAM layer's channels weighted by the target's logit when each channel, scaled to [0, 1], "
                   "masks the image (softmax over channels), rectified and upsampled.")

    def __init__(self, **settings):
        super().__init__(**settings)
        batch_size = self.settings["batch_size"]
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise UserError(f"Score-CAM needs a whole batch size ≥ 1, got {batch_size!r}.")
        channels = self.settings["channels"]
        if channels is not None:
            if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
                raise UserError(f"Score-CAM needs a whole number of channels ≥ 1 (or none: all), got {channels!r}.")
            # the key names the setting, so maps from a subset never pass for the full method's
            self.key = f"score_cam_top{channels}"
            self.name = f"Score-CAM (top {channels} channels)"

    @classmethod
    def default_settings(cls) -> dict:
        # batch_size: masked images per forward pass (memory vs. speed; the same result).
        # channels: None = every channel (the method as published); k = only the k channels whose activations
        # vary most over the positions (Faster Score-CAM's shortcut: k forward passes instead of C).
        return {**super().default_settings(), "batch_size": 32, "channels": None}

    #: Channels assumed where the layer's cannot be read from its modules (a ResNet-50's last block has 2,048).
    ASSUMED_CHANNELS = 2048

    def forward_passes(self, network, height: int, width: int) -> int:
        """One forward pass per channel weighed (the `channels` most varying, else every channel of the layer, read
        from its modules' sizes), and one for the activations."""
        if self.settings["channels"] is not None:
            return int(self.settings["channels"]) + 1
        return layer_channels(network, self.settings["layer"], self.settings["layer_input"],
                              self.ASSUMED_CHANNELS) + 1

    def layer_map(self, network, x, targets, module, path, is_input):
        a = activations(network, x, module, path, is_input, self.name)
        a = most_varying_channels(a, self.settings["channels"])
        return (score_weights(network, x, a, targets, self.settings["batch_size"])[:, :, None, None] * a).sum(dim=1)


class LayerCam(_LayerMapMethod):
    key = "layer_cam"
    name = "LayerCAM"
    description = "The CAM layer's activations times their positive gradients at each position, summed, upsampled."

    def layer_map(self, network, x, targets, module, path, is_input):
        a, grad = activations_and_gradients(network, x, targets, module, path, is_input, self.name)
        return (grad.clamp(min=0) * a).sum(dim=1)


def layer_channels(network, layer: str | None, layer_input: bool | None, assumed: int) -> int:
    """The channels a CAM layer of `network` gives, read without running the network from the sizes
    (`out_channels`, `num_features`, `out_features`, `normalized_shape`) of the last module that has one: inside
    the layer, or for a layer's input the last such module registered before it; `assumed` where none can be read
    (no CAM layer, modules without sizes). An estimate, for the cost of a request."""
    from .cam import cam_layer

    try:
        path, is_input = cam_layer(network, layer, layer_input)
        modules = list(network.model.named_modules())
    except Exception:  # noqa: BLE001 - an estimate: the method itself says why it cannot run
        return assumed
    inside = [m for name, m in modules if name == path or name.startswith(path + ".")]
    before = [m for name, m in modules[:next((i for i, (n, _) in enumerate(modules) if n == path), 0)]]
    # a layer's output: its own last sized module, else (a pooling) the one before it, as for its input
    for sub in reversed(before if is_input else [*before, *inside]):
        for name in ("out_channels", "num_features", "out_features"):
            if isinstance(getattr(sub, name, None), int):
                return int(getattr(sub, name))
        shape = getattr(sub, "normalized_shape", None)
        if isinstance(shape, tuple) and shape:
            return int(shape[-1])
    return assumed


class EigenCam(_LayerMapMethod):
    key = "eigen_cam"
    name = "Eigen-CAM"
    description = ("The CAM layer's activations projected on their first principal component (the same map for "
                   "every class), rectified and upsampled.")
    PASSES = 1  # a forward pass; no gradient

    def layer_map(self, network, x, targets, module, path, is_input):
        return eigen_projection(activations(network, x, module, path, is_input, self.name))
