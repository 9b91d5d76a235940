"""Model cards: your own network described by a small TOML file, loaded safely.

    # mynet.toml — paths are relative to this file
    arch = "torchvision:resnet50"        # or "timm:NAME", "hf:ORG/NAME", a built-in backbone ("efficientnet_lite0",
                                         # "resnet50", "vgg16"), or "package.module:function" returning an nn.Module
    weights = "mynet.pth"                # state dict: .pth / .pt (torch.save(model.state_dict(), …)) or .safetensors
    classes = "classes.txt"              # one name a line; or JSON (list, {index: name}); or CSV index,name
    layer = "layer3"                     # optional: default layer (else the derived spec's rule)
    stats_images = "photos"              # optional: image folder for the feature statistics
    name = "mynet"                       # optional: the network's key is card:<name> (default: the file stem)
    title = "My ResNet-50"               # optional: shown in tables and figures

    [arch_args]                          # optional: keyword arguments of the builder
    [preprocess]                         # optional: resize, crop, mean, std, interpolation
    resize = 256
    crop = 224
    mean = [0.485, 0.456, 0.406]
    std = [0.229, 0.224, 0.225]

`arch = "torchvision:NAME"` builds torchvision's NAME with `num_classes` = the class list's length, and
takes its preprocessing from the default weights' `transforms()`; `arch = "timm:NAME"` likewise builds timm's NAME
(preprocessing and layers from timm's configuration, `timm_models.py`), `arch = "hf:ORG/NAME"` the architecture of
that Hugging Face model with `num_labels` = the class list's length (its config and image processor from the hub
or its cache, `hf_models.py`). A built-in key (`arch = "efficientnet_lite0"`, "resnet50", "vgg16") is that
backbone with your head of as many classes: the built-in's paper layer names (`block3_2`, `conv3_4`), its
preprocessing, its stage list (the fast split), Grad-CAM layer and LRP rules. Code builders get ImageNet's
preprocessing (256, 224, ImageNet mean and std). `[preprocess]` overrides each entry for every arch. Without `weights`
the builder's model is used as it comes. The spec is derived (`spec.derive_spec`), with the last
feature map larger than 1×1 as Grad-CAM layer. The key, `card:<name>`, is stable; the weights id is a
short hash of the weights file's bytes, so statistics caches are per weights.

Weights are read safely (`state_files.read_weights`): tensors only, a pickled module only with
`trust_pickle=True` (the CLI's `--trust-pickle`; the app never passes it).

A card is data (`iba_core.trust`): a `package.module:function` builder, or a module beside the card, runs
only with `Trust.code` (the CLI's `--trust-code`, the app's IBA_TRUST_CODE=1); the card's paths resolve
(symlinks first) inside its folder unless the `Trust` allows outside paths. The preprocessing numbers are
checked against sensible ranges (`RESIZE_RANGE`, `CROP_RANGE`, `MEAN_RANGE`, `STD_RANGE`) before anything
is allocated; so are the class list's length (`MAX_CLASSES`) and the builder's `[arch_args]` (every number
finite and at most `MAX_ARCH_NUMBER` in size, lists and tables at most `MAX_ARCH_ITEMS` long).
"""
from __future__ import annotations

import csv
import importlib
import json
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from ..trust import LOCAL, Trust, check_code, check_inside, shown
from .spec import (CROP, IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS, RESIZE, NetworkSpec, build_seeded, derive_spec,
                   require_rgb, unknown_layer_error)
from .state_files import fit_state_dict, read_weights, weights_hash
from .hf_models import PREFIX as HF
from .timm_models import PREFIX as TIMM
from .torchvision_any import (PREFIX as TORCHVISION, build_model, categories_of, default_weights, model_name,
                              preprocessing_of)

CARD_PREFIX = "card:"
#: Built-in networks a card may name as its arch: the backbone with the card's own head (`NetworkSpec.with_classes`).
BUILTIN_BACKBONES = ("efficientnet_lite0", "resnet50", "vgg16")
KNOWN_ENTRIES = ("name", "title", "arch", "arch_args", "weights", "classes", "layer", "stats_images", "preprocess")
PREPROCESS_ENTRIES = ("resize", "crop", "mean", "std", "interpolation")
#: Sensible preprocessing, in px: a larger crop allocates gigabytes per image (crop = 100000: 120 GB).
RESIZE_RANGE = (16, 2048)
CROP_RANGE = (16, 1024)
#: Per channel (red, green, blue), for pixel values in 0…1.
MEAN_RANGE = (0.0, 1.0)
STD_RANGE = (0.001, 10.0)
#: The most classes a class list (and a card's arch_args.num_classes) may name. torchvision sizes the output
#: layer from it before any weights are read: 5 million names make a ResNet-50 head of 5e6 × 2048 floats
#: (~41 GB); the largest common label sets (ImageNet-21k: 21,841) stay well below.
MAX_CLASSES = 100_000
#: The largest size of a number in a card's [arch_args] (widths, image_size, dropout, …): builders allocate
#: from them before the weights are checked (image_size = 1e9 would ask for petabytes).
MAX_ARCH_NUMBER = 100_000
#: The most entries a list or table in [arch_args] may hold, and how deep they may nest.
MAX_ARCH_ITEMS = 16
MAX_ARCH_DEPTH = 3


