"""M2IB's text side (`iba_core/text_side.py`) on a tiny random CLIP model: the bits per token equal M2IB's formulas
written out by hand (standard-normal prior, β·mean KL − cos, the last forward pass's KL), the model is left as it
was, a classifier is refused in one sentence, and the CLI's JSON and the report carry the tokens."""
from __future__ import annotations

import math

import pytest
import torch

from iba_core.errors import UserError
from iba_core.text_side import TEXT_BETA_K, TextSideSettings, text_layer, text_side
from reference_impl import hook_count

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def image_x():
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(5))


def test_bits_per_token_are_m2ibs_formulas_by_hand(clip_net, image_x):
    s = TextSideSettings(steps=3, batch=4)
    got = text_side(clip_net, image_x, "a photo of a cat", s)
    model = clip_net.model
    name, block = text_layer(model)
    assert name == "text_model.encoder.layers.0"  # M2IB's 3/4 deep, one block before the last: block 0 of 2
    tokens = model._tokenizer(["a photo of a cat"], return_tensors="pt")
    ids, mask = tokens["input_ids"], tokens["attention_mask"]

    def embed(input_ids, attention_mask):
        e = model.get_text_features(input_ids=input_ids, attention_mask=attention_mask).pooler_output
        return e / e.norm(dim=-1, keepdim=True)

    with torch.no_grad():
        image = model.get_image_features(pixel_values=image_x).pooler_output
        image = image / image.norm(dim=-1, keepdim=True)
        captured = []
        handle = block.register_forward_hook(lambda _m, _i, out: captured.append(
            (out[0] if isinstance(out, tuple) else out).clone()))
        embed(ids, mask)
        handle.remove()
    r = captured[0]
    alpha = torch.full_like(r, 5.0, requires_grad=True)
    adam = torch.optim.Adam([alpha], lr=1.0)
    g = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.requires_grad_(False)

    def kl(lam):  # M2IB's scripts/iba.py: KL[N(λx, (1 − λ)²) ‖ N(0, 1)]
        return -0.5 * (1 + torch.log((1 - lam) ** 2) - (lam * r) ** 2 - (1 - lam) ** 2)

    for _ in range(s.steps):
        adam.zero_grad()
        lam = torch.sigmoid(alpha)
        z = lam * r + (1 - lam) * torch.randn((s.batch, *r.shape[1:]), generator=g)

        def swap(_m, _i, out, z=z):
            return (z,) + tuple(out[1:]) if isinstance(out, tuple) else z

        handle = block.register_forward_hook(swap)
        cos = (embed(ids.expand(s.batch, -1), mask.expand(s.batch, -1)) * image).sum(dim=-1)
        handle.remove()
        loss = TEXT_BETA_K * kl(lam).mean() - cos.mean()  # β on the mean: β·k = 0.1 on the sum
        loss.backward()
        last = kl(lam.detach())
        adam.step()
    with torch.no_grad():  # the similarity with the fitted bottleneck: one more noisy batch (the noise itself counts)
        lam = torch.sigmoid(alpha)
        z = lam * r + (1 - lam) * torch.randn((s.batch, *r.shape[1:]), generator=g)
        handle = block.register_forward_hook(lambda _m, _i, out: (z,) + tuple(out[1:]) if isinstance(out, tuple) else z)
        with_bottleneck = float((embed(ids.expand(s.batch, -1), mask.expand(s.batch, -1)) * image).sum(dim=-1).mean())
        handle.remove()
    assert got.similarity_with == pytest.approx(with_bottleneck, rel=1e-4, abs=1e-6)
    want = (last[0].sum(dim=-1) / math.log(2)).tolist()
    assert got.bits == pytest.approx(want, rel=1e-4, abs=1e-5)
    assert got.total_bits == pytest.approx(sum(want), rel=1e-4)
    assert got.tokens[0] == "<|startoftext|>" and not got.shown[0] and not got.shown[-1]
    assert [w for w, _ in got.words()] == ["a", "photo", "o", "f", "a", "cat"]  # the tiny vocabulary's pieces
    assert -1 <= got.similarity_with <= 1 and -1 <= got.similarity_without <= 1
    assert hook_count(model) == 0 and not model.training


def test_a_classifier_has_no_text_side(offline_model, chelsea_x):
    with pytest.raises(UserError, match="needs a CLIP model"):
        text_side(offline_model, chelsea_x, "a cat")
