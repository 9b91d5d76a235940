"""CLIP models with text prompts as targets (M2IB: Wang et al., NeurIPS 2023): a Hugging Face `CLIPModel` as a
`Network` whose outputs are the cosine similarities of the image with the prompts the user typed.

    net = load_network("clip:/path/to/folder")       # a folder `CLIPModel.save_pretrained` (and its tokenizer) wrote
    net = load_network("clip:openai/clip-vit-base-patch32")   # a hub id, where the hub is reachable
    net.set_prompts(["a cat", "a dog"]); net.prompt_index("a ruler")   # → 2 (added)
    net.model(x)                                       # (N, 3): cos(image embedding, each prompt's text embedding)

A folder holding a CLIP config.json (model_type "clip") given as a plain path is recognised as CLIP too
(`model_folders`). The model is transformers' own `CLIPModel` with its class swapped for a subclass that answers
`model(x)` with the cosines (no logit scale; `PromptAnswers`), so its module names and state-dict keys stay
transformers' (`vision_model.encoder.layers.9`); the layers offered are the vision encoder's blocks (ViT tokens
with a class token). The prompts are the network's "categories" and its head is "similarity" (`heads.py`):
the fitting term of the bottleneck is −cos(target), M2IB's, and "p(target)" is the cosine itself.

Text embeddings are computed once per prompt and kept with the model (the text encoder never runs during an
attribution). The prompts are no part of the network's key or weights id: the feature statistics of a vision
layer do not depend on them (`feature_stats` caches them per key, weights and layer).

Default layer: M2IB's, 3/4 deep (index 9 of 12 blocks), but at least one block before the last so the patch
tokens still reach the class token that CLIP pools. The default β·k for the similarity head is M2IB's β = 0.1
on the mean information (`heads.DEFAULT_BETA_K`).

Trust as for any Hugging Face model (`hf_models`): a config naming its own code (auto_map) is refused unless
code is allowed; the tokenizer is read as CLIP's tokenizer class, never through auto classes that could run code.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from ..errors import UserError
from ..trust import LOCAL, Trust, shown
from .network import Network
from .spec import NetworkSpec, UnknownModelError, derive_spec

PREFIX = "clip:"
#: transformers' model_type of a CLIPModel's config.json.
CLIP_MODEL_TYPE = "clip"
#: CLIP's own normalisation (transformers' OPENAI_CLIP_MEAN / OPENAI_CLIP_STD), used where a folder has no
#: preprocessor_config.json; with one, its numbers are read.
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
#: CLIPImageProcessor's defaults where a folder has none: resize the short side, centre crop, bicubic (PIL 3).
DEFAULT_RESAMPLE = 3
#: M2IB's bottleneck layer: block 9 of ViT-B/32's 12 (its `layer_idx = 9`), i.e. 3/4 deep.
M2IB_DEPTH = 9 / 12
#: The longest prompt kept, in characters (CLIP reads at most 77 tokens; longer text is truncated there).
MAX_PROMPT_CHARS = 300
#: The most prompts a network answers for at once (a server's users add prompts; each is one output).
MAX_PROMPTS = 1024
#: Text embeddings kept beyond the current prompts (oldest dropped first): 4,096 × 512 floats ≈ 8 MB for ViT-B.
MAX_KEPT_TEXTS = 4096
#: Files of a CLIP tokenizer (either the tokenizers JSON, or the BPE vocabulary and merges).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")


def is_clip_key(key) -> bool:
    """Whether a network key is `clip:FOLDER` or `clip:ORG/NAME`."""
    return isinstance(key, str) and key.startswith(PREFIX)


def is_clip_config(config: dict) -> bool:
    """Whether a config.json describes a CLIPModel (model_type "clip")."""
    return config.get("model_type") == CLIP_MODEL_TYPE


def is_clip(network) -> bool:
    """Whether `network` (a Network or a bare model) answers with similarities to text prompts."""
    return isinstance(getattr(network, "model", network), PromptAnswers)


def clean_prompt(text: object) -> str:
    """A prompt as kept: stripped, inner whitespace runs made one space; one sentence when it is empty or too
    long."""
    if not isinstance(text, str):
        raise UserError(f"A text prompt must be text, not {type(text).__name__}.")
    cleaned = " ".join(text.split())
    if not cleaned:
        raise UserError("The text prompt is empty; type what to look for, e.g. \"a dog\".")
    if len(cleaned) > MAX_PROMPT_CHARS:
        raise UserError(f"The text prompt is {len(cleaned)} characters long; keep it under {MAX_PROMPT_CHARS} (CLIP "
                        "reads at most 77 tokens).")
    return cleaned


def default_layer_index(blocks: int) -> int:
    """The default block (M2IB_DEPTH of the way, rounded), at least one block before the last: CLIP pools the
    class token of the last block, so a bottleneck on the last block's patch tokens would change nothing."""
    return max(0, min(round(M2IB_DEPTH * blocks), blocks - 2))


