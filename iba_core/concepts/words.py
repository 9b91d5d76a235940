"""Words for concepts (issue #41, item 3), where a CLIP model is configured: the text prompts, a short built-in list
(`DEFAULT_WORDS`) plus the user's, that best match a concept's top crops, each with its score. Optional: nothing
else in the concepts package needs a CLIP model.

    concept_words(clip_net, crops, prompts=["a ruler"])           # [("a red square", 0.041), …], best first
    words_for_concepts(clip_net, {0: crops_0, 1: crops_1})       # {0: [(prompt, score), …], 1: […]}

**Score.** A prompt's raw score for a concept is the mean, over the concept's crops, of the cosine similarity of
the crop's CLIP image embedding with the prompt's text embedding (`clip_models`' cosines: CLIP's own similarity
without its logit scale). CLIP's cosines of any picture with any short prompt sit around 0.2–0.3, and a generic
prompt can top every concept; so by default (`relative=True`) the score is relative:

- several concepts in one call (`words_for_concepts`): the raw score minus the prompt's mean raw score over the
  call's concepts (each concept weighing the same). A prompt every concept matches equally scores 0 for each; the
  words ranked first are those that fit this concept more than the others, so they set the concepts apart (pass a
  class's concepts together to learn what distinguishes each of them within the class);
- one concept (`concept_words`, or one key): nothing to compare with, so the raw score minus the mean raw score
  of all the prompts for these crops: the order is the raw one, the number the margin above the average prompt.

`relative=False` gives the raw mean cosines. The numbers are similarities, not probabilities: a word ranked first
is the closest of the words offered, which need not be a good description (a concept outside every word's
meaning still gets words); the user adds the words of their domain.

The network is left as it was: the prompts it answers for, their embeddings and its categories are untouched (the
crops' and prompts' embeddings are computed beside them), no hooks; the passes run batched, without gradients, on
the network's device. A network shared by the app's sessions is used under its lock, like any other use of it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Hashable, Mapping, Sequence

import numpy as np
import torch

from ..errors import UserError
from ..model_state import frozen_eval
from ..networks.clip_models import MAX_PROMPTS, clean_prompt, is_clip
from ..trust import shown

if TYPE_CHECKING:
    from PIL import Image

#: The built-in prompts. A concept here is a visual pattern the layer responds to, so the words are patterns a
#: crop can show whatever the data set: textures, colours, parts, simple shapes, the marks that make shortcuts
#: (watermarks, text, logos, borders, rulers, coloured squares) and the backgrounds and contexts a class can lean
#: on. They are short (CLIP matches short phrases best) and few (every crop is compared with every word); the
#: user adds the words of their domain.
DEFAULT_WORDS: tuple[str, ...] = (
    # marks and artefacts: the usual shortcuts
    "a watermark", "text", "a logo", "a red square", "a border", "a frame", "a ruler", "a date stamp", "a label",
    # colours
    "red", "green", "blue", "yellow", "orange", "black", "white", "gray",
    # textures and materials
    "stripes", "spots", "a grid pattern", "fur", "feathers", "scales", "skin", "wood", "metal", "fabric",
    "a smooth surface", "a rough texture",
    # shapes and edges
    "a circle", "a straight edge", "a corner",
    # parts
    "an eye", "a face", "a hand", "a leg", "a wheel", "a wing", "a tail", "a head",
    # things
    "a person", "an animal", "a plant", "a building", "a vehicle", "a tool",
    # background and context
    "grass", "sky", "water", "snow", "sand", "a road", "a wall", "trees", "indoors", "a plain background",
    "a blurry background", "a shadow",
)
#: Words a call gives per concept by default.
TOP_WORDS = 5
#: Crops per forward pass of the image tower, and prompts per pass of the text tower.
CROP_BATCH = 32
TEXT_BATCH = 256


def _clip_network(network):
    """The network, when it is a CLIP network (a `Network` answering with cosines); else the sentence."""
    if not is_clip(network) or not hasattr(network, "preprocess"):
        spec = getattr(network, "spec", None)
        title = getattr(spec, "title", None) or type(getattr(network, "model", network)).__name__
        raise UserError(f"Words for concepts need a CLIP model (a network loaded as clip:FOLDER or clip:ORG/NAME); "
                        f"{shown(title, 80)} answers with classes, not with its similarity to text.",
                        cli_hint="Give a CLIP model: --model clip:FOLDER.",
                        app_hint="Choose a CLIP model to see words for the concepts.")
    return network


def prompt_list(prompts: Sequence[str] | str | None = ()) -> list[str]:
    """`DEFAULT_WORDS` then the user's prompts (each cleaned by `clean_prompt`, its sentence for a bad one),
    duplicates dropped; one prompt given as a plain string is one prompt, None none."""
    if prompts is None or isinstance(prompts, str):
        prompts = [] if prompts is None else [prompts]
    words = list(dict.fromkeys([*DEFAULT_WORDS, *(clean_prompt(p) for p in prompts)]))
    if len(words) > MAX_PROMPTS:
        raise UserError(f"{len(words):,} prompts are more than the {MAX_PROMPTS:,} words a concept is compared with "
                        "at once; use fewer.")
    return words


def _check_crops(key: Hashable, crops: Sequence) -> list:
    """The crops of one concept (key None: the only one) as a list of PIL images; a sentence for none, or for
    something else."""
    from PIL import Image

    what = "the concept" if key is None else f"concept {shown(key, 40)}"
    crops = list(crops) if not isinstance(crops, Image.Image) else [crops]
    if not crops:
        raise UserError(f"{what[0].upper()}{what[1:]} has no crops to find words for; give at least one image.")
    bad = next((c for c in crops if not isinstance(c, Image.Image)), None)
    if bad is not None:
        raise UserError(f"A crop of {what} is a {type(bad).__name__}, not an image; give its crops as PIL images.")
    return crops


def _text_table(model, prompts: list[str]) -> torch.Tensor:
    """(P, D) normalised text embeddings, on the CPU, computed beside the model's own prompts (never set)."""
    return torch.cat([model.text_embeddings(prompts[i:i + TEXT_BATCH]) for i in range(0, len(prompts), TEXT_BATCH)])


