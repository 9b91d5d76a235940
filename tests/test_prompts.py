"""Text prompts as targets (M2IB, Wang et al. 2023): the prompt target, the similarity head, the bottleneck's loss
on a tiny random CLIP model checked by hand, several prompts at once, and `attribute --prompt`."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from iba_core.errors import UserError
from iba_core.methods.targets import ClassTarget, PromptTarget


@pytest.fixture(scope="module")
def image_x():
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def noise_stats(clip_net):
    """The default layer's statistics from a few seeded random images (no photos, no cache)."""
    from iba_core.feature_stats import FeatureStats, estimate_stats

    layer = clip_net.spec.default_layer
    batches = [torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(9))]
    mean, std, n = estimate_stats(clip_net.prefix(layer), batches)
    return FeatureStats(mean, std, n, clip_net.key, clip_net.weights_id, layer, "random noise")


def test_a_prompt_target_is_cleaned_and_an_empty_one_refused():
    assert PromptTarget("  a   cat ").text == "a cat"
    for empty in ("", "   \n"):
        with pytest.raises(UserError, match="empty"):
            PromptTarget(empty)
    with pytest.raises(UserError, match="under 300"):
        PromptTarget("a" * 301)


def test_check_target_resolves_prompts_on_a_clip_network_only(clip_net):
    from iba_core.methods.base import PROMPTS_NEED_CLIP, check_target
    from iba_core.networks import load_network

    clip_net.set_prompts(["a cat", "a dog"])
    assert check_target(clip_net, PromptTarget("a dog")) == ClassTarget(1)  # an existing prompt
    assert check_target(clip_net, PromptTarget("a ruler ")) == ClassTarget(2)  # a new one, appended
    assert clip_net.prompts == ("a cat", "a dog", "a ruler") and clip_net.categories == list(clip_net.prompts)
    assert check_target(clip_net, 0) == ClassTarget(0)
    with pytest.raises(UserError, match=r"out of range 0…2"):
        check_target(clip_net, 3)
    classifier = load_network("resnet50", weights="random")
    with pytest.raises(UserError) as err:
        check_target(classifier, PromptTarget("a cat"))
    assert str(err.value) == PROMPTS_NEED_CLIP
    assert "need a CLIP model" in PROMPTS_NEED_CLIP and "explain a class instead" in PROMPTS_NEED_CLIP


def test_the_similarity_head_by_hand():
    from iba_core.heads import (DEFAULT_BETA_K, PROBABILITY_NOTES, default_beta_k, predicted, probabilities,
                                target_nll)

    cos = torch.tensor([[0.2, -0.1, 0.3], [0.05, 0.4, -0.2]])
    labels = torch.tensor([2, 0])
    assert float(target_nll(cos, labels, "similarity")) == pytest.approx(-(0.3 + 0.05) / 2, rel=1e-6)
    torch.testing.assert_close(probabilities(cos, "similarity"), cos)  # the cosines themselves
    assert predicted(cos, "similarity").tolist() == [2, 1]
    assert "not a probability" in PROBABILITY_NOTES["similarity"]
    assert default_beta_k("similarity") == DEFAULT_BETA_K["similarity"] == 0.1  # M2IB's β on the mean KL
    assert default_beta_k("softmax") == 10.0


