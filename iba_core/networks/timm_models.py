"""Any timm model by name: `timm:NAME` (e.g. `timm:resnet18`, `timm:convnext_tiny.fb_in22k_ft_in1k`), and what a
timm model carries: preprocessing, class names and the layers a person reads.

timm keeps a model's architecture apart from its pretrained configuration (`pretrained_cfg`: input size,
crop_pct, interpolation, mean, std, label names), and that configuration travels with a saved checkpoint
(`save_for_hf`'s config.json beside model.safetensors, read by `model_folders`). Everything is read from it:

- preprocessing (`preprocessing_of`): crop = the input size, resize = ⌊crop / crop_pct⌋ (timm's own rule),
  timm's interpolation, mean and std;
- class names (`categories_of`): the config's label descriptions or names, else the ImageNet subset timm infers
  from the number of classes (its first WordNet lemma, e.g. "tench"), else none;
- layers (`layer_names`): timm's `feature_info` (the stem and each stage) and every block (`blocks.py`).

Weights of `timm:NAME`: "pretrained" reads NAME.TAG.safetensors (or .pth) in IBA_WEIGHTS_DIR, else timm's
file on the Hugging Face Hub (`timm/NAME.TAG`, cached by huggingface_hub, `hub.py`); offline without it, one
sentence says which file to place where. A path loads that state dict, "random" gives untrained weights. Files are
read by `state_files.read_weights` (tensors only): timm's own loader is not used.

timm is imported only when such a model is chosen (importing it takes seconds).
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import UserError
from ..settings import weights_dir
from ..trust import shown
from .blocks import block_layers
from .model_size import WeightsCheck, build_seeded
from .spec import (INTERPOLATIONS, CardArch, NetworkSpec, UnknownModelError, WeightsUnavailableError, derive_spec,
                   fit_channels)
from .state_files import fit_state_dict, load_weights_file, read_weights, weights_hash

PREFIX = "timm:"


def is_timm_key(key) -> bool:
    return isinstance(key, str) and key.startswith(PREFIX)


def timm_name(key: str) -> str:
    """NAME of `timm:NAME` (with its pretrained tag, if any), or a clear error naming the closest timm models."""
    import difflib

    import timm

    name = key[len(PREFIX):] if is_timm_key(key) else key
    if timm.is_model(name):
        if "." in name:  # a tag must be one of the architecture's pretrained configurations
            try:
                timm.models.get_pretrained_cfg(name)
            except RuntimeError:
                tags = timm.list_pretrained(name.split(".")[0] + ".*")
                raise UnknownModelError(f"timm has no weights {shown(name)!r}; its tags are: "
                                        f"{', '.join(tags[:8]) or 'none'}.") from None
        return name
    close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
    named = f"the closest are {', '.join(close)}" if close else "`timm.list_models()` lists them"
    raise UnknownModelError(f"timm has no model {shown(name)!r}; {named}.")


def build_timm(name: str, weights_check: WeightsCheck | None = None, *, title: str | None = None,
               **kwargs: Any) -> nn.Module:
    """timm's `name` with untrained weights (seeded, `model_size.build_seeded`: refused above the model-size cap, and
    `weights_check`'s file checked against it, before it is built); kwargs go to `timm.create_model`. title: how
    a refusal names it (default `name`)."""
    import timm

    try:
        return build_seeded(lambda: timm.create_model(name, pretrained=False, **kwargs), title=title or name,
                            input_size=lambda model: int(model.pretrained_cfg.get("input_size", (3, 224))[-1]),
                            channels=input_channels, weights_check=weights_check)
    except (TypeError, ValueError, RuntimeError, AssertionError) as err:
        if isinstance(err, UserError):  # the size cap's or the weights' own sentence
            raise
        raise UserError(f"timm could not build {shown(name)} with {shown(kwargs, 120)}: {shown(err, 160)}.") from None


def input_channels(model: nn.Module) -> int:
    """The number of input channels of a timm model: those of its first convolution (`pretrained_cfg`'s
    first_conv, built for `in_chans`: a model made with `timm.create_model(NAME, in_chans=1)` keeps the default
    configuration's input size of 3 channels), else the configuration's input size."""
    first = model.pretrained_cfg.get("first_conv")
    if isinstance(first, str):
        try:
            conv = model.get_submodule(first)
        except AttributeError:
            conv = None
        if isinstance(conv, nn.Conv2d):
            # TResNet's stem folds each 4 × 4 block of pixels into channels before its first convolution (48 = 3·16)
            fold = next((m for m in model.modules() if type(m).__name__ == "SpaceToDepth"), None)
            return int(conv.in_channels) // (int(getattr(fold, "bs", 1)) ** 2 if fold is not None else 1)
    return int(model.pretrained_cfg.get("input_size", (3,))[0])


def preprocessing_of(model: nn.Module) -> dict:
    """crop, resize, interpolation, mean, std and channels from a timm model's pretrained configuration (see the
    module docstring). A non-square input size takes its height; squash and border crops are read as centre crops.
    Mean and std have one number per input channel (`spec.fit_channels`: RGB numbers averaged, timm's own rule)."""
    from timm.data import resolve_data_config

    config = resolve_data_config({}, model=model)
    crop = int(config["input_size"][1])
    crop_pct = float(config.get("crop_pct") or 1.0)
    interpolation = config.get("interpolation") or "bilinear"
    channels = input_channels(model)
    return {
        "crop": crop,
        "resize": math.floor(crop / crop_pct) if crop_pct > 0 else crop,  # timm's transforms_factory rule
        "interpolation": interpolation if interpolation in INTERPOLATIONS else "bilinear",  # "random": training only
        "mean": fit_channels(config["mean"], channels),
        "std": fit_channels(config["std"], channels),
        "channels": channels,
    }


def categories_of(model: nn.Module) -> list[str]:
    """Class names in output order from a timm model's configuration (see the module docstring); [] when it names
    none and its number of classes is no ImageNet subset's."""
    from timm.data import ImageNetInfo, infer_imagenet_subset

    cfg = model.pretrained_cfg
    count = int(getattr(model, "num_classes", 0) or cfg.get("num_classes") or 0)
    names = cfg.get("label_names")
    if isinstance(names, dict):  # {index: name}, for label sets with gaps
        names = [str(names.get(str(i), names.get(i, f"class {i}"))) for i in range(count)]
    descriptions = cfg.get("label_descriptions") or {}
    if names and len(names) == count:
        return [_lemma(descriptions.get(n, n)) for n in names]
    subset = infer_imagenet_subset(model)
    if subset is None:
        return []
    info = ImageNetInfo(subset)
    return [_lemma(info.index_to_description(i)) for i in range(info.num_classes())]


def _lemma(description: str) -> str:
    """"tench" of "tench, Tinca tinca" (WordNet lemmas, commas between): the short name torchvision shows too."""
    return str(description).split(",")[0].strip() or str(description)


def layer_names(model: nn.Module, input_size: int) -> list[str]:
    """timm's `feature_info` modules and every block (`blocks.block_layers`)."""
    info = getattr(model, "feature_info", None) or []
    named = [entry["module"] for entry in info if isinstance(entry, dict) and entry.get("module")]
    return block_layers(model, input_size, named, input_channels(model))


def timm_spec(model: nn.Module, key: str, title: str, *, prep: dict | None = None, categories: list[str] | None = None,
              **fields) -> NetworkSpec:
    """The derived spec of a timm model: its blocks as layers, preprocessing from its config unless `prep` says
    otherwise (a card's overrides), Grad-CAM on its last feature map larger than 1×1."""
    prep = {**preprocessing_of(model), **(prep or {})}
    return derive_spec(model, key, title, input_size=prep["crop"], guess_cam_layer=True,
                       layer_names=layer_names(model, prep["crop"]),
                       categories=(lambda: list(categories)) if categories else None, **prep, **fields)


def pretrained_file(model: nn.Module, name: str) -> tuple[dict, str]:
    """(state dict, weights id) of a timm model's pretrained weights: IBA_WEIGHTS_DIR, else the hub (cache first)."""
    from .hub import hub_file

    cfg = model.pretrained_cfg
    tagged = f"{cfg.get('architecture', name.split('.')[0])}.{cfg['tag']}" if cfg.get("tag") else name
    if (folder := weights_dir()) is not None:
        for suffix in (".safetensors", ".pth"):
            if (path := folder / f"{tagged}{suffix}").is_file():
                return read_weights(path), path.name
    repo = cfg.get("hf_hub_id")
    if not repo or cfg.get("custom_load"):
        raise WeightsUnavailableError(
            f"timm has no weights file to download for {name} (its checkpoint needs timm's own loader); save the "
            "model with timm's save_for_hf into a folder and use that folder as the model.",
            cli_hint="Or give --weights FILE, or --weights random for the structure.")
    filename = cfg.get("hf_hub_filename") or "model.safetensors"
    where = f"place {filename} from https://huggingface.co/{repo} in IBA_WEIGHTS_DIR as {tagged}.safetensors"
    try:
        path = hub_file(repo, filename, what=f"timm:{name} ({repo})")
    except WeightsUnavailableError as err:
        raise WeightsUnavailableError(f"{err.message} Or {where}.",
                                      cli_hint="Or give --weights FILE, or --weights random for the structure.",
                                      app_hint=err.app_hint) from None
    return read_weights(path), tagged


def load_timm(key: str, weights: str | os.PathLike | None = "pretrained", *, trust_pickle: bool = False,
              ) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model with its weights, weights id, class names) of `timm:NAME`."""
    name = timm_name(key)
    title = f"{name} (timm)"
    model = build_timm(name, WeightsCheck.of(weights, trust_pickle), title=PREFIX + name)  # the key as typed
    if weights == "random":
        weights_id = "random"
    else:
        if weights in (None, "pretrained"):
            state, weights_id = pretrained_file(model, name)
        else:
            state, weights_id = read_weights(weights, trust_pickle=trust_pickle), weights_hash(weights)
        if isinstance(state, nn.Module):
            state = state.state_dict()
        fit_state_dict(model, state, title)
    categories = categories_of(model)
    spec = timm_spec(model, PREFIX + name, title, categories=categories,
                     note="A timm model; preprocessing and class names from its pretrained configuration.")
    return spec, model, weights_id, categories


def card_arch(arch: str, kwargs: dict, classes: list[str] | None, outputs: int | None,
              weights_check: WeightsCheck | None, trust=None) -> CardArch:
    """A model card's `arch = "timm:NAME"`: NAME with `num_classes` = the card's outputs (unless its [arch_args]
    say), preprocessing, class names and layers from timm's configuration."""
    if classes is not None:
        kwargs.setdefault("num_classes", outputs)
    model = build_timm(timm_name(arch), weights_check, title=arch, **kwargs)  # the card's arch, as written
    return CardArch(model, preprocessing_of(model), categories_of(model),
                    blocks=lambda crop: layer_names(model, crop))  # read once the weights are in


def load_timm_folder(folder: Path, config: dict, key: str, weights: str | os.PathLike, *, trust_pickle: bool = False,
                     name: str | None = None) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model, weights id, class names) of a folder timm's `save_for_hf` wrote (`model_folders`): config.json
    (architecture, num_classes, model_args, pretrained_cfg with preprocessing and label names) gives the model,
    `weights` (the folder's model.safetensors, another state-dict file, or "random") its weights. name: how
    messages name it (what the user typed or chose; default the folder's name)."""
    arch = config.get("architecture")
    timm_name(str(arch))  # a clear error for an architecture this timm does not have
    title = f"{name or folder.name} ({arch}, timm folder)"
    check = WeightsCheck.of(weights, trust_pickle)
    # timm reads config.json: architecture, model_args, pretrained_cfg
    model = build_timm(f"local-dir:{folder}", check, title=title)
    weights_id = "random"
    if weights != "random":
        weights_id = load_weights_file(model, weights, title, trust_pickle=trust_pickle)
    categories = categories_of(model)
    spec = timm_spec(model, key, title, categories=categories,
                     note=f"The timm model folder {folder}; preprocessing and class names from its config.json.")
    return spec, model, weights_id, categories
