"""M2IB's text side (Wang et al., NeurIPS 2023): which tokens of a prompt carry the information that makes its text
embedding similar to the image's — the bottleneck on a CLIP model's text encoder.

As the authors run it (YingWANGG/M2IB at ce4d7a0, `scripts/iba.py`, `methods.py`, `eval.py`):
- the bottleneck replaces the output of text block 9 of 12 (`eval.py:84` `--tlayer 9`; the residual stream after
  the block, `methods.py:20-28`), the same depth ratio on other text towers (`clip_models.default_layer_index`);
- one λ per token and channel (`iba.py:96`), α = 5 (`iba.py:93`), no smoothing;
- a standard-normal prior: Z = λR + (1 − λ)ε with ε ~ N(0, 1) on the raw features, the KL against N(0, 1)
  (`iba.py:105-113`);
- loss = β·mean KL − cos(text embedding of Z, clean image embedding) with β = 0.1 (`eval.py:82`, `iba.py:190-192`),
  i.e. β·k = 0.1 in this project's units (β = β·k / k on the summed KL);
- Adam, lr 1, 10 steps, 10 noisy copies (`methods.py:39,46`, `iba.py:131`);
- the map: the KL of the last forward pass (before the last update, `iba.py:164,170`) summed over channels, per
  token. The authors min-max normalise it for display; here it stays in bits (the image map's unit), and the
  start and end tokens are kept in `TokenBits` but left out of what is shown (their `plot.py:49,60` drop them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from .bottleneck import INIT_ALPHA, kl_per_element, nats_to_bits
from .errors import UserError
from .model_state import frozen_eval, replaced_output

#: M2IB's text-side β on the mean KL (their `tbeta`, `eval.py:82`): β·k here.
TEXT_BETA_K = 0.1


@dataclass(frozen=True)
class TextSideSettings:
    """The text-side bottleneck's settings, M2IB's by default (module docstring)."""

    beta_k: float = TEXT_BETA_K
    steps: int = 10
    batch: int = 10
    lr: float = 1.0
    init_alpha: float = INIT_ALPHA
    seed: int | None = 0

    @property
    def forward_passes(self) -> int:
        """Passes of the text tower one prompt's fit costs (a backward counts as one more: `iba_core.budget`)."""
        return 2 * self.steps * self.batch + 1


@dataclass
class TokenBits:
    """Bits per token of one prompt: `tokens` as the tokenizer spells them, `bits` the KL (summed over channels, in
    bits) at the read point; `shown` marks the prompt's own tokens (not the start and end tokens)."""

    prompt: str
    layer: str
    tokens: list[str]
    bits: list[float]
    shown: list[bool]
    total_bits: float
    similarity_without: float  # cos(clean text embedding, image embedding)
    similarity_with: float  # mean cos with the fitted bottleneck, on a fresh noisy batch
    settings: TextSideSettings = field(default_factory=TextSideSettings)

    def words(self) -> list[tuple[str, float]]:
        """(token, bits) of the prompt's own tokens, CLIP's end-of-word marks removed: what the page colours."""
        return [(t.replace("</w>", ""), b) for t, b, s in zip(self.tokens, self.bits, self.shown) if s]

    def summary(self) -> dict:
        """JSON-friendly: the tokens with their bits, the totals and the settings."""
        return {"prompt": self.prompt, "layer": self.layer, "total_bits": self.total_bits,
                "similarity_without": self.similarity_without, "similarity_with": self.similarity_with,
                "tokens": [{"token": t, "bits": b} for t, b in self.words()],
                "settings": {"beta_k": self.settings.beta_k, "steps": self.settings.steps, "batch": self.settings.batch,
                             "lr": self.settings.lr, "prior": "standard_normal", "read_point": "last_step"}}


def text_layer(model) -> tuple[str, torch.nn.Module]:
    """(name, module) of the text block M2IB places its bottleneck at: block 9 of 12, the same ratio elsewhere."""
    from .networks.clip_models import default_layer_index

    blocks = model.text_model.encoder.layers
    index = default_layer_index(len(blocks))
    return f"text_model.encoder.layers.{index}", blocks[index]


