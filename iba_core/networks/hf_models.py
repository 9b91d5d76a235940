"""Hugging Face image classifiers: `hf:ORG/NAME` (an `AutoModelForImageClassification` id: ViT, DeiT, BEiT,
ConvNeXt, ResNet, …) and folders transformers' `save_pretrained` wrote (read by `model_folders`).

Everything comes from the model's own files:

- config.json: the architecture (`model_type`), the class names (`id2label`; the generic names transformers makes
  up, "LABEL_0", … become "class 0", …), the head (`problem_type` "multi_label_classification": a sigmoid per
  label, `heads.py`; anything else: softmax);
- preprocessor_config.json (optional): the image processor's size, crop, mean, std and resample filter, mapped
  to resize / centre crop / normalise (`preprocessing_of`);
- model.safetensors (or pytorch_model.bin, which transformers reads with weights_only).

`hf:ORG/NAME` is downloaded and cached by huggingface_hub; offline (HF_HUB_OFFLINE=1 or no network) a model that
is not cached is one sentence saying what to download (`hub.py`). Code that came with a model (config.json's
`auto_map`, transformers' `trust_remote_code`) runs only where the person running the program allowed code
(`iba_core.trust`: --trust-code, IBA_TRUST_CODE=1); otherwise one sentence says so. A checkpoint without a
trained classification head (a backbone) is refused: its logits would be random.

The model answers `model(x)` with the logits tensor (its forward is wrapped, `logits_only`), so it is one
network like any other; its layers are its blocks (`blocks.py`: `vit.layers.5`, `convnext.encoder.stages.2`) and
embeddings, with the module names transformers gives them. transformers is imported only when such a model is
chosen (importing it takes seconds).
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from ..errors import UserError
from ..model_state import frozen_eval
from ..trust import LOCAL, Trust, check_code, shown
from .blocks import block_layers
from .hub import hub_cache
from .model_size import ModelSize, WeightsCheck, build_seeded, check_size, config_floor, refuse_if_too_large
from .spec import (CROP, IMAGENET_MEAN, IMAGENET_STD, CardArch, NetworkSpec, UnknownModelError, derive_spec,
                   fit_channels)
from .state_files import WeightsMismatchError, damaged_safetensors_error, load_weights_file, unsafe_pickle_error

PREFIX = "hf:"
#: A hub id: NAME or ORG/NAME (letters, digits, '-', '_', '.'), as huggingface_hub accepts them.
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")
#: PIL's resampling numbers, as image processors store them, by torchvision's names (`spec.INTERPOLATIONS`).
PIL_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
#: transformers' rule for ConvNeXt-style processors: below this shortest edge, resize to edge / crop_pct, then crop.
CROP_PCT_BELOW = 384
#: The names transformers gives classes nobody named.
GENERIC_LABEL = re.compile(r"^LABEL_(\d+)$")
#: transformers' problem_type → this project's head (`heads.HEADS`); any other (single_label_classification,
#: regression, none) is read as softmax.
PROBLEM_TYPE_HEADS = {"multi_label_classification": "sigmoid"}


def is_hf_key(key) -> bool:
    return isinstance(key, str) and key.startswith(PREFIX)


def repo_id(key: str) -> str:
    """ORG/NAME of `hf:ORG/NAME`, or a clear error when it is not a hub id."""
    name = key[len(PREFIX):] if is_hf_key(key) else key
    if not REPO_ID.match(name) or ".." in name:
        raise UnknownModelError(f"{shown(name)!r} is not a Hugging Face model id; give hf:ORG/NAME, e.g. "
                                "hf:google/vit-base-patch16-224.")
    return name


def read_json(path: Path, what: str) -> dict:
    """A JSON object from `path`, or one sentence saying the file is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"Could not read {what} {shown(path)}: {shown(err, 120)}.") from None
    if not isinstance(data, dict):
        raise UserError(f"{what[0].upper()}{what[1:]} {shown(path)} is not a JSON object.")
    return data


def check_no_code(config: dict, what: str, trust: Trust) -> None:
    """Refuse a model whose config names its own modelling code (`auto_map`) unless `trust` allows code."""
    if config.get("auto_map"):
        check_code(f"{what} comes with its own modelling code (auto_map in its config.json)", trust, source="a model")