#: What a CLIP network without prompts says when asked for its outputs, and how each front end gives one.
NO_PROMPTS = "A CLIP model answers with its similarity to text prompts, and none is given yet."
NO_PROMPTS_CLI = "Give one: --prompt TEXT (attribute) or --target TEXT."
NO_PROMPTS_APP = "Type a prompt: what to look for, e.g. \"a dog\"."


def _cosines(model: nn.Module, image: torch.Tensor) -> torch.Tensor:
    """(N, P): the image embeddings (normalised here) against the model's current prompts' text embeddings."""
    table = model.prompt_embeddings
    if table.shape[0] == 0:
        raise UserError(NO_PROMPTS, cli_hint=NO_PROMPTS_CLI, app_hint=NO_PROMPTS_APP)
    image = image / image.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return image @ table.to(image.dtype).T


class PromptAnswers(nn.Module):
    """Mixed into transformers' CLIPModel (`as_prompt_model`): `model(x)` answers (N, P) cosines of the image
    embeddings with the current prompts' text embeddings.

    The text embeddings are a non-persistent buffer (moved with `.to`, copied with the model, never saved), one
    row per prompt, normalised; each prompt's embedding is computed once and kept in `_text_cache`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return _cosines(self, self.image_embeddings(x))

    def image_embeddings(self, x: torch.Tensor) -> torch.Tensor:
        """(N, D) normalised image embeddings of preprocessed images (what the cosines compare with the prompts;
        concept words embed crops with it, leaving the prompts as they are)."""
        image = self.get_image_features(pixel_values=x).pooler_output
        return image / image.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    @property
    def prompts(self) -> tuple[str, ...]:
        return tuple(self._prompts)

    def set_prompts(self, texts: Sequence[str]) -> None:
        """The prompts the model answers for, in order (duplicates after cleaning dropped); the text embeddings
        of new ones computed now."""
        cleaned = list(dict.fromkeys(clean_prompt(t) for t in texts))
        if len(cleaned) > MAX_PROMPTS:
            raise UserError(f"{len(cleaned):,} text prompts are more than the {MAX_PROMPTS:,} a CLIP model here "
                            "answers for at once; use fewer.")
        new = [t for t in cleaned if t not in self._text_cache]
        if new:
            for text, row in zip(new, self.text_embeddings(new)):
                self._text_cache[text] = row
        current = set(cleaned)
        stale = [t for t in self._text_cache if t not in current]  # oldest first (dicts keep insertion order)
        for text in stale[:max(0, len(stale) - MAX_KEPT_TEXTS)]:
            del self._text_cache[text]
        param = next(self.parameters())
        rows = [self._text_cache[t] for t in cleaned]
        table = (torch.stack(rows) if rows else torch.zeros(0, self.config.projection_dim)).to(param.device)
        # Swapped in place (.data), not reassigned: anything holding the buffer itself (a traced split of the
        # model) then reads the new prompts too.
        self.prompt_embeddings.data = table
        self._prompts = cleaned

    @torch.no_grad()
    def text_embeddings(self, texts: list[str]) -> torch.Tensor:
        """(len(texts), D) normalised text embeddings, on the CPU (kept there, moved with the table)."""
        max_length = int(getattr(self.config.text_config, "max_position_embeddings", 77))
        tokens = self._tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        param = next(self.parameters())
        was_training = self.training
        self.eval()
        try:
            embeds = self.get_text_features(input_ids=tokens["input_ids"].to(param.device),
                                            attention_mask=tokens["attention_mask"].to(param.device)).pooler_output
        finally:
            self.train(was_training)
        embeds = embeds.float()
        return (embeds / embeds.norm(dim=-1, keepdim=True).clamp_min(1e-12)).cpu()


class _VisionStem(nn.Module):
    """Image → the tokens entering the first block: the patch and position embeddings, then CLIP's pre-norm."""

    def __init__(self, vision: nn.Module):
        super().__init__()
        self.vision = vision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.vision.pre_layrnorm(self.vision.embeddings(x))