def text_side(network, x: torch.Tensor, prompt: str, settings: TextSideSettings | None = None) -> TokenBits:
    """Fit M2IB's text-side bottleneck for one prompt against one preprocessed image `x` (1, C, H, W) of a CLIP
    network (`networks.clip_models`); the model is left as it was found (eval mode, gradients, hooks)."""
    from .networks.clip_models import clean_prompt, is_clip

    if not is_clip(network):
        raise UserError("Which words carry the information needs a CLIP model; this network is a classifier.")
    s = settings or TextSideSettings()
    prompt = clean_prompt(prompt)
    model = network.model
    device = next(model.parameters()).device
    name, block = text_layer(model)
    max_length = int(getattr(model.config.text_config, "max_position_embeddings", 77))
    tokens = model._tokenizer([prompt], truncation=True, max_length=max_length, return_tensors="pt")
    ids, mask = tokens["input_ids"].to(device), tokens["attention_mask"].to(device)
    with frozen_eval(model):
        with torch.no_grad():
            image = _unit(model.get_image_features(pixel_values=x.to(device)).pooler_output.float())
            captured: list[torch.Tensor] = []
            with replaced_output(block, lambda out: captured.append(out.detach().clone()) or out):
                clean = _text_embedding(model, ids, mask)
            r = captured[0].float()  # (1, L, D), the residual stream after the block
        similarity_without = float((clean * image).sum())
        noisy_pass = _noisy_similarity(model, block, r, image, ids, mask, s, device)
        alpha, last_kl = _fit_alpha(r, noisy_pass, s)
        with torch.no_grad():
            similarity_with = float(noisy_pass(torch.sigmoid(alpha)).mean())
    if last_kl is None:  # no steps: λ at its start
        last_kl = kl_per_element(r, torch.sigmoid(alpha), torch.sigmoid(-alpha)).detach()
    bits = nats_to_bits(last_kl[0].sum(dim=-1)).cpu().tolist()
    pieces = model._tokenizer.convert_ids_to_tokens(ids[0].tolist())
    special = set(getattr(model._tokenizer, "all_special_ids", []))
    shown = [int(i) not in special for i in ids[0].tolist()]
    return TokenBits(prompt=prompt, layer=name, tokens=list(pieces), bits=[float(b) for b in bits], shown=shown,
                     total_bits=float(sum(bits)), similarity_without=similarity_without,
                     similarity_with=similarity_with, settings=s)


def _unit(v: torch.Tensor) -> torch.Tensor:
    """`v` scaled to unit length along its last axis (so a dot product is a cosine)."""
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _text_embedding(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The CLIP model's text embedding of the tokens, of unit length."""
    return _unit(model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output.float())


def _noisy_similarity(model, block: torch.nn.Module, r: torch.Tensor, image: torch.Tensor, ids: torch.Tensor,
                      mask: torch.Tensor, s: TextSideSettings,
                      device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """A function λ → the cosines of `s.batch` noisy text embeddings with the image, the bottleneck Z = λR + (1 − λ)ε
    in place of `block`'s output `r`; its noise from one generator (on the model's `device`) seeded by `s.seed`."""
    generator = torch.Generator(device=device)
    generator.manual_seed(s.seed if s.seed is not None else int(torch.seed() % (2**63)))
    batch_ids, batch_mask = ids.expand(s.batch, -1), mask.expand(s.batch, -1)

    def noisy_pass(lam: torch.Tensor) -> torch.Tensor:
        noise = torch.randn((s.batch, *r.shape[1:]), generator=generator, device=device)
        z = lam * r + (1 - lam) * noise  # the standard-normal prior on the raw features
        with replaced_output(block, lambda out: z.to(out.dtype)):
            return (_text_embedding(model, batch_ids, batch_mask) * image).sum(dim=-1)  # (batch,) cosines

    return noisy_pass


def _fit_alpha(r: torch.Tensor, noisy_pass: Callable[[torch.Tensor], torch.Tensor],
               s: TextSideSettings) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The bottleneck's α after `s.steps` Adam steps, and the KL per element of the last forward pass (None when
    no step ran)."""
    k = r.numel()
    alpha = torch.full_like(r, s.init_alpha, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=s.lr)
    last_kl = None
    for _ in range(s.steps):
        adam.zero_grad(set_to_none=True)
        lam = torch.sigmoid(alpha)
        kl = kl_per_element(r, lam, torch.sigmoid(-alpha))  # against N(0, 1): r is R itself
        loss = -noisy_pass(lam).mean() + s.beta_k / k * kl.sum()
        loss.backward()
        last_kl = kl.detach()  # the authors' read point: the last forward pass, before its update
        adam.step()
    return alpha, last_kl