def categories_of(config: dict) -> list[str]:
    """Class names in output order from config.json's id2label; transformers' generic LABEL_i become "class i"."""
    id2label = config.get("id2label") or {}
    names = []
    for i in range(len(id2label)):
        name = str(id2label.get(str(i), id2label.get(i, f"class {i}")))
        generic = GENERIC_LABEL.match(name)
        names.append(f"class {generic.group(1)}" if generic else name)
    return names


def head_of_config(config) -> str:
    """The head (`heads.HEADS`) a transformers config names by its problem_type: "sigmoid" for
    "multi_label_classification", else "softmax". config: config.json as a dict, or a transformers config."""
    problem = config.get("problem_type") if isinstance(config, dict) else getattr(config, "problem_type", None)
    return PROBLEM_TYPE_HEADS.get(problem, "softmax")


def _numbers(value) -> tuple[float, ...] | None:
    """An image processor's image_mean or image_std as numbers (a list, or one number for every channel); None
    when it gives none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (float(value),)
    if isinstance(value, (list, tuple)) and value:
        return tuple(float(v) for v in value)
    return None


def _edge(value) -> int | None:
    """The side length of an image processor's size or crop entry (an int, or a dict of height / shortest_edge)."""
    if isinstance(value, dict):
        value = value.get("height") or value.get("shortest_edge") or value.get("width")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def channels_of(config: dict) -> int:
    """The input channels config.json's num_channels names (3 without it), or one sentence when it names none
    that an image has."""
    from ..images import MAX_BANDS

    channels = config.get("num_channels", 3)
    if isinstance(channels, bool) or not isinstance(channels, int) or not 1 <= channels <= MAX_BANDS:
        raise UserError(f"The model's config.json names num_channels = {shown(channels, 20)}; an image has from 1 to "
                        f"{MAX_BANDS} channels.")
    return channels


def preprocessing_of(processor: dict | None, config: dict) -> dict:
    """resize, crop, interpolation, mean, std and channels from a preprocessor_config.json (None: from
    config.json's image_size, ImageNet's mean and std) and config.json's num_channels (`channels_of`); mean and
    std get one number per channel (`spec.fit_channels`: a processor's RGB numbers averaged).

    The processor's steps map to this project's resize-the-short-side, centre-crop, normalise: with a centre
    crop, resize = size and crop = crop_size; with ConvNeXt's crop_pct, resize = ⌊size / crop_pct⌋ and crop = size
    (below 384 px, as transformers does); otherwise resize = crop = size (ViT resizes to size × size: the same for a
    square image, a centre crop of the short side's square for others)."""
    image_size = _edge(config.get("image_size")) or CROP
    channels = channels_of(config)
    if processor is None:
        return {"crop": image_size, "resize": round(image_size * 256 / 224), "channels": channels,
                "mean": fit_channels(IMAGENET_MEAN, channels), "std": fit_channels(IMAGENET_STD, channels)}
    size = _edge(processor.get("size")) or image_size
    crop_size = _edge(processor.get("crop_size"))
    if processor.get("do_center_crop", crop_size is not None) and crop_size:
        resize, crop = size, crop_size
    elif processor.get("crop_pct") and isinstance(processor.get("size"), dict) \
            and "shortest_edge" in processor["size"] and size < CROP_PCT_BELOW:
        resize, crop = math.floor(size / float(processor["crop_pct"])), size
    else:
        resize, crop = size, size
    prep = {"resize": resize, "crop": crop, "channels": channels}
    if processor.get("do_normalize", True):
        prep["mean"] = fit_channels(_numbers(processor.get("image_mean")) or IMAGENET_MEAN, channels)
        prep["std"] = fit_channels(_numbers(processor.get("image_std")) or IMAGENET_STD, channels)
    else:  # pixels in 0…1 go in as they are
        prep["mean"], prep["std"] = (0.0,) * channels, (1.0,) * channels
    resample = processor.get("resample")
    prep["interpolation"] = PIL_RESAMPLE.get(resample, "bilinear") if isinstance(resample, int) else "bilinear"
    return prep


