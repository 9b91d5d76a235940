"""Model cards: your own network described by a small TOML file, loaded safely.

    # mynet.toml — paths are relative to this file
    arch = "torchvision:resnet50"        # or "timm:NAME", "hf:ORG/NAME", a built-in backbone ("efficientnet_lite0",
                                         # "resnet50", "vgg16"), or "package.module:function" returning an nn.Module
    weights = "mynet.pth"                # state dict: .pth / .pt (torch.save(model.state_dict(), …)) or .safetensors
    classes = "classes.txt"              # one name a line; or JSON (list, {index: name}); or CSV index,name
    layer = "layer3"                     # optional: default layer (else the derived spec's rule)
    stats_images = "photos"              # optional: image folder for the feature statistics
    name = "mynet"                       # optional: the network's key is card:<name> (default: the file stem;
                                         # a card.toml is named by its folder)
    title = "My ResNet-50"               # optional: shown in tables and figures
    head = "softmax"                     # optional: "softmax" (default), "sigmoid" (multi-label) or "binary"
    channels = 4                         # optional: input channels (default: the source's, else the first conv's)
    display_bands = [2, 1, 0]            # optional, for more than 3 bands: shown as red, green, blue (from 0)

    [arch_args]                          # optional: keyword arguments of the builder
    [preprocess]                         # optional: resize, crop, mean, std, interpolation
    resize = 256
    crop = 224
    mean = [0.485, 0.456, 0.406]
    std = [0.229, 0.224, 0.225]

`channels`: a network may take 1 channel (grayscale: X-ray, CT, microscopy) or more than 3 (multispectral
bands, read from .npy or TIFF files: `images.load_input`). The source says how many (timm's first convolution,
transformers' num_channels, else the first convolution of the built network); `channels` names it where nothing
can be found, and must agree with what is found. `[preprocess]` mean and std then have one number per channel
(the source's RGB defaults are averaged for other channel counts: `spec.fit_channels`). `display_bands` picks the
three bands (counted from 0) the app and figures show as red, green, blue (default: the first three). A network of
more than 3 bands needs `stats_images` (a folder of its .npy or .tif files): the offline photos are RGB.

`head` says what the outputs mean (`iba_core.heads`): "softmax" (exclusive classes, the default), "sigmoid"
(multi-label: one independent probability per label) or "binary" (one output for a class list of two names,
negative then positive: the builders get one output). Without it, a Hugging Face architecture whose config says
problem_type "multi_label_classification" is "sigmoid", and a network with one output and two class names is
"binary"; otherwise "softmax".

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

`model_folder = "model"` (instead of arch and weights) names a model folder beside the card: timm's `save_for_hf`
or transformers' `save_pretrained` layout (`model_folders.py`), which brings the architecture, the weights, the
class names and the preprocessing. The card adds its name, title, default layer, statistics images and
`[preprocess]` overrides, and may rename the classes (a class list of as many names as the model has outputs).
Its path stays inside the card's folder like every card path; the app's "Add your network" form copies a folder
there (`app.models`).

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
from ..images import MAX_BANDS, ImageError, check_display_bands
from ..heads import HEADS, check_fits, output_count
from ..trust import LOCAL, Trust, check_card_images, check_code, check_inside, shown
from .model_size import WeightsCheck, build_seeded, check_size
from .spec import (CROP, IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS, RESIZE, NetworkSpec, derive_spec,
                   fit_channels, input_channels_of, unknown_layer_error)
from .state_files import WeightsMismatchError, fit_state_dict, folder_given, read_weights, weights_hash
from .state_match import source_hint

CARD_PREFIX = "card:"
#: Built-in networks a card may name as its arch: the backbone with the card's own head (`NetworkSpec.with_classes`).
BUILTIN_BACKBONES = ("efficientnet_lite0", "resnet50", "vgg16")
KNOWN_ENTRIES = ("name", "title", "arch", "arch_args", "weights", "classes", "layer", "stats_images", "preprocess",
                 "head", "channels", "display_bands", "model_folder")
PREPROCESS_ENTRIES = ("resize", "crop", "mean", "std", "interpolation")
#: Sensible preprocessing, in px: a larger crop allocates gigabytes per image (crop = 100000: 120 GB).
RESIZE_RANGE = (16, 2048)
CROP_RANGE = (16, 1024)
#: Per input channel, for pixel values in 0…1 (one number per channel: `channels`).
MEAN_RANGE = (0.0, 1.0)
STD_RANGE = (0.001, 10.0)
#: The most classes a class list (and a card's arch_args.num_classes) may name. torchvision sizes the output
#: layer from it before any weights are read: 5 million names make a ResNet-50 head of 5e6 × 2048 floats
#: (~41 GB); the largest common label sets (ImageNet-21k: 21,841) stay well below.
MAX_CLASSES = 100_000
#: The largest class-list file read, checked before a byte of it is read (a 1 GB upload would otherwise be read whole
#: and split into lines): MAX_CLASSES names of 160 characters, about ImageNet-21k's longest WordNet glosses. Its whole
#: list of 21,841 names is about 1 MB.
MAX_CLASS_LIST_BYTES = 16 * 2**20
#: The largest size of a number in a card's [arch_args] (widths, image_size, dropout, …): builders allocate
#: from them before the weights are checked (image_size = 1e9 would ask for petabytes).
MAX_ARCH_NUMBER = 100_000
#: The most entries a list or table in [arch_args] may hold, and how deep they may nest.
MAX_ARCH_ITEMS = 16
MAX_ARCH_DEPTH = 3
#: Said when weights do not fit a two-class card without a head: torchvision, timm and Hugging Face builders get
#: one output per name unless the card says head = "binary".
BINARY_HINT = 'A binary classifier with one output needs head = "binary" in the model card.'


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
    model_folder: Path | None = None  # a timm or transformers model folder inside the card's folder
    title: str | None = None
    arch_args: dict = field(default_factory=dict)
    preprocess: dict = field(default_factory=dict)
    head: str | None = None  # `heads.HEADS`; None: not declared (see the module docstring)
    channels: int | None = None  # input channels; None: found from the network
    display_bands: tuple[int, int, int] | None = None  # bands shown as red, green, blue (from 0); None: the first

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

    def file(name: str, *, folder: bool = False, images: bool = False) -> Path | None:
        value = text(name)
        if value is None:
            return None
        check = check_card_images if images else check_inside  # images for statistics: where typed folders may be
        target = check(value, path.parent, trust, what=f"{name} path")
        if not folder and target.is_dir():  # a folder where the file is expected: which file to choose
            raise ModelCardError(f"The model card {path} names the {name} file {shown(value)}, which "
                                 f"{folder_given(target, f'{name} file')}.")
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
    channels = data.get("channels")
    if channels is not None and not (isinstance(channels, int) and not isinstance(channels, bool)
                                     and 1 <= channels <= MAX_BANDS):
        raise ModelCardError(f"In the model card {path}, channels must be a whole number from 1 to {MAX_BANDS}, not "
                             f"{shown(channels, 20)}.")
    display_bands = data.get("display_bands")
    if display_bands is not None:
        try:  # the range once the channel count is known (`load_card`); whole numbers from 0 already here
            check_display_bands(display_bands, channels or MAX_BANDS)
        except ImageError as err:
            raise ModelCardError(f"In the model card {path}, {err.message}") from None
        display_bands = tuple(display_bands)
    for k, (low, high) in (("mean", MEAN_RANGE), ("std", STD_RANGE)):
        if k in preprocess:
            v = preprocess[k]
            count = (f"{channels} number{'s' if channels > 1 else ''} (one per input channel)" if channels
                     else "one number per input channel")
            if not (isinstance(v, list) and 1 <= len(v) <= MAX_BANDS and (channels is None or len(v) == channels)
                    and all(isinstance(c, (int, float)) and not isinstance(c, bool) and low <= c <= high
                            for c in v)):
                raise ModelCardError(f"In the model card {path}, preprocess.{k} must be {count} from {low:g} to "
                                     f"{high:g}, not {shown(v, 40)}.")
            preprocess[k] = tuple(float(c) for c in v)
    if "interpolation" in preprocess and preprocess["interpolation"] not in INTERPOLATIONS:
        raise ModelCardError(f"In the model card {path}, preprocess.interpolation must be one of "
                             f"{', '.join(INTERPOLATIONS)}, not {shown(preprocess['interpolation'], 20)}.")
    arch_args = table("arch_args")
    check_builder_args(path, arch_args)
    head = data.get("head")
    if head is not None and head not in HEADS:
        raise ModelCardError(f"In the model card {path}, head must be one of {', '.join(HEADS)}, not "
                             f"{shown(head, 20)!r}.")
    card = ModelCard(
        path=path.resolve(), name=text("name") or default_card_name(path), arch=arch, weights=file("weights"),
        classes=file("classes"), layer=text("layer"), stats_images=file("stats_images", folder=True, images=True),
        title=text("title"), arch_args=arch_args, preprocess=preprocess, head=head, channels=channels,
        display_bands=display_bands,
    )
    card.model_folder = file("model_folder", folder=True)
    if card.model_folder is not None and (card.arch is not None or card.arch_args or card.weights is not None):
        raise ModelCardError(f"The model card {path} names a model_folder, which brings its own architecture and "
                             "weights, so it takes no arch, arch_args or weights.")
    if card.arch is None and card.weights is None and card.model_folder is None:
        raise ModelCardError(f"The model card {path} names no arch; add arch = \"torchvision:NAME\" or "
                             "\"package.module:function\".")
    return card


#: File names that say nothing about the network: such a card is named by its folder (models/skin/card.toml →
#: card:skin), so that two networks laid out that way do not share one key (and its caches, links, run folders).
GENERIC_CARD_STEMS = ("card", "model", "model_card", "config")


def default_card_name(path: Path) -> str:
    """The name of a card without `name`: its file's stem, or its folder's name for a generic file name."""
    stem = path.stem
    if stem.lower() in GENERIC_CARD_STEMS and path.resolve().parent.name:
        return path.resolve().parent.name
    return stem


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
        check_class_list_size(path.stat().st_size, path)
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


def check_class_list_size(size: int, name: str | os.PathLike) -> None:
    """One sentence for a class list of `size` bytes above `MAX_CLASS_LIST_BYTES`, before it is read."""
    if size > MAX_CLASS_LIST_BYTES:
        raise ModelCardError(f"The class list {shown(name)} is {size / 2**20:,.0f} MB, larger than the "
                             f"{MAX_CLASS_LIST_BYTES // 2**20} MB a list of {MAX_CLASSES:,} names needs, so it is not "
                             "read; give one name a line.")


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


def card_text(*, arch: str | None = None, weights: str | os.PathLike | None = None,
              classes: str | os.PathLike | None = None,
              layer: str | None = None, stats_images: str | os.PathLike | None = None, name: str | None = None,
              title: str | None = None, preprocess: dict | None = None, head: str | None = None,
              model_folder: str | os.PathLike | None = None) -> str:
    """The TOML of a model card with these entries (None: left out); paths as given (relative to the card)."""
    entries = {"name": name, "title": title, "arch": arch, "weights": weights, "classes": classes, "layer": layer,
               "stats_images": stats_images, "head": head,
               "model_folder": model_folder}
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