def _crop_table(network, crops: list) -> torch.Tensor:
    """(N, D) normalised image embeddings of the crops (the network's preprocessing), batched, on the CPU."""
    model, pre = network.model, network.preprocess
    device = next(model.parameters()).device
    rows = []
    with frozen_eval(model), torch.no_grad():
        for start in range(0, len(crops), CROP_BATCH):
            x = pre.normalise_batch([pre.crop(c) for c in crops[start:start + CROP_BATCH]])
            rows.append(model.image_embeddings(x.to(device)).float().cpu())
    return torch.cat(rows)


def raw_scores(clip_network, crops_by_concept: Mapping[Hashable, Sequence["Image.Image"]],
               prompts: Sequence[str] | str = ()) -> tuple[list[Hashable], list[str], np.ndarray]:
    """(concept keys, prompts, (K, P) raw scores): each concept's mean cosine of its crops with each prompt. Every
    prompt and every crop is embedded once."""
    network = _clip_network(clip_network)
    if not crops_by_concept:
        raise UserError("No concepts were given to find words for.")
    keys = list(crops_by_concept)
    groups = [_check_crops(k, crops_by_concept[k]) for k in keys]
    words = prompt_list(prompts)
    text = _text_table(network.model, words)
    image = _crop_table(network, [c for group in groups for c in group])
    cosines = (image @ text.T).double().numpy()  # (all crops, P)
    bounds = np.cumsum([0] + [len(g) for g in groups])
    means = np.stack([cosines[a:b].mean(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])
    return keys, words, means


def relative_scores(raw: np.ndarray) -> np.ndarray:
    """The module docstring's relative scores of a (K, P) raw table: minus each prompt's mean over the concepts
    (K ≥ 2), or minus the mean over the prompts (K = 1)."""
    return raw - (raw.mean(axis=0, keepdims=True) if raw.shape[0] >= 2 else raw.mean(axis=1, keepdims=True))


def _check_top(top: int) -> int:
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or top < 1:
        raise UserError(f"The number of words per concept must be a whole number of at least 1, not {shown(top, 20)}.")
    return int(top)


def words_for_concepts(clip_network, crops_by_concept: Mapping[Hashable, Sequence["Image.Image"]],
                       prompts: Sequence[str] | str = (), top: int = TOP_WORDS,
                       relative: bool = True) -> dict[Hashable, list[tuple[str, float]]]:
    """{concept: its `top` (prompt, score) pairs, best first} for several concepts at once: every prompt and every
    crop embedded once. The score is relative to the other concepts of the call by default (module docstring);
    ties keep the prompts' order (the built-in words, then the user's)."""
    top = _check_top(top)
    keys, words, raw = raw_scores(clip_network, crops_by_concept, prompts)
    scores = relative_scores(raw) if relative else raw
    out: dict[Hashable, list[tuple[str, float]]] = {}
    for key, row in zip(keys, scores):
        order = np.argsort(-row, kind="stable")[:top]
        out[key] = [(words[i], float(row[i])) for i in order]
    return out


def concept_words(clip_network, crops: Sequence["Image.Image"], prompts: Sequence[str] | str = (),
                  top: int = TOP_WORDS, relative: bool = True) -> list[tuple[str, float]]:
    """The `top` prompts (`DEFAULT_WORDS` plus the user's, cleaned, no duplicates) that best match one concept's
    crops (PIL images, any size: the network's preprocessing crops them), best first, each with its score: the
    mean cosine minus the mean over all the prompts (relative), or the mean cosine itself (relative=False)."""
    return words_for_concepts(clip_network, {None: crops}, prompts, top, relative)[None]


__all__ = ["DEFAULT_WORDS", "TOP_WORDS", "concept_words", "prompt_list", "raw_scores", "relative_scores",
           "words_for_concepts"]