@lru_cache(maxsize=None)
def _logits_class(cls: type) -> type:
    """A subclass of a transformers model class whose forward takes the image tensor and returns the logits."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = cls.forward(self, pixel_values=x)
        logits = getattr(out, "logits", None)
        if logits is None:  # a class registered as a classifier that answers with features (seen: PP-LCNet)
            raise UserError(f"transformers' {cls.__name__} answers with {type(out).__name__}, which holds no class "
                            "scores, so there is nothing to explain.")
        return logits

    return type(cls.__name__, (cls,), {"forward": forward, "__module__": __name__,
                                       "__doc__": f"{cls.__name__}, answering model(x) with the logits."})


def logits_only(model: nn.Module) -> nn.Module:
    """`model` (a transformers image classifier), answering `model(x)` with the logits tensor, in place.

    The class is swapped for a subclass with that forward rather than wrapped in another module, so module names
    and state-dict keys stay transformers' own (`vit.layers.5`; a saved model.safetensors loads as it is)."""
    model.__class__ = _logits_class(type(model))
    return model


def layer_names(model: nn.Module, input_size: int) -> list[str]:
    """The model's blocks and its stem (`embeddings`, ResNet's `embedder`) (`blocks.block_layers`)."""
    stems = [name for name, _ in model.named_modules()
             if name.count(".") == 1 and name.endswith((".embeddings", ".embedder"))]
    channels = int(getattr(getattr(model, "config", None), "num_channels", 3) or 3)
    return block_layers(model, input_size, stems, channels)


def _auto_config(source: str | Path, trust: Trust, local_only: bool, **overrides):
    """transformers' config of `source` (a folder or a hub id), or one sentence when transformers does not know it."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(source), trust_remote_code=trust.code, local_files_only=local_only,
                                          cache_dir=str(hub_cache()), **overrides)
    except (ValueError, KeyError) as err:
        import transformers

        raise UserError(f"transformers {transformers.__version__} does not know the model {shown(source)} "
                        f"({shown(err, 160)}).") from None


def _from_config(config) -> nn.Module:
    from transformers import AutoModelForImageClassification

    return AutoModelForImageClassification.from_config(config)


def check_reads_pixels(model: nn.Module, title: str) -> None:
    """One sentence for a classifier whose input is not an image's pixels (ImageGPT reads the colour-cluster ids its
    processor makes; its forward refuses pixels), before its layers are searched with an image."""
    reads = getattr(model, "main_input_name", "pixel_values")
    if reads != "pixel_values":
        raise UserError(f"{shown(title)} reads {reads}, not an image's pixel values, so no map on the image can "
                        "explain it.")


def check_scores_named(model: nn.Module, categories: list[str], prep: dict, channels: int, title: str) -> None:
    """One sentence when the model gives another number of class scores than its config.json names classes (a head
    saved for another class list): its predictions would be named wrongly or not at all. One image's forward pass."""
    if not categories:
        return
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    with frozen_eval(model), torch.no_grad():  # eval mode: a BatchNorm's running statistics stay as loaded
        scores = model(torch.zeros(1, channels, prep["crop"], prep["crop"], device=device)).shape[-1]
    if scores != len(categories) and not (scores == 1 and len(categories) == 2):  # one logit: a binary head
        raise UserError(f"{shown(title)} gives {scores} class scores per image, but its config.json names "
                        f"{len(categories)} classes (id2label), so its predictions cannot be named.")


def build_hf(config, *, title: str = "This Hugging Face model", input_size: int | None = None,
             weights_check: WeightsCheck | None = None) -> nn.Module:
    """An image classifier with untrained weights (seeded) from a transformers config, answering with logits;
    refused above the model-size cap, and `weights_check`'s file checked against it, before it is built
    (`model_size.build_seeded`)."""
    try:
        model = build_seeded(lambda: _from_config(config), title=title, input_size=input_size,
                             channels=int(getattr(config, "num_channels", 3) or 3), weights_check=weights_check)
    except ValueError as err:  # not an image classifier (a text model, a backbone class); a UserError passes
        raise UserError(f"This Hugging Face model is no image classifier ({shown(err, 160)}).") from None
    return logits_only(model.float())