class _VisionBlock(nn.Module):
    """One encoder block as a stage: tokens → tokens (the vision tower uses no attention mask)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.block(tokens, None)
        return out[0] if isinstance(out, tuple) else out


class _PromptHead(nn.Module):
    """The last block's tokens → cosines with the prompts: the class token, post-norm, projection, normalised,
    against the model's current text embeddings (read at every call, so new prompts count at once)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.model
        return _cosines(model, model.visual_projection(model.vision_model.post_layernorm(tokens[:, 0])))


def vision_stages(model: nn.Module) -> list[tuple[str | None, nn.Module]]:
    """The model as an ordered stage list (`spec.Stages`): stem, each named block, the prompt head. Running them in
    order is `model(x)`; the Per-Sample Bottleneck then runs the blocks before its layer once and only those after
    it per step (transformers' CLIP cannot be cut with torch.fx)."""
    vision = model.vision_model
    blocks = [(f"vision_model.encoder.layers.{i}", _VisionBlock(block))
              for i, block in enumerate(vision.encoder.layers)]
    return [(None, _VisionStem(vision)), *blocks, (None, _PromptHead(model))]


@lru_cache(maxsize=None)
def _prompt_class(cls: type) -> type:
    """A subclass of a transformers CLIP model class answering `model(x)` with the prompts' cosines."""
    return type(cls.__name__, (PromptAnswers, cls), {"__module__": __name__,
                                                     "__doc__": f"{cls.__name__}, answering model(x) with cosines."})


def as_prompt_model(model: nn.Module, tokenizer) -> nn.Module:
    """`model` (transformers' CLIPModel) answering `model(x)` with cosines to its prompts (none yet), in place;
    the class is swapped rather than wrapped so module names and state-dict keys stay transformers' own."""
    model.__class__ = _prompt_class(type(model))
    model._tokenizer = tokenizer
    model._text_cache = {}
    model._prompts = []
    param = next(model.parameters())
    model.register_buffer("prompt_embeddings", torch.zeros(0, model.config.projection_dim, device=param.device),
                          persistent=False)
    return model


@dataclass
class ClipNetwork(Network):
    """A Network whose categories are its text prompts (`PromptAnswers`): `prompts`, `set_prompts`,
    `prompt_index`. The categories list is updated in place, so a holder of `network.categories` sees new
    prompts. Changing the prompts changes the network's outputs: callers sharing the network (the app's
    sessions) change them under the network's lock, like any other use of it."""

    @property
    def prompts(self) -> tuple[str, ...]:
        return self.model.prompts

    def set_prompts(self, texts: Sequence[str]) -> None:
        """The prompts to answer for, in order (text embeddings of new ones computed once)."""
        self.model.set_prompts(list(texts))
        self.categories[:] = list(self.model.prompts)

    def prompt_index(self, text: str) -> int:
        """The index of `text` (cleaned) among the prompts, appending it if missing."""
        cleaned = clean_prompt(text)
        prompts = list(self.prompts)
        if cleaned not in prompts:
            self.set_prompts(prompts + [cleaned])
            prompts.append(cleaned)
        return prompts.index(cleaned)

    def class_index(self, target: int | str) -> int:
        """A prompt's index: an int, or a prompt's text (added when new)."""
        if isinstance(target, str) and not target.strip().isdigit():
            return self.prompt_index(target)
        return super().class_index(target)


def vision_blocks(config) -> list[str]:
    """The vision encoder's blocks, by transformers' module names."""
    return [f"vision_model.encoder.layers.{i}" for i in range(int(config.vision_config.num_hidden_layers))]


