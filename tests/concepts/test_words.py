"""Words for concepts (`iba_core.concepts.words`): the prompts matching a concept's crops, scored as mean cosines
through the tiny random CLIP model of `clip_fixtures`, checked against transformers' own CLIPModel by hand."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iba_core.concepts.words import DEFAULT_WORDS, concept_words, prompt_list, words_for_concepts
from iba_core.errors import UserError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))  # the tiny CNN card of the run tests


def noise_crops(count: int, seed: int, sizes=((40, 48), (32, 32), (50, 36))) -> list[Image.Image]:
    """`count` random RGB crops of assorted sizes (the network's preprocessing resizes and crops them)."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (*sizes[i % len(sizes)][::-1], 3), dtype=np.uint8))
            for i in range(count)]


@pytest.fixture(scope="module")
def plain(clip_folder):
    """transformers' own CLIPModel and tokenizer from the folder, as a person would use them."""
    from transformers import CLIPModel, CLIPTokenizer

    return CLIPModel.from_pretrained(str(clip_folder)).eval(), CLIPTokenizer.from_pretrained(str(clip_folder))


def image_rows(clip_net, plain, crops) -> torch.Tensor:
    """(N, D) normalised image embeddings by hand: the network's preprocessing image by image, transformers' model."""
    model, _ = plain
    x = torch.cat([clip_net.preprocess(c) for c in crops])
    with torch.no_grad():
        image = model.get_image_features(pixel_values=x).pooler_output
    return torch.nn.functional.normalize(image, dim=-1)


def hand_scores(clip_net, plain, crops, prompts) -> np.ndarray:
    """(P,) the mean over the crops of cos(image embedding, text embedding), by transformers' own model."""
    model, tokenizer = plain
    tokens = tokenizer(prompts, padding=True, truncation=True, max_length=24, return_tensors="pt")
    with torch.no_grad():
        text = torch.nn.functional.normalize(model.get_text_features(**tokens).pooler_output, dim=-1)
    return (image_rows(clip_net, plain, crops) @ text.T).mean(0).double().numpy()


def test_scores_are_the_mean_cosines_by_hand_raw_and_relative(clip_net, plain):
    crops = {"mark": noise_crops(3, seed=1), "fur": noise_crops(4, seed=2)}
    words = prompt_list(["a blue tag"])
    raw = {k: hand_scores(clip_net, plain, c, words) for k, c in crops.items()}
    assert np.ptp(raw["mark"]) > 1e-3  # the prompts do differ, so an order is tested below

    got = words_for_concepts(clip_net, crops, ["a blue tag"], top=len(words), relative=False)
    for key in crops:
        assert len(got[key]) == len(words)
        scores = dict(got[key])
        np.testing.assert_allclose([scores[w] for w in words], raw[key], rtol=1e-4, atol=1e-6)
        # best first, ties in the prompts' order: the hand-computed ranking
        assert [w for w, _ in got[key]] == [words[i] for i in np.argsort(-raw[key], kind="stable")]

    # relative (default): minus the prompt's mean over the call's concepts
    rel = words_for_concepts(clip_net, crops, ["a blue tag"], top=3)
    baseline = (raw["mark"] + raw["fur"]) / 2
    for key in crops:
        want = raw[key] - baseline
        order = np.argsort(-want, kind="stable")[:3]
        assert [w for w, _ in rel[key]] == [words[i] for i in order]
        np.testing.assert_allclose([s for _, s in rel[key]], want[order], rtol=1e-4, atol=1e-6)

    # one concept: minus the mean over the prompts (the raw order, a margin above the average prompt)
    one = concept_words(clip_net, crops["fur"], ["a blue tag"], top=4)
    order = np.argsort(-raw["fur"], kind="stable")[:4]
    assert [w for w, _ in one] == [words[i] for i in order]
    np.testing.assert_allclose([s for _, s in one], (raw["fur"] - raw["fur"].mean())[order], rtol=1e-4, atol=1e-6)


def test_a_prompt_every_concept_matches_alike_scores_zero_relative(clip_net):
    crops = noise_crops(3, seed=3)
    got = words_for_concepts(clip_net, {"a": crops, "b": list(crops)}, top=len(DEFAULT_WORDS))
    assert all(abs(score) < 1e-9 for key in "ab" for _, score in got[key])
    raw = words_for_concepts(clip_net, {"a": crops, "b": crops}, top=3, relative=False)
    assert max(abs(score) for _, score in raw["a"]) > 1e-3  # the raw cosines are not zero


def plant(monkeypatch, model, prompt: str, direction: torch.Tensor) -> None:
    """The model's text embedding of `prompt` made the unit vector along `direction` (the others its own)."""
    original = model.text_embeddings

    def planted(texts):
        rows = original(texts)
        for i, text in enumerate(texts):
            if text == prompt:
                rows[i] = direction / direction.norm()
        return rows

    monkeypatch.setattr(model, "text_embeddings", planted)