@contextmanager
def _quiet(quiet: bool) -> Iterator[None]:
    """transformers' progress bars off while `quiet` (a local load takes a blink; the bar would only clutter a CLI
    command's stderr), restored after; downloads keep theirs."""
    from transformers.utils import logging as hf_logging

    was_on = quiet and hf_logging.is_progress_bar_enabled()
    if was_on:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def pretrained_hf(source: str | Path, trust: Trust, local_only: bool, title: str) -> nn.Module:
    """transformers' `from_pretrained` (fp32, weights_only / safetensors), refusing a checkpoint whose
    classification head it had to initialise (its logits would say nothing)."""
    from safetensors import SafetensorError
    from transformers import AutoModelForImageClassification

    try:
        with _quiet(local_only):
            model, info = AutoModelForImageClassification.from_pretrained(
                str(source), trust_remote_code=trust.code, local_files_only=local_only, dtype=torch.float32,
                cache_dir=str(hub_cache()), output_loading_info=True)
    except pickle.UnpicklingError:  # a pickled pytorch_model.bin (a folder's is checked before: `model_folders`)
        raise unsafe_pickle_error(source) from None
    except SafetensorError:  # a damaged or lying model.safetensors
        raise damaged_safetensors_error(source) from None
    except ValueError as err:
        raise UserError(f"{shown(title)} is no image classifier transformers can load ({shown(err, 160)}).") from None
    except RuntimeError as err:  # weights of other shapes than config.json's model (transformers' mismatch report)
        if not any(word in str(err) for word in ("mismatch", "size")):  # memory, a model's own code: as it is
            raise UserError(f"transformers cannot load {shown(title)}: {shown(err, 200)}.") from None
        raise UserError(f"transformers cannot load {shown(title)}: its weights do not fit the model its config.json "
                        "describes (a layer of another shape, such as a head for another number of classes).") from None
    except OSError as err:  # files missing or unreadable
        raise UserError(f"Could not load {shown(title)}: {shown(err, 200)}.") from None
    missing = list(info.get("missing_keys") or [])
    if missing:
        raise WeightsMismatchError(
            f"The checkpoint of {shown(title)} has no weights for {len(missing)} parameter(s) ("
            f"{', '.join(shown(k, 60) for k in missing[:3])}): probably a backbone without a trained classification "
            "head, whose outputs would be random; use a model fine-tuned for classification.")
    return logits_only(model)


def hf_spec(model: nn.Module, key: str, title: str, prep: dict, categories: list[str], **fields) -> NetworkSpec:
    """The derived spec of a transformers classifier: its blocks as layers, Grad-CAM on its last feature map."""
    return derive_spec(model, key, title, input_size=prep["crop"], guess_cam_layer=True,
                       layer_names=layer_names(model, prep["crop"]),
                       categories=(lambda: list(categories)) if categories else None, **prep, **fields)


def _load(source: str | Path, config: dict, processor: dict | None, key: str, title: str,
          weights: str | os.PathLike | None, weights_id: str, *, trust: Trust, trust_pickle: bool,
          local_only: bool) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """What `load_hf` and `load_hf_folder` share once config.json (and the processor's) are read."""
    check_no_code(config, title, trust)
    refuse_if_too_large(ModelSize(config_floor(config)), title, at_least=True)  # before transformers is imported
    channels = channels_of(config)  # one sentence for a channel count no image has, before the model is built
    prep = preprocessing_of(processor, config)
    auto_config = _auto_config(source, trust, local_only)
    if weights in (None, "pretrained"):
        # Counted on the meta device first: from_pretrained allocates the whole model before it reads a weight.
        check_size(lambda: _from_config(auto_config), title, input_size=prep["crop"], channels=channels)
        model = pretrained_hf(source, trust, local_only, title)
    else:
        check = WeightsCheck.of(weights, trust_pickle)
        model = build_hf(auto_config, title=title, input_size=prep["crop"], weights_check=check)
        weights_id = "random"
        if check is not None:
            weights_id = load_weights_file(model, weights, title, trust_pickle=trust_pickle)
    check_reads_pixels(model, title)
    categories = categories_of(config)
    check_scores_named(model, categories, prep, channels, title)
    spec = hf_spec(model, key, title, prep, categories, head=head_of_config(config),
                   note=f"A Hugging Face model ({config.get('model_type', '?')}); preprocessing, class names and head "
                   "from its own configuration.")
    return spec, model, weights_id, categories