def preprocessing_of_clip(processor: dict | None, config: dict) -> dict:
    """resize, crop, interpolation, mean and std from the folder's preprocessor_config.json, else
    CLIPImageProcessor's defaults for the vision config's image size (CLIP's mean and std, bicubic)."""
    from .hf_models import preprocessing_of

    vision = config.get("vision_config") or {}
    if processor is None:
        size = vision.get("image_size", 224)
        processor = {"size": {"shortest_edge": size}, "crop_size": {"height": size, "width": size},
                     "do_center_crop": True, "image_mean": list(CLIP_MEAN), "image_std": list(CLIP_STD),
                     "resample": DEFAULT_RESAMPLE}
    return preprocessing_of(processor, vision)


def size_floor(config: dict) -> int:
    """Parameters the vision and text configs imply at least (`model_size.config_floor` of each)."""
    from .model_size import config_floor

    return sum(config_floor(config.get(part) or {}) for part in ("vision_config", "text_config"))


def read_tokenizer(folder: Path, title: str):
    """CLIP's tokenizer from a folder (tokenizer.json, or vocab.json and merges.txt); one sentence when missing."""
    from transformers import CLIPTokenizer

    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise UserError(f"{shown(title)} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); save "
                        "CLIP's processor or tokenizer into the folder too (processor.save_pretrained(folder)).")
    try:
        return CLIPTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"Could not read the tokenizer of {shown(title)}: {shown(err, 160)}.") from None


def _pretrained(folder: Path, trust: Trust, title: str) -> nn.Module:
    """transformers' CLIPModel.from_pretrained (fp32, safetensors or weights_only), refusing missing weights."""
    import pickle

    from safetensors import SafetensorError
    from transformers import CLIPModel

    from .hf_models import _quiet
    from .state_files import WeightsMismatchError, damaged_safetensors_error, unsafe_pickle_error

    try:
        with _quiet(True):  # a local load takes a blink; transformers' bar would only clutter stderr
            model, info = CLIPModel.from_pretrained(str(folder), trust_remote_code=trust.code, local_files_only=True,
                                                    dtype=torch.float32, output_loading_info=True)
    except pickle.UnpicklingError:
        raise unsafe_pickle_error(folder) from None
    except SafetensorError:
        raise damaged_safetensors_error(folder) from None
    except (OSError, ValueError) as err:
        raise UserError(f"Could not load {shown(title)}: {shown(err, 200)}.") from None
    missing = list(info.get("missing_keys") or [])
    if missing:
        raise WeightsMismatchError(
            f"The checkpoint of {shown(title)} has no weights for {len(missing)} parameter(s) ("
            f"{', '.join(shown(k, 60) for k in missing[:3])}); it is no complete CLIP model.")
    return model


def load_clip_folder(folder: Path, config: dict, key: str, weights, weights_id: str, *, trust: Trust = LOCAL,
                     trust_pickle: bool = False, name: str | None = None) -> tuple[NetworkSpec, nn.Module, str, list]:
    """(spec, model answering cosines, weights id, prompts []) of a CLIP folder (`model_folders` has read and
    checked config.json and found the weights): weights "pretrained" (the folder's), "random" (seeded) or a
    state-dict file."""
    from transformers import CLIPConfig, CLIPModel

    from .hf_models import check_no_code, read_json
    from .model_size import ModelSize, WeightsCheck, build_seeded, check_size, refuse_if_too_large
    from .state_files import load_weights_file

    title = f"{name or folder.name} (CLIP, Hugging Face folder)"
    check_no_code(config, f"The model folder {shown(folder)}", trust)
    refuse_if_too_large(ModelSize(size_floor(config)), title, at_least=True)
    processor_file = folder / "preprocessor_config.json"
    processor = read_json(processor_file, "the image processor's config") if processor_file.is_file() else None
    prep = preprocessing_of_clip(processor, config)
    tokenizer = read_tokenizer(folder, title)
    try:
        clip_config = CLIPConfig.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"Could not read the CLIP config of {shown(title)}: {shown(err, 160)}.") from None
    if weights in (None, "pretrained"):
        check_size(lambda: CLIPModel(clip_config), title, input_size=prep["crop"], channels=prep["channels"])
        model = _pretrained(folder, trust, title)
    else:
        check = WeightsCheck.of(weights, trust_pickle)
        model = build_seeded(lambda: CLIPModel(clip_config), title=title, input_size=prep["crop"],
                             channels=prep["channels"], weights_check=check)
        weights_id = "random"
        if check is not None:
            weights_id = load_weights_file(model, weights, title, trust_pickle=trust_pickle)
    model = as_prompt_model(model.float().eval(), tokenizer)
    blocks = vision_blocks(model.config)
    model.set_prompts(["a photo"])  # the dry pass that finds the layers runs the whole model; no prompt stays
    try:
        spec = derive_spec(model, key, title, input_size=prep["crop"], layer_names=blocks,
                           default_layer=blocks[default_layer_index(len(blocks))], head="similarity",
                           stages=vision_stages, note="A CLIP model (Hugging Face): its outputs are the cosine "
                           "similarities of the image with the text prompts; preprocessing from its own "
                           "configuration.", **prep)
    finally:
        model.set_prompts([])
    return spec, model, weights_id, []


