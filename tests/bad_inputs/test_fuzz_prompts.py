"""Fuzzing CLIP text prompts (issue #40): any text typed in the prompt box (one prompt a line), given as --prompt
or --target, or as a prompt's target, gives prompts the tiny CLIP model answers for, or one sentence; never another
exception, whatever its characters (controls, bidi marks, emoji, 100,000 characters) do to the tokenizer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, strategies as st
from PIL import Image

from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, long_text, mutated, result_or_sentence
from iba_core.app.inputs import EXAMPLE_PROMPTS, prompts_from_text
from iba_core.app.prompt_search import search_prompt
from iba_core.errors import UserError
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


# ---- searching a run for a prompt -------------------------------------------------------------------------

#: The longest answer of a search for a prompt the run lacks: `missing_prompt_text` is a few sentences by design
#: (the prompts held, the command that adds this one, the form that does), with the prompt in it at most once in the
#: message and once in the command, so it is bounded by MAX_PROMPT_CHARS, not by what was typed.
MAX_SEARCH_ANSWER = 1_500 + 2 * MAX_PROMPT_CHARS


@pytest.fixture(scope="module")
def prompt_run(clip_folder, tmp_path_factory):
    """A finished folder run of the tiny CLIP model: 2 images, prompts "a cat" and "a dog", the gradient's maps (a
    bottleneck's fit would add seconds; the search reads the rows alike)."""
    from iba_core.methods import get_method
    from iba_core.networks import load_network
    from iba_core.runs import FolderSettings, finish_run, list_images, open_run, run_folder

    images = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(11)
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(images / f"img{i}.png")
    root, items = list_images(images)
    out = tmp_path_factory.mktemp("runs") / "run"
    run_folder(load_network(f"clip:{clip_folder}"), items,
               [get_method("gradient")], out, FolderSettings(prompts=("a cat", "a dog")), root=root)
    finish_run(out)
    return open_run(out)


@given(text=st.one_of(hostile_text(), mutated("a cat"), st.sampled_from(("A  CAT", "a dog", "a cat\u202e"))),
       method=st.one_of(st.none(), st.sampled_from(("gradient", "iba_0_1")), hostile_text(20)))
@example(text="a" * 100_000, method=None)  # was echoed whole, twice (the sentence and the command)
@example(text="a cat", method="\x00" * 1_000)  # the method was echoed whole
@example(text=" A  CAT ", method=None)
@fuzz_settings(examples=60)
def test_any_prompt_searched_in_a_run_ranks_its_images_or_says_why(prompt_run, text, method) -> None:
    try:
        found = search_prompt(prompt_run, text, method)
    except UserError as err:
        assert "Traceback" not in err.message and len(err.message) <= MAX_SEARCH_ANSWER, len(err.message)
        return
    assert found.prompt in ("a cat", "a dog") and len(found.rows) == 2
    if text == " A  CAT ":
        assert found.prompt == "a cat" and found.method == "gradient" and found.by == "p_target"