def test_a_prompt_whose_text_matches_the_crops_ranks_first(clip_net, plain, monkeypatch):
    """The text embedding of the user's "a blue tag" is made the direction of the crops' mean image embedding m:
    by Cauchy-Schwarz no unit text vector has a higher mean cosine with them (m·t ≤ ‖m‖), so it must rank first,
    with ‖m‖ as its raw score. Among two concepts, relative, the direction that wins is m_a − m_b (its score
    ‖m_a − m_b‖/2)."""
    crops, other = noise_crops(5, seed=4), noise_crops(5, seed=5)
    mean, other_mean = image_rows(clip_net, plain, crops).mean(0), image_rows(clip_net, plain, other).mean(0)
    plant(monkeypatch, clip_net.model, "a blue tag", mean)
    raw = concept_words(clip_net, crops, ["a blue tag"], top=3, relative=False)
    assert raw[0][0] == "a blue tag" and raw[0][1] == pytest.approx(float(mean.norm()), rel=1e-4)
    assert raw[1][1] < raw[0][1] - 1e-3
    assert concept_words(clip_net, crops, ["a blue tag"], top=1)[0][0] == "a blue tag"
    monkeypatch.undo()

    plant(monkeypatch, clip_net.model, "a blue tag", mean - other_mean)
    by = words_for_concepts(clip_net, {"planted": crops, "other": other}, ["a blue tag"], top=len(DEFAULT_WORDS) + 1)
    assert by["planted"][0] == ("a blue tag", pytest.approx(float((mean - other_mean).norm()) / 2, rel=1e-4))
    assert by["other"][-1][0] == "a blue tag"  # the same word is the other concept's last


def test_user_prompts_are_cleaned_added_once_and_bad_ones_refused(clip_net):
    words = prompt_list(["  a   blue  tag ", "a watermark", "a blue tag"])
    assert words == [*DEFAULT_WORDS, "a blue tag"]  # cleaned, no duplicates, a built-in word not repeated
    assert prompt_list("a green tag") == [*DEFAULT_WORDS, "a green tag"]  # a plain string is one prompt
    assert prompt_list(None) == prompt_list(()) == list(DEFAULT_WORDS)
    got = concept_words(clip_net, noise_crops(2, seed=6), ["  a   blue  tag "], top=1000)
    assert [w for w, _ in got].count("a blue tag") == 1 and len(got) == len(DEFAULT_WORDS) + 1
    with pytest.raises(UserError, match="The text prompt is empty"):
        concept_words(clip_net, noise_crops(1, seed=6), ["a cat", "   "])
    with pytest.raises(UserError, match="characters long; keep it under 300"):
        concept_words(clip_net, noise_crops(1, seed=6), ["x" * 301])
    with pytest.raises(UserError, match="A text prompt must be text, not int"):
        concept_words(clip_net, noise_crops(1, seed=6), [3])


def test_the_network_is_left_as_it_was_and_each_prompt_and_crop_embedded_once(clip_net, monkeypatch):
    from iba_core.concepts import words as words_module

    clip_net.set_prompts(["a cat", "a dog"])
    model = clip_net.model
    before = (clip_net.prompts, list(clip_net.categories), model.prompt_embeddings.clone(), dict(model._text_cache))
    flags = [(m.training, len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()]
    text_rows, image_calls = [], []
    text, image = model.text_embeddings, model.image_embeddings
    monkeypatch.setattr(model, "text_embeddings", lambda texts: text_rows.extend(texts) or text(texts))
    monkeypatch.setattr(model, "image_embeddings", lambda x: image_calls.append(len(x)) or image(x))
    monkeypatch.setattr(words_module, "CROP_BATCH", 2)
    crops = {0: noise_crops(3, seed=7), 1: noise_crops(2, seed=8)}
    words_for_concepts(clip_net, crops, ["a blue tag"])
    assert sorted(text_rows) == sorted(prompt_list(["a blue tag"]))  # every prompt once
    assert image_calls == [2, 2, 1]  # every crop once, in batches across the concepts
    monkeypatch.undo()
    assert clip_net.prompts == before[0] == ("a cat", "a dog") and clip_net.categories == before[1]
    torch.testing.assert_close(model.prompt_embeddings, before[2], rtol=0, atol=0)
    assert list(model._text_cache) == list(before[3])  # the defaults were not cached as the network's prompts
    assert [(m.training, len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()] == flags
    assert not any(p.grad is not None for p in model.parameters())
    clip_net.set_prompts([])


def test_a_network_that_is_not_clip_gets_one_sentence(tmp_path, tiny_net):
    from run_fixtures import load_card, write_card

    card_net = load_card(write_card(tmp_path / "card", ["apple", "banana"]))
    for network in (card_net, tiny_net):
        with pytest.raises(UserError, match=r"^Words for concepts need a CLIP model \(a network loaded as "
                                            r"clip:FOLDER or clip:ORG/NAME\); .* answers with classes"):
            concept_words(network, noise_crops(2, seed=9))


def test_no_crops_or_no_images_get_one_sentence(clip_net):
    with pytest.raises(UserError, match="^The concept has no crops to find words for"):
        concept_words(clip_net, [])
    with pytest.raises(UserError, match="^No concepts were given"):
        words_for_concepts(clip_net, {})
    with pytest.raises(UserError, match="^Concept 3 has no crops to find words for"):
        words_for_concepts(clip_net, {2: noise_crops(1, seed=10), 3: []})
    with pytest.raises(UserError, match="^A crop of the concept is a ndarray, not an image"):
        concept_words(clip_net, [np.zeros((8, 8, 3))])
    with pytest.raises(UserError, match="at least 1, not 0"):
        concept_words(clip_net, noise_crops(1, seed=10), top=0)