def test_one_step_of_the_bottleneck_by_hand_is_m2ibs_loss(clip_net, clip_folder, image_x):
    """M2IB's loss, L = β·mean KL − mean cos, with its N(0, 1) prior (statistics μ = 0, σ = 1) and no smoothing:
    this project's L = −cos + β·k/k·ΣKL with β·k = 0.1 is the same number, recomputed here from the noisy
    features the bottleneck fed the rest of the network (captured on their way into the next block)."""
    from transformers import CLIPModel

    from iba_core.feature_stats import FeatureStats
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    clip_net.set_prompts(["a cat", "a dog"])
    layer = clip_net.spec.default_layer  # vision_model.encoder.layers.2
    index = int(layer.rsplit(".", 1)[1])
    shape = (17, 32)  # 4×4 patches + the class token, 32 channels
    prior = FeatureStats(torch.zeros(shape), torch.ones(shape), 1, clip_net.key, clip_net.weights_id, layer, "N(0,1)")
    settings = BottleneckSettings(beta_k=0.1, steps=1, batch=4, sigma=0.0, precision="fp32", seed=3)
    captured = []
    after = clip_net.model.vision_model.encoder.layers[index + 1]

    def grab(_module, args, kwargs):
        tokens = args[0] if args else kwargs["hidden_states"]
        if not isinstance(tokens, torch.fx.Proxy):  # (the suffix is traced once, for BatchNorms to fold)
            captured.append(tokens.detach().clone())

    handle = after.register_forward_pre_hook(grab, with_kwargs=True)
    steps = []
    try:
        PerSampleBottleneck.for_network(clip_net, layer, prior, settings).attribute(image_x, 1, steps.append)
    finally:
        handle.remove()
    z = next(c for c in captured if c.shape[0] == settings.batch)  # the step's noisy batch
    # By hand: R, λ = σ(α₀), the KL against N(0, 1), and the cosine of each noisy copy with "a dog".
    plain = CLIPModel.from_pretrained(str(clip_folder)).eval()
    with torch.no_grad():
        hidden = plain.vision_model(pixel_values=image_x, output_hidden_states=True).hidden_states
        r = hidden[index + 1][0]  # hidden_states[0] is the embeddings' output
        lam = torch.sigmoid(torch.tensor(settings.init_alpha))
        mu, var = lam * r, (1 - lam) ** 2
        kl = -0.5 * (1 + torch.log(var) - mu**2 - var)  # M2IB's closed form (scripts/iba.py: _calc_capacity)
        noise = (z - lam * r) / (1 - lam)  # the ε the bottleneck drew
        rest = z
        for block in plain.vision_model.encoder.layers[index + 1:]:
            out = block(rest, None)
            rest = out[0] if isinstance(out, tuple) else out
        pooled = plain.vision_model.post_layernorm(rest[:, 0])
        image = plain.visual_projection(pooled)
        text = clip_net.model.prompt_embeddings[1]
        cos = torch.nn.functional.cosine_similarity(image, text[None], dim=-1)
    step = steps[0]
    assert step.ce == pytest.approx(float(-cos.mean()), rel=1e-4, abs=1e-6)
    assert step.p_target == pytest.approx(float(cos.mean()), rel=1e-4, abs=1e-6)
    assert step.info == pytest.approx(float(kl.sum()), rel=1e-4)
    m2ib = 0.1 * float(kl.mean()) - float(cos.mean())
    assert step.ce + step.beta_info == pytest.approx(m2ib, rel=1e-4, abs=1e-6)
    assert abs(float(noise.mean())) < 0.1 and float(noise.std()) == pytest.approx(1.0, abs=0.1)  # ε ~ N(0, 1)


def test_several_prompts_at_once_give_their_own_maps(clip_net, image_x, noise_stats):
    from iba_core.methods import get_method

    clip_net.set_prompts(["a cat"])
    method = get_method("iba_10", beta_k=0.1, stats=noise_stats, steps=3, batch=4, precision="fp32")
    maps = method.attribute_batch(clip_net, image_x.expand(3, -1, -1, -1),
                                  [PromptTarget("a cat"), PromptTarget("a dog"), PromptTarget("a watermark")])
    assert clip_net.prompts == ("a cat", "a dog", "a watermark")  # the new prompts were added
    values = [m.values for m in maps]
    assert all(v.shape == (32, 32) and np.isfinite(v).all() and v.sum() > 0 for v in values)
    # each as it would be alone (the batch fits one bottleneck per image) ...
    alone = method.attribute(clip_net, image_x, PromptTarget("a dog"))
    rounding = float(np.abs(alone.values - values[1]).max())
    np.testing.assert_allclose(alone.values, values[1], rtol=1e-4, atol=1e-5)
    # ... and the prompts' maps differ far beyond that (a random tiny text tower gives similar text embeddings, so
    # the maps are alike, but not equal)
    for a, b in ((0, 1), (1, 2), (0, 2)):
        assert float(np.abs(values[a] - values[b]).max()) > max(100 * rounding, 1e-4)
    assert maps[1].extra["p_without"] == pytest.approx(float(clip_net.model(image_x)[0, 1]), rel=1e-4)