def _split_key(key: str) -> str:
    return key[len(PREFIX):] if is_clip_key(key) else str(key)


def check_key(key: str) -> None:
    """A clear error when `clip:REST` names neither a folder nor a hub id (loads nothing)."""
    rest = _split_key(key)
    if os.path.isdir(os.path.expanduser(rest)):
        return
    from .hf_models import repo_id

    try:
        repo_id(rest)
    except UnknownModelError:
        raise UnknownModelError(f"{shown(key)!r} names neither a folder nor a Hugging Face id; give clip:FOLDER (a "
                                "CLIPModel saved with save_pretrained, with its tokenizer) or clip:ORG/NAME, e.g. "
                                "clip:openai/clip-vit-base-patch32.") from None


#: The files of a hub CLIP checkpoint this project reads (the weights: the first of WEIGHTS found).
HUB_FILES = ("preprocessor_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
             "special_tokens_map.json")
HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def folder_of(key: str) -> str | None:
    """The folder `clip:FOLDER` names (None for `clip:ORG/NAME`); `sources` loads it through `model_folders`."""
    rest = _split_key(key)
    return rest if os.path.isdir(os.path.expanduser(rest)) else None


def load_clip_hub(key: str, weights="pretrained", *, trust: Trust = LOCAL,
                  trust_pickle: bool = False) -> tuple[NetworkSpec, nn.Module, str, list]:
    """(spec, model, weights id, prompts []) of `clip:ORG/NAME` (see the module docstring)."""
    check_key(key)
    return _load_hub(_split_key(key), weights, trust=trust, trust_pickle=trust_pickle)


def _load_hub(repo: str, weights, *, trust: Trust, trust_pickle: bool) -> tuple[NetworkSpec, nn.Module, str, list]:
    """A hub CLIP checkpoint: its files fetched into the hub cache (or found there offline), then read as a folder;
    its key `clip:ORG/NAME`, its weights id the snapshot's revision."""
    from .hf_models import check_no_code, read_json, repo_id
    from .hub import hub_file, hub_offline

    repo = repo_id(repo)
    offline = hub_offline()
    what = PREFIX + repo
    config_path = hub_file(repo, "config.json", what=what, offline=offline)
    config = read_json(config_path, "the model's config")
    check_no_code(config, what, trust)  # before anything else is fetched
    if not is_clip_config(config):
        raise UserError(f"{what} is no CLIP model (its config.json's model_type is "
                        f"{shown(config.get('model_type'), 40)!r}); load it as hf:{repo}.")
    for name in HUB_FILES:
        hub_file(repo, name, what=what, optional=True, offline=offline)
    if weights in (None, "pretrained"):
        found = None
        for name in HUB_WEIGHTS:
            found = hub_file(repo, name, what=what, optional=True, offline=offline)
            if found is not None:
                break
        if found is None:
            raise UserError(f"{what} has no model.safetensors or pytorch_model.bin to load.")
    weights_id = f"{repo.split('/')[-1]}@{config_path.parent.name[:12]}"
    return load_clip_folder(config_path.parent, config, what, weights, weights_id, trust=trust,
                            trust_pickle=trust_pickle, name=what)


__all__ = ["ClipNetwork", "PREFIX", "PromptAnswers", "as_prompt_model", "check_key", "clean_prompt", "is_clip",
           "folder_of", "is_clip_config", "is_clip_key", "load_clip_folder", "load_clip_hub"]
