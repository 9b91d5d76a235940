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
bands, read from .npy or TIFF files: `band_images.load_input`). The source says how many (timm's first convolution,
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
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import UserError
from ..images import MAX_BANDS, ImageError
from ..band_images import check_display_bands
from ..heads import HEADS
from ..trust import LOCAL, Trust, check_card_images, check_inside, shown
from .spec import INTERPOLATIONS
from .state_files import folder_given

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



def _one_line(text: str | None) -> str | None:
    """A card's title as one line: its line breaks and runs of spaces one space each. A TOML string may hold a
    line break, which the menu and the captions dropped, joining the words on either side."""
    return " ".join(text.split()) if text is not None else None

def read_card(path: str | os.PathLike, trust: Trust = LOCAL) -> ModelCard:
    """Parse and check a model card (paths made absolute, relative to the card's folder, and inside it unless
    `trust` allows outside paths)."""
    path = Path(path).expanduser()
    entries = _Entries(path, _toml_of(path), trust)
    arch = entries.text("arch")
    if arch is not None and ":" not in arch and arch not in BUILTIN_BACKBONES:
        raise ModelCardError(f"In the model card {path}, arch must be \"torchvision:NAME\", \"timm:NAME\", "
                             f"\"hf:ORG/NAME\", a built-in backbone ({', '.join(BUILTIN_BACKBONES)}) or "
                             f"\"package.module:function\", not {shown(arch, 60)!r}.")
    channels = _channels(path, entries.data.get("channels"))
    display_bands = _display_bands(path, entries.data.get("display_bands"), channels)
    preprocess = _preprocess(path, entries.table("preprocess"), channels)
    arch_args = entries.table("arch_args")
    check_builder_args(path, arch_args)
    head = entries.data.get("head")
    if head is not None and head not in HEADS:
        raise ModelCardError(f"In the model card {path}, head must be one of {', '.join(HEADS)}, not "
                             f"{shown(head, 20)!r}.")
    card = ModelCard(
        path=path.resolve(), name=entries.text("name") or default_card_name(path), arch=arch,
        weights=entries.file("weights"), classes=entries.file("classes"), layer=entries.text("layer"),
        stats_images=entries.file("stats_images", folder=True, images=True),
        title=_one_line(entries.text("title")),
        arch_args=arch_args, preprocess=preprocess, head=head, channels=channels, display_bands=display_bands,
    )
    card.model_folder = entries.file("model_folder", folder=True)
    if card.model_folder is not None and (card.arch is not None or card.arch_args or card.weights is not None):
        raise ModelCardError(f"The model card {path} names a model_folder, which brings its own architecture and "
                             "weights, so it takes no arch, arch_args or weights.")
    if card.arch is None and card.weights is None and card.model_folder is None:
        raise ModelCardError(f"The model card {path} names no arch; add arch = \"torchvision:NAME\" or "
                             "\"package.module:function\".")
    return card


def _toml_of(path: Path) -> dict:
    """The card's TOML as a table of known entries, or a ModelCardError saying what is wrong with the file."""
    if not path.is_file():
        raise ModelCardError(f"Model card not found: {path}.")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ModelCardError(f"The model card {path} is not valid TOML: {err}.") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables by recursion
        raise ModelCardError(f"The model card {path} nests arrays or tables too deep to read.") from None
    unknown = [k for k in data if k not in KNOWN_ENTRIES]
    if unknown:
        raise ModelCardError(f"The model card {path} has unknown entries {', '.join(unknown)}; "
                             f"known: {', '.join(KNOWN_ENTRIES)}.")
    return data


class _Entries:
    """A card's entries read as what they must be: a non-empty text, a table, a file or folder inside the card's
    folder (or where `trust` allows); each refusal names the card and the entry."""

    def __init__(self, path: Path, data: dict, trust: Trust):
        self.path, self.data, self.trust = path, data, trust

    def text(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise ModelCardError(f"In the model card {self.path}, {name} must be a non-empty string.")
        return value.strip() if value is not None else None

    def table(self, name: str) -> dict:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise ModelCardError(f"In the model card {self.path}, {name} must be a table ([{name}]).")
        return value

    def file(self, name: str, *, folder: bool = False, images: bool = False) -> Path | None:
        value = self.text(name)
        if value is None:
            return None
        check = check_card_images if images else check_inside  # images for statistics: where typed folders may be
        target = check(value, self.path.parent, self.trust, what=f"{name} path")
        if not folder and target.is_dir():  # a folder where the file is expected: which file to choose
            raise ModelCardError(f"The model card {self.path} names the {name} file {shown(value)}, which "
                                 f"{folder_given(target, f'{name} file')}.")
        if not (target.is_dir() if folder else target.is_file()):
            kind = "folder" if folder else "file"
            raise ModelCardError(f"The model card {self.path} names the {name} {kind} {value}, "
                                 f"which does not exist ({target}).")
        return target


def _channels(path: Path, channels) -> int | None:
    """The card's input channel count (None: the architecture's), a whole number from 1 to MAX_BANDS."""
    if channels is not None and not (isinstance(channels, int) and not isinstance(channels, bool)
                                     and 1 <= channels <= MAX_BANDS):
        raise ModelCardError(f"In the model card {path}, channels must be a whole number from 1 to {MAX_BANDS}, not "
                             f"{shown(channels, 20)}.")
    return channels


def _display_bands(path: Path, display_bands, channels: int | None) -> tuple[int, int, int] | None:
    """The three bands shown as red, green, blue; checked against the channel count once it is known
    (`cards.load_card`), whole numbers from 0 already here."""
    if display_bands is None:
        return None
    try:
        check_display_bands(display_bands, channels or MAX_BANDS)
    except ImageError as err:
        raise ModelCardError(f"In the model card {path}, {err.message}") from None
    return tuple(display_bands)


def _preprocess(path: Path, preprocess: dict, channels: int | None) -> dict:
    """The [preprocess] table checked against its ranges (mean and std made tuples of floats)."""
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
    return preprocess


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
        except RecursionError:  # json reads nested lists and objects by recursion
            raise ModelCardError(f"The class list {path} nests lists or objects too deep to read.") from None
        if isinstance(data, list) and all(isinstance(n, str) for n in data):
            names = data
        elif isinstance(data, dict):
            names = _indexed(path, ((k, v) for k, v in data.items()))
        else:
            raise ModelCardError(f"The class list {path} must be a JSON list of names or an object {{index: name}}.")
    elif suffix == ".csv":
        rows = [r for r in csv.reader(_lines(path, content)) if r and any(c.strip() for c in r)]
        if rows and not rows[0][0].strip().lstrip("-").isdigit():
            rows = rows[1:]  # a header row
        if any(len(r) < 2 for r in rows):
            raise ModelCardError(f"The class list {path} must have rows 'index,name'.")
        names = _indexed(path, ((r[0], ",".join(r[1:])) for r in rows))
    else:
        names = [line.strip() for line in _lines(path, content)]
    names = [str(n).strip() for n in names]
    if not names:
        raise ModelCardError(f"The class list {path} holds no class names.")
    if len(names) > MAX_CLASSES:
        raise ModelCardError(f"The class list {path} has {len(names):,} names, more than the {MAX_CLASSES:,} a "
                             "network here may have.")
    return names


#: The most non-blank lines of a text or CSV class list read before it is refused: room for MAX_CLASSES names, a
#: header and stray lines, while a file of millions of one-letter lines under the size cap (each line a Python
#: string of ~50 bytes) never becomes millions of strings.
MAX_CLASS_LINES = 2 * MAX_CLASSES
#: Where str.splitlines breaks lines: `_lines` finds the same lines one at a time.
_LINE = re.compile("[^\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]+")


def _lines(path: Path, content: str) -> Iterator[str]:
    """The non-blank lines of `content` (as str.splitlines cuts them), one at a time; a ModelCardError once more
    than MAX_CLASS_LINES are read."""
    count = 0
    for match in _LINE.finditer(content):
        line = match.group()
        if line.strip():
            count += 1
            if count > MAX_CLASS_LINES:
                raise ModelCardError(f"The class list {path} has more than {MAX_CLASS_LINES:,} lines, more than the "
                                     f"{MAX_CLASSES:,} names a network here may have.")
            yield line


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
            raise ModelCardError(f"The class list {path} has a non-integer index {shown(str(index), 40)!r}.") from None
    if sorted(found) != list(range(len(found))):
        raise ModelCardError(f"The class list {path} must number its classes 0 to {len(found) - 1} without gaps.")
    return [found[i] for i in range(len(found))]


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