def test_gradient_methods_explain_the_cosine(clip_net, image_x):
    from iba_core.methods import get_method

    clip_net.set_prompts(["a cat", "a dog"])
    saliency = get_method("saliency")
    a = saliency.attribute(clip_net, image_x, PromptTarget("a cat")).values
    b = saliency.attribute(clip_net, image_x, PromptTarget("a dog")).values
    x = image_x.clone().requires_grad_(True)
    clip_net.model(x)[0, 1].backward()
    by_hand = x.grad.abs().amax(dim=1)[0].numpy()
    np.testing.assert_allclose(b, by_hand, rtol=1e-4, atol=1e-7)
    assert not np.allclose(a, b)


def test_per_sample_notes_speak_of_prompts():
    from iba_core.per_sample import target_note

    assert target_note(0.12, 0.3, True, "similarity") == ""  # no recognition threshold for a cosine
    note = target_note(0.12, 0.3, False, "similarity")
    assert "Another prompt is more similar" in note and "0.120" in note and "%" not in note


def test_attribute_writes_one_map_per_prompt(clip_folder, tmp_path, capsys, monkeypatch):
    from PIL import Image

    from iba_core.cli import main

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("IBA_STATS_SAMPLES", "4")
    image = tmp_path / "img.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(image)
    out = tmp_path / "maps" / "map.npy"
    code = main(["attribute", str(image), "--model", f"clip:{clip_folder}", "--prompt", "a cat", "--prompt", "a dog",
                 "--steps", "2", "--batch", "2", "--n", "4", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["prompt"] for line in lines] == ["a cat", "a dog"]
    assert all(line["head"] == "similarity" and line["beta_k"] == 0.1 for line in lines)  # M2IB's default
    files = [tmp_path / "maps" / "map_0_a-cat.npy", tmp_path / "maps" / "map_1_a-dog.npy"]
    assert [line["out"] for line in lines] == [str(f) for f in files]
    maps = [np.load(f) for f in files]
    assert all(m.shape == (32, 32) for m in maps) and not np.allclose(maps[0], maps[1])
    assert sum(math.isclose(m.sum(), line["total_bits"] - line["unlocated_bits"], rel_tol=1e-3)
               for m, line in zip(maps, lines)) == 2
    # which words carry the information (M2IB's text side): the prompt's own tokens with their bits
    for line, words in zip(lines, (["a", "cat"], ["a", "dog"])):
        text = line["text_side"]
        assert [t["token"] for t in text["tokens"]] == words and all(t["bits"] >= 0 for t in text["tokens"])
        assert text["settings"]["prior"] == "standard_normal" and text["settings"]["beta_k"] == 0.1
    # M2IB as its authors run it: the standard-normal prior, no statistics
    code = main(["attribute", str(image), "--model", f"clip:{clip_folder}", "--prompt", "a cat", "--method", "m2ib",
                 "--steps", "2", "--batch", "2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    line = json.loads(captured.out.strip())
    assert line["method"] == "m2ib" and line["stats_samples"] == 0 and line["beta_k"] == 0.1
    # --prompt and --target exclude each other; a classifier refuses prompts in one sentence
    with pytest.raises(SystemExit):
        main(["attribute", str(image), "--model", f"clip:{clip_folder}", "--prompt", "a cat", "--target", "0"])
    assert main(["attribute", str(image), "--model", "resnet50", "--random-weights", "--prompt", "a cat",
                 "--n", "4"]) == 1
    assert "Text prompts need a CLIP model" in capsys.readouterr().err


def test_a_falling_similarity_is_never_called_a_lost_class():
    """The lost-class thresholds are probabilities' (p < 1 %, < a tenth of p): on cosines they would misfire."""
    from iba_core.per_sample import bottleneck_lost_class

    assert bottleneck_lost_class(0.2, 0.005)  # as probabilities: lost
    assert not bottleneck_lost_class(0.2, 0.005, "similarity")  # a cosine of 0.2 falling to 0.005
    assert not bottleneck_lost_class(-0.1, -0.3, "similarity")
    assert bottleneck_lost_class(0.2, 0.005, "sigmoid")
