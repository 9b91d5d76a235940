"""Fuzzing CLIP text prompts (issue #40): any text typed in the prompt box (one prompt a line), given as --prompt
or --target, or as a prompt's target, gives prompts the tiny CLIP model answers for, or one sentence; never another
exception, whatever its characters (controls, bidi marks, emoji, 100,000 characters) do to the tokenizer."""
from __future__ import annotations

from hypothesis import example, given, strategies as st

from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, long_text, mutated, result_or_sentence
from iba_core.app.inputs import EXAMPLE_PROMPTS, prompts_from_text
from iba_core.methods.base import check_target
from iba_core.methods.targets import PromptTarget
from iba_core.networks.clip_models import MAX_PROMPT_CHARS


def prompt_box_texts() -> st.SearchStrategy[str]:
    lines = st.lists(st.one_of(hostile_text(80), hostile_piece(), st.just("a photo of a cat"),
                               st.integers(250, 400).map(lambda n: "ab " * (n // 3))), max_size=8)
    return st.one_of(lines.map("\n".join), mutated("\n".join(EXAMPLE_PROMPTS)), long_text(),
                     st.integers(1, 3_000).map(lambda n: "p\n" * n))


@given(text=prompt_box_texts())
@example(text="\U0001f600" * 300)  # 300 characters, far more than 77 tokens
@example(text="\n".join(EXAMPLE_PROMPTS))
@fuzz_settings(examples=150)
def test_any_prompt_box_gives_prompts_or_one_sentence(text) -> None:
    prompts = result_or_sentence(prompts_from_text, text)
    if prompts is not None:
        assert prompts and all(p and p == " ".join(p.split()) and len(p) <= MAX_PROMPT_CHARS for p in prompts)
        assert len(set(prompts)) == len(prompts)
    if text == "\n".join(EXAMPLE_PROMPTS):
        assert prompts == list(EXAMPLE_PROMPTS)


@given(text=st.one_of(hostile_text(120), mutated("a photo of a dog"), st.just("\U0001f600" * 300),
                      st.sampled_from(("0", "9" * 5000, "²", "٣", "-1"))),
       others=st.lists(st.one_of(hostile_text(40), st.just("a cat")), max_size=3))
@example(text="a dog", others=["a cat"])
@fuzz_settings(examples=60)
def test_any_prompt_is_answered_by_the_clip_model_or_one_sentence(clip_net, text, others) -> None:
    """The prompts set on the tiny CLIP model (each embedded by its tokenizer and text tower) and a prompt
    target resolved against them."""
    if result_or_sentence(clip_net.set_prompts, others) is None:
        return
    target = result_or_sentence(check_target, clip_net, result_or_sentence(PromptTarget, text) or text)
    assert target is None or 0 <= target.index < len(clip_net.categories)
    if (text, others) == ("a dog", ["a cat"]):
        assert target.index == 1 and clip_net.prompts == ("a cat", "a dog")
