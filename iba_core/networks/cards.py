"""Networks built from model cards (`load_card`): the architecture (a source, a built-in backbone with the card's
head, a model folder, or a builder the user allowed), the weights read safely, the class list, the preprocessing,
and the checks that the head fits the classes. The card's format, and reading and writing a card, are
`card_format.py`'s (its docstring shows a card).
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from .card_format import BINARY_HINT, BUILTIN_BACKBONES, ModelCard, ModelCardError, read_card, read_class_list
from ..images import ImageError
from ..band_images import check_display_bands
from ..heads import check_fits, output_count
from ..trust import LOCAL, Trust, check_code, shown
from .model_size import WeightsCheck, build_seeded, check_size
from .spec import (CROP, IMAGENET_MEAN, IMAGENET_STD, RESIZE, NetworkSpec, derive_spec,
                   fit_channels, input_channels_of, unknown_layer_error)
from .state_files import WeightsMismatchError, fit_state_dict, read_weights, weights_hash
from .state_match import source_hint

def import_builder(spec: str, card_dir: Path | None = None, trust: Trust = LOCAL, *, card: Path | None = None):
    """The function named by "package.module:function" (also found next to the card): Python code, so
    imported only when `trust.code` allows it (importing a module runs it)."""
    where = f"The model card {card}" if card is not None else "The model card"
    check_code(f"{where} names the builder {shown(spec, 60)}", trust)
    module_name, _, func_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if card_dir is None or str(card_dir) in sys.path:
            raise ModelCardError(f"Cannot import {module_name!r} for arch {spec!r}: {err}.") from None
        sys.path.insert(0, str(card_dir))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err2:
            raise ModelCardError(f"Cannot import {module_name!r} for arch {spec!r}: {err2}.") from None
        finally:
            sys.path.remove(str(card_dir))
    builder = getattr(module, func_name, None)
    if not callable(builder):
        raise ModelCardError(f"{module_name} has no function {func_name!r} (arch {spec!r}).")
    return builder


def _output_size(model: nn.Module, crop: int, channels: int = 3) -> int | None:
    try:
        with torch.no_grad():
            out = model.eval()(torch.zeros(1, channels, crop, crop))
    except Exception:  # noqa: BLE001 - the dry pass of derive_spec reports real failures
        return None
    return int(out.shape[1]) if isinstance(out, torch.Tensor) and out.dim() == 2 else None


def load_card(path: str | os.PathLike, weights: str | os.PathLike | None = "pretrained", *,
              trust_pickle: bool = False, trust: Trust = LOCAL) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """(spec, model with its weights, weights id, class names) of a model card.

    weights: "pretrained" (the card's weights), "random" (the builder's initialisation, seeded), or a
    path overriding the card's file. trust: whether a code builder may run and the card's paths may leave
    its folder (`iba_core.trust`; default: the local user's, without code).
    """
    card = read_card(path, trust)
    classes = read_class_list(card.classes) if card.classes else None
    if card.model_folder is not None:  # a timm or transformers folder beside the card: its own architecture
        return _folder_card(card, classes, weights, trust=trust, trust_pickle=trust_pickle)
    weights_file = card.weights
    if weights not in (None, "pretrained", "random"):
        weights_file = Path(weights).expanduser()
    has_weights = weights != "random" and weights_file is not None
    # Read before the build only where the file is the network (a pickled whole module, no arch); otherwise its names
    # and shapes are checked against the meta-built architecture first (`model_size.build_seeded`), then it is read.
    state = read_weights(weights_file, trust_pickle=trust_pickle) if has_weights and card.arch is None else None
    # The spec's title reaches tables, figures and many messages: at most SHOWN_CHARS of the card's.
    title = shown(card.title or f"{card.name} (model card)")
    _check_head_fits(card, None, classes, title)  # a binary head's class list, before anything is built
    # The builders' output count: one per class name, one logit for a binary head's two names.
    outputs_wanted = output_count(card.head or "softmax", len(classes)) if classes is not None else None
    check = (WeightsCheck(weights_file, classes=outputs_wanted, explain=source_hint, trust_pickle=trust_pickle)
             if has_weights else None)

    if card.arch in BUILTIN_BACKBONES:  # the registry's built-ins with a head of their own (`with_classes`)
        return _builtin_with_head(card, classes, check, weights, weights_file, title)
    try:
        model, prep, source_categories, source_head, blocks = _card_model(
            card, classes, state, check, title=title, outputs_wanted=outputs_wanted, trust=trust,
            trust_pickle=trust_pickle)
    except WeightsMismatchError as err:  # checked on the meta build or once read
        if card.head is None and classes is not None and len(classes) == 2 and err.file_outputs == 1:
            err.cli_hint = err.app_hint = BINARY_HINT  # built with two outputs, the file has one
            err.binary = True
        raise
    prep = _card_preprocessing(card, prep, model)

    outputs = _output_size(model, prep["crop"], prep["channels"])
    # A declared head wins; else the source's; else one output for two names is binary.
    head = card.head or source_head or ("binary" if outputs == 1 and classes is not None and len(classes) == 2
                                        else "softmax")
    if head != "binary" and classes is not None and outputs is not None and outputs != len(classes):
        raise ModelCardError(f"The class list {card.classes} has {len(classes)} names but the network has "
                             f"{outputs} outputs.")
    _check_head_fits(card, outputs, classes, title, head)
    if classes is None:
        classes = source_categories if outputs is not None and outputs == len(source_categories) else []
    weights_id = _card_weights_id(card, weights, weights_file)
    spec = derive_spec(
        model, card.key, title, input_size=prep["crop"], default_layer=card.layer, guess_cam_layer=True,
        layer_names=blocks(prep["crop"]) if blocks else None,
        categories=(lambda: list(classes)) if classes else None,
        stats_images=str(card.stats_images) if card.stats_images else None,
        note=f"From the model card {card.path}; layers discovered by a dry forward pass.", head=head, **prep,
    )
    return spec, model, weights_id, classes


def _card_model(card: ModelCard, classes: list[str] | None, state, check: WeightsCheck | None, *, title: str,
                outputs_wanted: int | None, trust: Trust, trust_pickle: bool) -> tuple:
    """(model with the card's weights, the source's preprocessing, its class names, its head, its layer names by crop
    size or None) of a card's arch: torchvision, timm, Hugging Face or a code builder (`load_card`)."""
    source_categories: list[str] = []  # the architecture's own class names, used when the outputs fit them
    source_head = None  # the head the architecture's own configuration names (Hugging Face's problem_type)
    prep: dict = {}
    blocks = None  # the source's readable layers (timm, Hugging Face): crop size → names
    if isinstance(state, nn.Module) and card.arch is None:
        model, state = state, None
    elif card.arch is None:
        raise ModelCardError(f"The model card {card.path} names no arch; add arch = \"torchvision:NAME\" or "
                             "\"package.module:function\".",
                             cli_hint="Only a whole pickled module loaded with --trust-pickle needs none.")
    elif (source := _arch_source(card.arch)) is not None:
        kwargs = dict(card.arch_args)
        try:
            built = source.card_arch(card.arch, kwargs, classes, outputs_wanted, check, trust)
        except UserError:  # the size cap's, the weights' or the source's own sentence
            raise
        except (TypeError, ValueError) as err:
            raise ModelCardError(f"Could not build {card.arch} with {shown(kwargs, 120)}: {shown(err, 160)}.") from None
        model, prep, source_categories, source_head, blocks = built
    else:
        builder = import_builder(card.arch, card.path.parent, trust, card=card.path)
        # Trusted code, counted like every source: first on the meta device where it builds there.
        check_size(lambda: builder(**card.arch_args), title, input_size=card.preprocess.get("crop", CROP),
                   channels=card.channels or 3)
        try:
            with torch.random.fork_rng(devices=[]):  # seeded for reproducible random weights; global RNG untouched
                torch.manual_seed(0)
                model = builder(**card.arch_args)
        except Exception as err:  # noqa: BLE001 - the user's code
            raise ModelCardError(f"The builder {card.arch} failed: {type(err).__name__}: {err}.") from None
        if not isinstance(model, nn.Module):
            raise ModelCardError(f"The builder {card.arch} returned {type(model).__name__}, not a torch nn.Module.")
    if check is not None and state is None and card.arch is not None:  # checked against the meta build: now read
        state = read_weights(check.path, trust_pickle=trust_pickle)
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if state is not None:
        fit_state_dict(model, state, title, classes=outputs_wanted, explain=source_hint)
    return model, prep, source_categories, source_head, blocks


def _arch_source(arch: str):
    """The source (`sources.SOURCES`) that builds a card's arch with the card's head, or None (a code builder)."""
    from . import source_of  # the package's registry (it lists this module's cards as a source)

    source = source_of(arch)
    return source if source is not None and source.card_arch is not None else None


def _card_preprocessing(card: ModelCard, prep: dict, model: nn.Module) -> dict:
    """A card's network's preprocessing: ImageNet's defaults, then the source's (`prep`), then the card's
    [preprocess]; the input channels (the source's, else the network's first convolution's; the card's `channels`
    where neither says, and it must agree with them), mean and std with one number per channel, display_bands."""
    found = prep.get("channels") or input_channels_of(model, default=None)
    if card.channels is not None and found is not None and card.channels != found:
        raise ModelCardError(f"The model card {card.path} says channels = {card.channels}, but the network takes "
                             f"{found} input channels.")
    channels = card.channels or found or 3
    out = {"resize": RESIZE, "crop": CROP, **prep, **card.preprocess, "channels": channels}
    for k, default in (("mean", IMAGENET_MEAN), ("std", IMAGENET_STD)):
        _check_channel_numbers(card, k, channels)
        out[k] = card.preprocess.get(k) or fit_channels(prep.get(k, default), channels)
    out["display_bands"] = _display_bands(card, channels)
    return out


def _check_channel_numbers(card: ModelCard, entry: str, channels: int) -> None:
    """The card's preprocess.mean or .std has one number per input channel of the network."""
    given = card.preprocess.get(entry)
    if given is not None and len(given) != channels:
        raise ModelCardError(f"In the model card {card.path}, preprocess.{entry} must be {channels} "
                             f"number{'s' if channels > 1 else ''}, one per input channel of the network, not "
                             f"{len(given)}.")


def _display_bands(card: ModelCard, channels: int) -> tuple[int, int, int] | None:
    """The card's display_bands, each a band of the network's `channels`."""
    try:
        return check_display_bands(card.display_bands, channels)
    except ImageError as err:
        raise ModelCardError(f"In the model card {card.path}, {err.message}") from None


def _check_head_fits(card: ModelCard, outputs: int | None, classes: list[str] | None, title: str,
                     head: str | None = None) -> None:
    """`heads.check_fits` for a card (its declared head unless `head` is given), as a ModelCardError."""
    head = head or card.head
    if head is None:
        return
    try:
        check_fits(head, outputs, len(classes) if classes is not None else None, title)
    except UserError as err:
        raise ModelCardError(err.message) from None  # the title names the card


def _card_weights_id(card: ModelCard, weights, weights_file: Path | None) -> str:
    """The weights id of a card's network: "random", "builder" (no file: the builder's own weights) or the file's
    hash."""
    if weights == "random" or weights_file is None:
        return "random" if weights == "random" else "builder"
    return weights_hash(weights_file)


def _folder_card(card: ModelCard, classes: list[str] | None, weights, *, trust: Trust,
                 trust_pickle: bool) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """A card naming a model folder (`model_folder`): the folder's network (`model_folders.load_folder`) under the
    card's name, title, default layer, class names, statistics images and preprocessing overrides."""
    from dataclasses import replace

    from ..trust import ANY
    from . import load_folder  # the package's (model_folders reads this module's limits)

    # read_card has held the folder to the card's path rule (inside its folder unless `trust` allows outside).
    spec, model, weights_id, categories = load_folder(card.model_folder, weights, trust_pickle=trust_pickle,
                                                      trust=replace(trust, server_paths=ANY),
                                                      name=card.title or card.name)  # its name, not "model"
    title = shown(card.title or f"{card.name} (model card)")
    if classes is not None:
        outputs = _output_size(model, spec.crop)
        wanted = output_count(card.head or "softmax", len(classes))
        _check_head_fits(card, outputs, classes, title)  # a binary head: two names, one output
        if outputs is not None and outputs != wanted:
            raise ModelCardError(f"The class list {card.classes} has {len(classes)} names but the model folder's "
                                 f"network has {outputs} outputs.")
        categories = list(classes)
    if card.layer and card.layer not in spec.layers:
        raise unknown_layer_error(title, card.layer, spec.layers)
    spec = replace(
        spec, key=card.key, title=title, default_layer=card.layer or spec.default_layer,
        categories=(lambda: list(categories)) if categories else None,
        stats_images=str(card.stats_images) if card.stats_images else None,
        note=f"From the model card {card.path}: the model folder {card.model_folder.name}, with its configuration.",
        **({"head": card.head} if card.head else {}), **card.preprocess,
    )
    return spec, model, weights_id, list(categories)


def _builtin_with_head(card: ModelCard, classes: list[str] | None, check: WeightsCheck | None, weights,
                       weights_file: Path | None, title: str) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """A built-in backbone with the card's head (`arch = "efficientnet_lite0"`, …): the built-in's spec (paper layer
    names, stage list, preprocessing, Grad-CAM and LRP) with the card's classes, weights and overrides."""
    from dataclasses import replace

    from . import REGISTRY

    base = REGISTRY[card.arch]
    if card.arch_args:
        raise ModelCardError(f"The model card {card.path} names the built-in {card.arch}, which takes no [arch_args]; "
                             "its head is sized by the class list.")
    if card.channels not in (None, base.channels):
        raise ModelCardError(f"The model card {card.path} says channels = {card.channels}, but the built-in "
                             f"{card.arch} takes {base.channels} input channels.")
    for entry in ("mean", "std"):
        _check_channel_numbers(card, entry, base.channels)
    names = classes if classes is not None else (base.categories() if base.categories else [])
    head = card.head or "softmax"
    outputs = output_count(head, len(names))
    if check is not None:
        check = replace(check, classes=outputs)
    model = build_seeded(lambda: base.with_classes(outputs), title=title, input_size=base.crop, channels=base.channels,
                         weights_check=check)
    state = read_weights(check.path, trust_pickle=check.trust_pickle) if check is not None else None
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if state is not None:
        fit_state_dict(model, state, title, classes=outputs, explain=source_hint)
    if card.layer and card.layer not in base.layers:
        raise unknown_layer_error(title, card.layer, base.layers)
    spec = replace(
        base, key=card.key, title=title, build=lambda st: model if st is None else fit_state_dict(model, st, title),
        default_layer=card.layer or base.default_layer, weights=None,
        categories=(lambda: list(names)) if names else None,
        stats_images=str(card.stats_images) if card.stats_images else None,
        note=f"From the model card {card.path}: the built-in {base.title} backbone with its own head.",
        head=head, display_bands=_display_bands(card, base.channels), **card.preprocess,
    )
    return spec, model, _card_weights_id(card, weights, weights_file), list(names)