def load_hf(key: str, weights: str | os.PathLike | None = "pretrained", *, trust: Trust = LOCAL,
            trust_pickle: bool = False) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model with its weights, weights id, class names) of `hf:ORG/NAME` (see the module docstring)."""
    from .hub import hub_file, hub_offline

    repo = repo_id(key)
    offline = hub_offline()
    config_path = hub_file(repo, "config.json", what=PREFIX + repo, offline=offline)
    config = read_json(config_path, "the model's config")
    check_no_code(config, PREFIX + repo, trust)  # before anything else is fetched
    processor_path = hub_file(repo, "preprocessor_config.json", what=PREFIX + repo, optional=True, offline=offline)
    processor = read_json(processor_path, "the image processor's config") if processor_path else None
    # The snapshot folder is named by the commit: statistics are cached per revision of the weights.
    return _load(repo, config, processor, PREFIX + repo, f"{repo} (Hugging Face)", weights,
                 f"{repo.split('/')[-1]}@{config_path.parent.name[:12]}", trust=trust, trust_pickle=trust_pickle,
                 local_only=offline)


def architecture_from_hub(key: str, trust: Trust = LOCAL, weights_check: WeightsCheck | None = None,
                          **overrides) -> tuple[nn.Module, dict, list[str]]:
    """(untrained classifier, preprocessing, class names) of the architecture `hf:ORG/NAME` names: a card's arch,
    built with the card's head (`overrides` of its config, e.g. num_labels) before the card's weights go in."""
    from .hub import hub_file, hub_offline

    repo = repo_id(key)
    offline = hub_offline()
    config_path = hub_file(repo, "config.json", what=PREFIX + repo, offline=offline)
    config = read_json(config_path, "the model's config")
    check_no_code(config, PREFIX + repo, trust)
    refuse_if_too_large(ModelSize(config_floor(config)), PREFIX + repo, at_least=True)
    channels_of(config)
    processor_path = hub_file(repo, "preprocessor_config.json", what=PREFIX + repo, optional=True, offline=offline)
    processor = read_json(processor_path, "the image processor's config") if processor_path else None
    prep = preprocessing_of(processor, config)
    model = build_hf(_auto_config(config_path.parent, trust, True, **overrides),  # the cached config.json's folder
                     title=PREFIX + repo, input_size=prep["crop"], weights_check=weights_check)
    return model, prep, categories_of(config)


def card_arch(arch: str, kwargs: dict, classes: list[str] | None, outputs: int | None,
              weights_check: WeightsCheck | None, trust: Trust = LOCAL) -> CardArch:
    """A model card's `arch = "hf:ORG/NAME"`: that architecture with the card's head (as many outputs as names, named
    by them; a binary head: the positive name), its preprocessing, class names, head and layers."""
    if classes is not None:
        labels = classes[-outputs:]
        kwargs.setdefault("id2label", dict(enumerate(labels)))
        kwargs.setdefault("label2id", {name: i for i, name in enumerate(labels)})
    model, prep, categories = architecture_from_hub(arch, trust, weights_check, **kwargs)
    return CardArch(model, prep, categories, head_of_config(model.config), lambda crop: layer_names(model, crop))


def load_hf_folder(folder: Path, config: dict, key: str, weights: str | os.PathLike | None, weights_id: str, *,
                   trust: Trust = LOCAL, trust_pickle: bool = False,
                   name: str | None = None) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model, weights id, class names) of a folder transformers' `save_pretrained` wrote (`model_folders`):
    config.json (model_type, id2label), its weights ("pretrained": the folder's model.safetensors or
    pytorch_model.bin, whose hash is `weights_id`; "random"; or a state-dict file), optionally
    preprocessor_config.json. name: how messages name it (what the user typed or chose; default the folder's
    name)."""
    title = f"{name or folder.name} ({config.get('model_type', '?')}, Hugging Face folder)"
    check_no_code(config, f"The model folder {shown(folder)}", trust)
    processor_file = folder / "preprocessor_config.json"
    processor = read_json(processor_file, "the image processor's config") if processor_file.is_file() else None
    return _load(folder, config, processor, key, title, weights, weights_id, trust=trust, trust_pickle=trust_pickle,
                 local_only=True)