class ModelCardError(UserError):
    """A model card, or a file it names, that cannot be used; the message is one sentence for users."""


def is_card_key(key) -> bool:
    """Whether a network key names a model card file (a path ending in .toml)."""
    return isinstance(key, os.PathLike) or (isinstance(key, str) and key.lower().endswith(".toml"))


@dataclass
class ModelCard:
    """A parsed model card; paths are absolute."""

    path: Path
    name: str
    arch: str | None
    weights: Path | None = None
    classes: Path | None = None
    layer: str | None = None
    stats_images: Path | None = None
    title: str | None = None
    arch_args: dict = field(default_factory=dict)
    preprocess: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return CARD_PREFIX + self.name


def read_card(path: str | os.PathLike, trust: Trust = LOCAL) -> ModelCard:
    """Parse and check a model card (paths made absolute, relative to the card's folder, and inside it unless
    `trust` allows outside paths)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelCardError(f"Model card not found: {path}.")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ModelCardError(f"The model card {path} is not valid TOML: {err}.") from None
    unknown = [k for k in data if k not in KNOWN_ENTRIES]
    if unknown:
        raise ModelCardError(f"The model card {path} has unknown entries {', '.join(unknown)}; "
                             f"known: {', '.join(KNOWN_ENTRIES)}.")

    def text(name: str) -> str | None:
        value = data.get(name)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise ModelCardError(f"In the model card {path}, {name} must be a non-empty string.")
        return value.strip() if value is not None else None

    def table(name: str) -> dict:
        value = data.get(name, {})
        if not isinstance(value, dict):
            raise ModelCardError(f"In the model card {path}, {name} must be a table ([{name}]).")
        return value

    def file(name: str, *, folder: bool = False) -> Path | None:
        value = text(name)
        if value is None:
            return None
        target = check_inside(value, path.parent, trust, what=f"{name} path")
        if not (target.is_dir() if folder else target.is_file()):
            kind = "folder" if folder else "file"
            raise ModelCardError(f"The model card {path} names the {name} {kind} {value}, "
                                 f"which does not exist ({target}).")
        return target

    arch = text("arch")
    if arch is not None and ":" not in arch and arch not in BUILTIN_BACKBONES:
        raise ModelCardError(f"In the model card {path}, arch must be \"torchvision:NAME\", \"timm:NAME\", "
                             f"\"hf:ORG/NAME\", a built-in backbone ({', '.join(BUILTIN_BACKBONES)}) or "
                             f"\"package.module:function\", not {shown(arch, 60)!r}.")
    preprocess = table("preprocess")
    bad = [k for k in preprocess if k not in PREPROCESS_ENTRIES]
    if bad:
        raise ModelCardError(f"The model card {path} has unknown [preprocess] entries {', '.join(bad)}; "
                             f"known: {', '.join(PREPROCESS_ENTRIES)}.")
    for k, (low, high) in (("resize", RESIZE_RANGE), ("crop", CROP_RANGE)):
        v = preprocess.get(k)
        if k in preprocess and not (isinstance(v, int) and not isinstance(v, bool) and low <= v <= high):
            raise ModelCardError(f"In the model card {path}, preprocess.{k} must be a whole number of pixels from "
                                 f"{low} to {high}, not {shown(v, 20)}.")
    for k, (low, high) in (("mean", MEAN_RANGE), ("std", STD_RANGE)):
        if k in preprocess:
            v = preprocess[k]
            if not (isinstance(v, list) and len(v) == 3
                    and all(isinstance(c, (int, float)) and not isinstance(c, bool) and low <= c <= high
                            for c in v)):
                raise ModelCardError(f"In the model card {path}, preprocess.{k} must be three numbers (red, green, "
                                     f"blue) from {low:g} to {high:g}, not {shown(v, 40)}.")
            preprocess[k] = tuple(float(c) for c in v)
    if "interpolation" in preprocess and preprocess["interpolation"] not in INTERPOLATIONS:
        raise ModelCardError(f"In the model card {path}, preprocess.interpolation must be one of "
                             f"{', '.join(INTERPOLATIONS)}, not {shown(preprocess['interpolation'], 20)}.")
    arch_args = table("arch_args")
    check_builder_args(path, arch_args)
    card = ModelCard(
        path=path.resolve(), name=text("name") or path.stem, arch=arch, weights=file("weights"),
        classes=file("classes"), layer=text("layer"), stats_images=file("stats_images", folder=True),
        title=text("title"), arch_args=arch_args, preprocess=preprocess,
    )
    if card.arch is None and card.weights is None:
        raise ModelCardError(f"The model card {path} names no arch; add arch = \"torchvision:NAME\" or "
                             "\"package.module:function\".")
    return card


def check_builder_args(path: Path, args: dict, *, source: str | None = None, entry: str = "arch_args") -> None:
    """Refuse [arch_args] a builder could allocate without bound from (checked before it runs): numbers must be
    finite and at most MAX_ARCH_NUMBER in size (num_classes a whole number from 1 to MAX_CLASSES), lists and
    tables at most MAX_ARCH_ITEMS long and MAX_ARCH_DEPTH deep.

    source / entry: what the messages name ("the timm model folder x", "model_args"; default: this card's
    arch_args), for other builder arguments read from a file."""
    source = source or f"the model card {path}"

    def check(name: str, value, depth: int) -> None:
        where = f"In {source}, {entry}.{shown(name, 40)}"
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            if name == "num_classes":
                if not (isinstance(value, int) and 1 <= value <= MAX_CLASSES):
                    raise ModelCardError(f"{where} must be a whole number from 1 to {MAX_CLASSES:,}, not "
                                         f"{shown(value, 20)}.")
            elif not (value == value and abs(value) <= MAX_ARCH_NUMBER):  # NaN and ±inf fail too
                raise ModelCardError(f"{where} must be a number from {-MAX_ARCH_NUMBER:,} to {MAX_ARCH_NUMBER:,}, "
                                     f"not {shown(value, 20)}.")
            return
        if isinstance(value, (list, dict)):
            if depth >= MAX_ARCH_DEPTH:
                raise ModelCardError(f"{where} nests lists or tables more than {MAX_ARCH_DEPTH} deep.")
            if len(value) > MAX_ARCH_ITEMS:
                raise ModelCardError(f"{where} must hold at most {MAX_ARCH_ITEMS} entries, not {len(value):,}.")
            items = value.items() if isinstance(value, dict) else ((f"{i}", v) for i, v in enumerate(value))
            for key, item in items:
                check(f"{name}.{key}", item, depth + 1)

    if len(args) > MAX_ARCH_ITEMS:
        table = f"[{entry}]" if entry == "arch_args" else entry  # the card's TOML table, as the user wrote it
        raise ModelCardError(f"{source[0].upper()}{source[1:]} has {len(args):,} {table} entries, more than the "
                             f"{MAX_ARCH_ITEMS} a builder takes here.")
    for key, value in args.items():
        check(str(key), value, 0)


def read_class_list(path: str | os.PathLike) -> list[str]:
    """Class names in index order from a text file (one a line), JSON (list or {index: name}) or CSV (index,name).

    Names may repeat (ImageNet's own list names two classes "crane"); `classes.resolve_class` then asks for the
    index instead of picking one. More than MAX_CLASSES names are refused (the output layer is sized by them)."""
    path = Path(path)
    try:
        content = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise ModelCardError(f"Could not read the class list {path}: {err}.") from None
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            data = json.loads(content)
        except json.JSONDecodeError as err:
            raise ModelCardError(f"The class list {path} is not valid JSON: {err}.") from None
        if isinstance(data, list) and all(isinstance(n, str) for n in data):
            names = data
        elif isinstance(data, dict):
            names = _indexed(path, ((k, v) for k, v in data.items()))
        else:
            raise ModelCardError(f"The class list {path} must be a JSON list of names or an object {{index: name}}.")
    elif suffix == ".csv":
        rows = [r for r in csv.reader(content.splitlines()) if r and any(c.strip() for c in r)]
        if rows and not rows[0][0].strip().lstrip("-").isdigit():
            rows = rows[1:]  # a header row
        if any(len(r) < 2 for r in rows):
            raise ModelCardError(f"The class list {path} must have rows 'index,name'.")
        names = _indexed(path, ((r[0], ",".join(r[1:])) for r in rows))
    else:
        names = [line.strip() for line in content.splitlines() if line.strip()]
    names = [str(n).strip() for n in names]
    if not names:
        raise ModelCardError(f"The class list {path} holds no class names.")
    if len(names) > MAX_CLASSES:
        raise ModelCardError(f"The class list {path} has {len(names):,} names, more than the {MAX_CLASSES:,} a "
                             "network here may have.")
    return names


def _indexed(path: Path, pairs) -> list[str]:
    found: dict[int, str] = {}
    for index, name in pairs:
        try:
            found[int(str(index).strip())] = str(name).strip()
        except ValueError:
            raise ModelCardError(f"The class list {path} has a non-integer index {index!r}.") from None
    if sorted(found) != list(range(len(found))):
        raise ModelCardError(f"The class list {path} must number its classes 0 to {len(found) - 1} without gaps.")
    return [found[i] for i in range(len(found))]


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


def _output_size(model: nn.Module, crop: int) -> int | None:
    try:
        with torch.no_grad():
            out = model.eval()(torch.zeros(1, 3, crop, crop))
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
    weights_file = card.weights
    if weights not in (None, "pretrained", "random"):
        weights_file = Path(weights).expanduser()
    state = None
    if weights != "random" and weights_file is not None:
        state = read_weights(weights_file, trust_pickle=trust_pickle)
    # The spec's title reaches tables, figures and many messages: at most SHOWN_CHARS of the card's.
    title = shown(card.title or f"{card.name} (model card)")

    if card.arch in BUILTIN_BACKBONES:
        return _builtin_with_head(card, classes, state, weights, weights_file, title)
    source_categories: list[str] = []  # the architecture's own class names, used when the outputs fit them
    prep: dict = {}
    blocks = None  # the source's readable layers (timm, Hugging Face): crop size → names
    if isinstance(state, nn.Module) and card.arch is None:
        model, state = state, None
    elif card.arch is None:
        raise ModelCardError(f"The model card {card.path} names no arch; add arch = \"torchvision:NAME\" or "
                             "\"package.module:function\".",
                             cli_hint="Only a whole pickled module loaded with --trust-pickle needs none.")
    elif card.arch.startswith(TORCHVISION):
        tv_name = model_name(card.arch)
        tv_weights = default_weights(tv_name)
        prep = preprocessing_of(tv_weights)
        source_categories = categories_of(tv_weights)
        kwargs = dict(card.arch_args)
        if classes is not None:
            kwargs.setdefault("num_classes", len(classes))
        try:
            model = build_model(tv_name, **kwargs)
        except (TypeError, ValueError) as err:
            raise ModelCardError(f"Could not build {card.arch} with {shown(kwargs, 120)}: {shown(err, 160)}.") from None
    elif card.arch.startswith(TIMM):
        from . import timm_models

        kwargs = dict(card.arch_args)
        if classes is not None:
            kwargs.setdefault("num_classes", len(classes))
        model = timm_models.build_timm(timm_models.timm_name(card.arch), **kwargs)
        require_rgb(timm_models.input_channels(model), title)
        prep, source_categories = timm_models.preprocessing_of(model), timm_models.categories_of(model)
        blocks = lambda crop: timm_models.layer_names(model, crop)  # noqa: E731 - after the weights are in
    elif card.arch.startswith(HF):
        from . import hf_models

        kwargs = dict(card.arch_args)
        if classes is not None:  # the card's head: as many outputs as names, named by them
            kwargs.setdefault("id2label", dict(enumerate(classes)))
            kwargs.setdefault("label2id", {name: i for i, name in enumerate(classes)})
        model, prep, source_categories = hf_models.architecture_from_hub(card.arch, trust, **kwargs)
        blocks = lambda crop: hf_models.layer_names(model, crop)  # noqa: E731
    else:
        builder = import_builder(card.arch, card.path.parent, trust, card=card.path)
        try:
            with torch.random.fork_rng(devices=[]):  # seeded for reproducible random weights; global RNG untouched
                torch.manual_seed(0)
                model = builder(**card.arch_args)
        except Exception as err:  # noqa: BLE001 - the user's code
            raise ModelCardError(f"The builder {card.arch} failed: {type(err).__name__}: {err}.") from None
        if not isinstance(model, nn.Module):
            raise ModelCardError(f"The builder {card.arch} returned {type(model).__name__}, not a torch nn.Module.")
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if state is not None:
        fit_state_dict(model, state, title, classes=len(classes) if classes is not None else None)
    prep = {"resize": RESIZE, "crop": CROP, "mean": IMAGENET_MEAN, "std": IMAGENET_STD, **prep, **card.preprocess}

    outputs = _output_size(model, prep["crop"])
    if classes is not None and outputs is not None and outputs != len(classes):
        raise ModelCardError(f"The class list {card.classes} has {len(classes)} names but the network has "
                             f"{outputs} outputs.")
    if classes is None:
        classes = source_categories if outputs is not None and outputs == len(source_categories) else []
    weights_id = _card_weights_id(card, weights, weights_file)
    spec = derive_spec(
        model, card.key, title, input_size=prep["crop"], default_layer=card.layer, guess_cam_layer=True,
        layer_names=blocks(prep["crop"]) if blocks else None,
        categories=(lambda: list(classes)) if classes else None,
        stats_images=str(card.stats_images) if card.stats_images else None,
        note=f"From the model card {card.path}; layers discovered by a dry forward pass.", **prep,
    )
    return spec, model, weights_id, classes


def _card_weights_id(card: ModelCard, weights, weights_file: Path | None) -> str:
    """The weights id of a card's network: "random", "builder" (no file: the builder's own weights) or the file's
    hash."""
    if weights == "random" or weights_file is None:
        return "random" if weights == "random" else "builder"
    return weights_hash(weights_file)


def _builtin_with_head(card: ModelCard, classes: list[str] | None, state, weights, weights_file: Path | None,
                       title: str) -> tuple[NetworkSpec, nn.Module, str, list[str]]:
    """A built-in backbone with the card's head (`arch = "efficientnet_lite0"`, …): the built-in's spec (paper layer
    names, stage list, preprocessing, Grad-CAM and LRP) with the card's classes, weights and overrides."""
    from dataclasses import replace

    from . import REGISTRY

    base = REGISTRY[card.arch]
    if card.arch_args:
        raise ModelCardError(f"The model card {card.path} names the built-in {card.arch}, which takes no [arch_args]; "
                             "its head is sized by the class list.")
    names = classes if classes is not None else (base.categories() if base.categories else [])
    model = build_seeded(lambda: base.with_classes(len(names)))
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if state is not None:
        fit_state_dict(model, state, title, classes=len(names))
    if card.layer and card.layer not in base.layers:
        raise unknown_layer_error(title, card.layer, base.layers)
    spec = replace(
        base, key=card.key, title=title, build=lambda st: model if st is None else fit_state_dict(model, st, title),
        default_layer=card.layer or base.default_layer, weights=None,
        categories=(lambda: list(names)) if names else None,
        stats_images=str(card.stats_images) if card.stats_images else None,
        note=f"From the model card {card.path}: the built-in {base.title} backbone with its own head.",
        **card.preprocess,
    )
    return spec, model, _card_weights_id(card, weights, weights_file), list(names)


