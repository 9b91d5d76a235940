"""A local model folder given as a path: how an expert brings a fine-tuned timm or Hugging Face model from another
machine, with no card and no code.

The folder's config.json says which layout it is:

- timm's (`timm.models.push_to_hub.save_for_hf` / `push_to_hub`): config.json with "architecture" (and
  num_classes, model_args, pretrained_cfg with preprocessing and label names), model.safetensors
  (`timm_models.load_timm_folder`);
- transformers' (`model.save_pretrained`): config.json with "model_type" (and id2label; problem_type
  "multi_label_classification" gives a sigmoid head, `hf_models.head_of_config`), model.safetensors, optionally
  preprocessor_config.json (`hf_models.load_hf_folder`);
- a CLIP model's (`CLIPModel.save_pretrained` and its processor's or tokenizer's): config.json with model_type
  "clip" (text_config, vision_config), model.safetensors, the tokenizer's files, optionally
  preprocessor_config.json (`clip_models.load_clip_folder`: text prompts as targets).

A folder that is neither is one sentence saying what each layout holds. The network's key is `folder:<name>`; its
weights id is a hash of the weights file, so statistics are cached per weights. The sizes in the config are
checked before anything is built (as a card's [arch_args]: `card_format.check_builder_args`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from torch import nn

from ..errors import UserError
from ..trust import LOCAL, Trust, check_server_path, shown
from .card_format import MAX_CLASSES, ModelCardError, check_builder_args
from .spec import NetworkSpec
from .state_files import peek_state, weights_hash

FOLDER_PREFIX = "folder:"
#: Sizes in a transformers config that the model allocates from (checked before it is built).
HF_SIZE_ENTRIES = ("image_size", "patch_size", "num_channels", "hidden_size", "hidden_sizes", "intermediate_size",
                   "num_hidden_layers", "num_attention_heads", "depths", "embed_dim", "num_stages")
#: The weights file of each layout, in the order they are looked for (a .bin is read with weights_only).
WEIGHTS_FILES = {"timm": ("model.safetensors", "pytorch_model.bin"),
                 "transformers": ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")}
WEIGHTS_FILES["clip"] = WEIGHTS_FILES["transformers"]
#: The largest weights index read: transformers' index of a 1,000-tensor model is about 100 kB.
MAX_INDEX_BYTES = 16 * 2**20
LAYOUTS = ("timm's (save_for_hf: config.json with \"architecture\", model.safetensors) or transformers' "
           "(save_pretrained: config.json with \"model_type\", model.safetensors)")


class FolderError(UserError):
    """A model folder that cannot be used; the message is one sentence for users."""


def is_folder_key(key) -> bool:
    """Whether a network key names an existing folder (a local model folder)."""
    return isinstance(key, (str, os.PathLike)) and os.path.isdir(os.path.expanduser(os.fspath(key)))


def folder_key(folder: Path) -> str:
    """The network key of a model folder: `folder:<its name>`."""
    return FOLDER_PREFIX + folder.name


def weights_in(folder: Path, names: tuple[str, ...]) -> Path | None:
    """The first of `names` that is a file in `folder`."""
    return next((folder / n for n in names if (folder / n).is_file()), None)


def read_folder(key: str | os.PathLike, trust: Trust = LOCAL) -> tuple[Path, Literal["timm", "transformers", "clip"],
                                                                         dict]:
    """(folder, layout, config.json) of a model folder, its sizes checked; else one sentence saying what is wrong."""
    from .hf_models import read_json

    folder = check_server_path(Path(os.fspath(key)).expanduser(), trust, what="model folder")
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FolderError(f"The folder {shown(key)} holds no config.json, so it is no model folder; a model folder is "
                          f"{LAYOUTS}.")
    config = read_json(config_file, "the model folder's config")
    if config.get("model_type") == "clip":  # a CLIPModel: its sizes are in its vision and text configs
        layout = "clip"
        for part in ("vision_config", "text_config"):
            sizes = config.get(part) or {}
            if not isinstance(sizes, dict):
                raise FolderError(f"In the model folder {shown(key)}, config.json's {part} is not an object.")
            _check_sizes(folder, {k: sizes[k] for k in HF_SIZE_ENTRIES if k in sizes}, key)
    elif "model_type" in config:
        layout = "transformers"
        labels = config.get("id2label") or {}
        if len(labels) > MAX_CLASSES:
            raise FolderError(f"The model folder {shown(key)} names {len(labels):,} classes, more than the "
                              f"{MAX_CLASSES:,} a network here may have.")
        _check_sizes(folder, {k: config[k] for k in HF_SIZE_ENTRIES if k in config}, key)
    elif isinstance(config.get("architecture"), str):
        layout = "timm"
        args = config.get("model_args") or {}
        if not isinstance(args, dict):
            raise FolderError(f"In the model folder {shown(key)}, config.json's model_args is not an object.")
        _check_sizes(folder, {"num_classes": config.get("num_classes", 1), "model_args": args}, key)
    else:
        raise FolderError(f"The config.json in {shown(key)} names neither a timm architecture nor a transformers "
                          f"model_type, so the folder is no model folder; a model folder is {LAYOUTS}.")
    return folder, layout, config


def _check_sizes(folder: Path, sizes: dict, key) -> None:
    """The config's sizes within a card's [arch_args] bounds (`card_format.check_builder_args`), as a FolderError."""
    try:
        check_builder_args(folder, sizes, source=f"the model folder {shown(key)}", entry="config.json")
    except ModelCardError as err:
        raise FolderError(err.message) from None


def shard_files(folder: Path, index: Path) -> list[Path]:
    """The shard files a `model.safetensors.index.json` names (its weight_map's values), each a file inside `folder`
    (symlinks resolved); else one sentence: an index never leads a load out of its folder."""
    from .hf_models import read_json

    if index.stat().st_size > MAX_INDEX_BYTES:
        raise FolderError(f"The weights index {shown(index)} is larger than {MAX_INDEX_BYTES // 2**20} MB, so it is "
                          "no index transformers wrote.")
    weight_map = read_json(index, "the weights index").get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FolderError(f"The weights index {shown(index)} has no weight_map of tensor names to shard files.")
    root = folder.resolve()
    shards = []
    for name in sorted(set(weight_map.values())):
        shard = (folder / name).resolve()
        if Path(name).is_absolute() or shard.parent != root:
            raise FolderError(f"The weights index {shown(index)} names the shard {shown(name, 60)} outside its folder; "
                              "shards must be files beside the index.")
        if not shard.is_file():
            raise FolderError(f"The weights index {shown(index)} names the shard {shown(name, 60)}, which is not in "
                              "the folder.")
        shards.append(shard)
    return shards


def check_weights_files(folder: Path, found: Path, *, trust_pickle: bool = False) -> None:
    """Refuse a folder's weights file that is damaged (a safetensors file whose header lies or is no JSON), holds
    pickled objects, or is an index naming shards outside the folder, with the sentence a `--weights` file gets
    (`state_files.peek_state`); reads headers only, no tensor data."""
    files = shard_files(folder, found) if found.name.endswith(".index.json") else [found]
    for file in files:
        peek_state(file, trust_pickle=trust_pickle)


def load_folder(key: str | os.PathLike, weights: str | os.PathLike | None = "pretrained", *, trust_pickle: bool = False,
                trust: Trust = LOCAL, name: str | None = None,
                layout: str | None = None) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model with its weights, weights id, class names) of a model folder (see the module docstring).

    weights: "pretrained" (the folder's own file), "random", or a state-dict file instead of the folder's.
    name: how messages (e.g. a model too large) name it: what the user typed or chose, such as the model card's
    name for its folder (default: the folder's name). layout: the layout the caller expects ("clip" for
    `clip:FOLDER`), one sentence when the folder holds another; None: any."""
    expected = layout
    folder, layout, config = read_folder(key, trust)
    if expected is not None and layout != expected:
        raise FolderError(f"The folder {shown(key)} holds a {layout} model, not a {expected} one (its config.json's "
                          f"model_type is {shown(config.get('model_type'), 40)!r}); give it without the "
                          f"{expected}: prefix.")
    weights_id = "random"
    if weights in (None, "pretrained"):
        found = weights_in(folder, WEIGHTS_FILES[layout])
        if found is None:
            how = ("timm's save_for_hf(model, folder, safe_serialization=True)" if layout == "timm"
                   else "model.save_pretrained(folder)")
            raise FolderError(f"The {layout} model folder {shown(key)} has no model.safetensors (or "
                              f"pytorch_model.bin); save the model again with {how}.")
        weights_id = weights_hash(found)
        if layout == "timm":  # timm's folder weights are a plain state dict, read like any file
            weights = found
        else:  # transformers reads them itself: checked first, so a bad file gets the sentence a --weights file gets
            check_weights_files(folder, found, trust_pickle=trust_pickle)
    if layout == "clip":
        from .clip_models import load_clip_folder

        return load_clip_folder(folder, config, folder_key(folder), weights, weights_id, trust=trust,
                                trust_pickle=trust_pickle, name=name)
    if layout == "timm":
        from .timm_models import load_timm_folder

        return load_timm_folder(folder, config, folder_key(folder), weights, trust_pickle=trust_pickle, name=name)
    from .hf_models import load_hf_folder

    return load_hf_folder(folder, config, folder_key(folder), weights, weights_id, trust=trust,
                          trust_pickle=trust_pickle, name=name)