def _toml_value(value) -> str:
    """A TOML literal for a string, an integer, a finite float or a list of those (JSON's string escapes are TOML's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ModelCardError(f"A model card cannot hold the number {value}.")
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def card_text(*, arch: str, weights: str | os.PathLike | None = None, classes: str | os.PathLike | None = None,
              layer: str | None = None, stats_images: str | os.PathLike | None = None, name: str | None = None,
              title: str | None = None, preprocess: dict | None = None) -> str:
    """The TOML of a model card with these entries (None: left out); paths as given (relative to the card)."""
    entries = {"name": name, "title": title, "arch": arch, "weights": weights, "classes": classes, "layer": layer,
               "stats_images": stats_images}
    lines = [f"{key} = {_toml_value(str(value) if isinstance(value, os.PathLike) else value)}"
             for key, value in entries.items() if value is not None]
    prep = {k: v for k, v in (preprocess or {}).items() if v is not None}
    bad = [k for k in prep if k not in PREPROCESS_ENTRIES]
    if bad:
        raise ModelCardError(f"Unknown preprocessing entries {', '.join(bad)}; known: {', '.join(PREPROCESS_ENTRIES)}.")
    if prep:
        lines += ["", "[preprocess]"] + [f"{k} = {_toml_value(list(v) if k in ('mean', 'std') else v)}"
                                         for k, v in prep.items()]
    return "\n".join(lines) + "\n"


def write_card(path: str | os.PathLike, *, trust: Trust = LOCAL, **entries) -> ModelCard:
    """Write a model card (entries as `card_text` takes them) and read it back with `trust` (which paths
    outside the card's folder it may name): the parsed card, or the reader's message (a named file that does
    not exist, a bad entry, a refused path) with no file left behind."""
    path = Path(path).expanduser()
    if path.suffix.lower() != ".toml":
        raise ModelCardError(f"A model card's file name ends in .toml, not {path.name}.")
    text = card_text(**entries)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        read_card(tmp, trust)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return read_card(path, trust)
