"""Your networks in the app: the network menu (built-ins, the model cards in the models folder, any torchvision
classifier) and adding a network from uploaded files (a model card written into the models folder).

The models folder is `settings.models_dir()` (IBA_MODELS_DIR). `find_cards` lists the cards in it and one
folder level below. The "Add your network" form takes every source a card can name (`NETWORK_SOURCES`): a
torchvision classifier, a timm model, a Hugging Face model id (its architecture from the hub or its cache) or a
built-in backbone with your head, each with an uploaded state_dict; or a model folder (timm's save_for_hf or
transformers' save_pretrained layout), uploaded as its files or given by its path on the server. The class list is
optional: without it the source's own names are used (timm's label_names, Hugging Face's id2label, ImageNet's), and
a state_dict whose output layer differs says to give one.

Two steps, one way of loading: `preview_network` writes the candidate card into a working folder, loads it once
and returns what was read (`NetworkPreview`: classes, preprocessing, channels, head, default layer), then removes
the folder; `add_network` does the same and renames the working folder to <folder>/<name>/ (<name>.toml, the
weights and class list beside it; a model folder copied into <name>/model/, which the card names as its
`model_folder`). A state dict that does not fit, a class list of the wrong length or a layer the network does not
have gives the library's message (a file that fits another source names it: `networks.state_match`), and nothing
is left in the folder. Weights are only ever read safely (tensors, no unpickling: `networks.state_files`).

What the app may do is its owner's `Trust` (`iba_core.trust`, `Trust.for_app`), passed in by the page: code
model cards run and card paths leave the card's folder only with IBA_TRUST_CODE=1; a path on the server typed
into the form is read only inside the models folder and the IBA_DATA_DIRS folders (anywhere when the app
listens on localhost only), and checked before anything is read. The form never writes a card with a code builder.
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import USER_ERRORS, UserError
from ..heads import SIMILARITY
from ..networks import DEFAULT_NETWORK, REGISTRY
from ..networks.card_format import (BUILTIN_BACKBONES, CARD_PREFIX, ModelCardError, check_class_list_size,
                                    default_card_name, is_card_key, read_card, write_card)
from ..networks.cards import load_card
from ..networks.hf_models import PREFIX as HF_PREFIX, repo_id
from ..networks.model_folders import read_folder
from ..networks.spec import UnknownModelError
from ..networks.state_files import WEIGHTS_SUFFIXES, WeightsMismatchError, folder_given_error
from ..networks.timm_models import PREFIX as TIMM_PREFIX
from ..networks.torchvision_any import PREFIX as TORCHVISION_PREFIX, classification_models
from ..settings import models_dir
from ..trust import Trust, check_server_path, shown, visitor_path
from .error_log import error_text

#: The network menu's entry that opens the choice of a torchvision classifier.
TORCHVISION_CHOICE = TORCHVISION_PREFIX
#: The torchvision classifier offered first.
DEFAULT_TORCHVISION = "resnet18"
#: The architecture the "Add your network" form offers first.
DEFAULT_ARCH = "resnet50"
#: The sources the "Add your network" form offers, by key, with their names in the form.
NETWORK_SOURCES = {
    "torchvision": "torchvision classifier",
    "timm": "timm model",
    "hf": "Hugging Face model",
    "builtin": "Built-in backbone with your head",
    "folder": "Model folder (timm or transformers, a CLIP model too)",
}
#: A CLIP model folder's tokenizer files (`networks.clip_models.read_tokenizer`: tokenizer.json, or vocab.json and
#: merges.txt, with their settings): taken and copied with the folder, so its prompts can be read.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
#: The files of a model folder the form takes (uploaded together, or copied from a folder on the server).
FOLDER_FILES = ("config.json", "preprocessor_config.json", "model.safetensors", "pytorch_model.bin", *TOKENIZER_FILES)
#: A model folder's weights, in the order they are looked for (`model_folders.WEIGHTS_FILES`).
FOLDER_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: Where in <models>/<name>/ the form copies a model folder (the card's `model_folder`).
MODEL_SUBFOLDER = "model"
#: How many class names the preview lists.
PREVIEW_CLASSES = 5
CLASS_SUFFIXES = (".txt", ".json", ".csv")
#: A network's name: its folder, its card's file name and its key (card:<name>).
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: The longest title the form takes: it is shown in the menu, figures and messages of every visitor.
MAX_TITLE_CHARS = 80


# ---- the network menu ----------------------------------------------------------------------------


@dataclass
class CardChoice:
    """A model card found in the models folder; `error` says why it cannot be used (then the rest is a guess)."""

    path: Path
    name: str
    title: str = ""
    stats_images: Path | None = None
    error: str = ""

    @property
    def key(self) -> str:
        """The key the app loads it by (its path: load_network takes a card's path)."""
        return str(self.path)

    @property
    def label(self) -> str:
        return f"{self.title or self.name} (your network)"


def find_cards(folder: str | os.PathLike | None = None, trust: Trust | None = None) -> list[CardChoice]:
    """The model cards (*.toml) in `folder` (default: the models folder) and its subfolders one level down,
    by name; unreadable ones (and those whose paths `trust`, default the app's, does not allow) carry their
    reason in `error`."""
    trust = trust if trust is not None else Trust.for_app()
    root = Path(folder).expanduser() if folder is not None else models_dir()
    if not root.is_dir():
        return []
    found: list[CardChoice] = []
    for path in sorted([*root.glob("*.toml"), *root.glob("*/*.toml")]):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # hidden files and the folders add_network works in
        try:
            card = read_card(path, trust)
        except UserError as err:  # ModelCardError, NotTrustedError
            found.append(CardChoice(path.resolve(), default_card_name(path), error=error_text(err)))
            continue
        found.append(CardChoice(card.path, card.name, card.title or "", card.stats_images))
    return sorted(found, key=lambda c: (c.name.lower(), str(c.path)))


def network_options(cards: list[CardChoice]) -> list[str]:
    """The network menu: the built-ins, the usable cards (by path), then the torchvision entry."""
    return [*REGISTRY, *(c.key for c in cards if not c.error), TORCHVISION_CHOICE]


def network_label(option: str, cards: list[CardChoice]) -> str:
    """How the menu shows an option: a built-in's title, a card's title or name, the torchvision entry."""
    if option in REGISTRY:
        return REGISTRY[option].title
    if option == TORCHVISION_CHOICE:
        return "Any torchvision classifier…"
    card = next((c for c in cards if c.key == option), None)
    return card.label if card is not None else Path(option).stem


def kept_option(kept: str | None, options: list[str]) -> str:
    """The menu's choice to restore: the one kept from before if it is still offered (a card may have been
    removed meanwhile), else the default network."""
    return kept if kept in options else DEFAULT_NETWORK


def torchvision_names() -> list[str]:
    """torchvision's classification builders, for the menu and the form's architecture choice."""
    return classification_models()


def torchvision_key(name: str) -> str:
    return TORCHVISION_PREFIX + name


def source_version(key: str, trust: Trust | None = None) -> int:
    """Changes when a card (or its weights file) changes, so the app loads it anew; 0 for other networks."""
    if not is_card_key(key):
        return 0
    stamp = 0
    paths = [Path(key)]
    try:
        card = read_card(key, trust if trust is not None else Trust.for_app())
        if card.weights is not None:
            paths.append(card.weights)
    except UserError:  # ModelCardError, NotTrustedError: loading says why
        pass
    for path in paths:
        try:
            stamp += path.stat().st_mtime_ns
        except OSError:
            pass
    return stamp


def is_card_network(network) -> bool:
    """Whether a loaded network comes from a model card (its key is card:<name>)."""
    return str(getattr(network, "key", "")).startswith(CARD_PREFIX)


def source_note(key: str, network, trust: Trust | None = None) -> str:
    """A caption for the chosen network: where it comes from (a card as `trust`'s person may see it: relative to
    the models folder for a served app's visitor, `visitor_path`; default the local user) and its classes."""
    spec = network.spec
    if is_card_network(network):
        shown_key = visitor_path(key, trust) if trust is not None else str(key)
        path = shown_key.replace("`", "'")  # inside the Markdown code span
        what = ("a CLIP model, explaining text prompts" if getattr(spec, "head", "") == SIMILARITY else
                f"{len(network.categories)} classes")
        return (f"Your network from the model card `{path}`: {what}, input "
                f"{spec.resize} → {spec.crop} px, default layer {spec.default_layer}.")
    return spec.note or ""


# ---- adding a network ----------------------------------------------------------------------------


@dataclass
class FileGiven:
    """A file for the form: uploaded (name and bytes) or on this machine (path; name is its file name)."""

    name: str
    data: bytes | None = None
    path: Path | None = None

    @classmethod
    def upload(cls, name: str, data: bytes) -> "FileGiven":
        return cls(Path(name).name, data=data)

    @classmethod
    def local(cls, path: str | os.PathLike) -> "FileGiven":
        path = Path(path).expanduser()
        return cls(path.name, path=path)

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix.lower()

    def size(self) -> int:
        """Its bytes: the upload's length, or the file's size on this machine (0 when there is none), unread."""
        if self.data is not None:
            return len(self.data)
        return self.path.stat().st_size if self.path is not None and self.path.is_file() else 0

    def copy_to(self, target: Path) -> None:
        if self.data is not None:
            target.write_bytes(self.data)
            return
        if self.path is None or not self.path.is_file():
            raise ModelCardError(f"File not found: {self.path}.")
        shutil.copyfile(self.path, target)


@dataclass
class NewNetwork:
    """What the "Add your network" form gives.

    source (`NETWORK_SOURCES`) and arch: "torchvision" with a classification builder (NAME or torchvision:NAME),
    "timm" with a timm model (NAME or timm:NAME), "hf" with a Hugging Face id (ORG/NAME or hf:ORG/NAME), "builtin"
    with a built-in backbone's key; each with `weights`, a state_dict. "folder" takes no arch and no weights: the
    folder's files (`folder_files`: config.json, model.safetensors, optionally preprocessor_config.json) or its
    path on this machine (`folder_path`). `classes` is optional for every source."""

    name: str
    arch: str
    weights: FileGiven | None
    classes: FileGiven | None
    title: str = ""
    layer: str = ""
    stats_images: str = ""  # a folder on this machine; empty: none (the sample photos, with a warning)
    preprocess: dict = field(default_factory=dict)  # resize, crop, mean, std; missing or None: the arch's default
    source: str = "torchvision"
    folder_files: list[FileGiven] = field(default_factory=list)
    folder_path: str = ""


@dataclass(frozen=True)
class NetworkPreview:
    """What the form read from a candidate network (its card loaded once), shown for checking before it is added."""

    name: str
    source: str  # in words: "timm model resnet18"
    class_count: int
    first_classes: tuple[str, ...]  # the first PREVIEW_CLASSES names
    classes_from: str  # "your class list" or "the model's configuration"
    resize: int
    crop: int
    interpolation: str
    mean: tuple[float, ...]
    std: tuple[float, ...]
    channels: int
    head: str
    default_layer: str
    layer_count: int

    def rows(self) -> list[tuple[str, str]]:
        """(what, value) for the form's table, in words."""
        more = ", …" if self.class_count > len(self.first_classes) else ""
        classes = (f"{self.class_count}: {', '.join(self.first_classes)}{more} (from {self.classes_from})"
                   if self.class_count else "none named (shown as class 0, class 1, …)")
        head = self.head
        if head == SIMILARITY:  # a CLIP model: what it explains is typed on the page, one prompt a line
            classes = "none: a CLIP model explains the text prompts you type (one map per prompt)"
            head = "similarity (the cosine of the image with each prompt)"
        return [
            ("Source", self.source),
            ("Classes", classes),
            ("Input", f"resize the short side to {self.resize} px, centre crop {self.crop} px "
                      f"({self.interpolation})"),
            ("Mean", ", ".join(f"{v:g}" for v in self.mean)),
            ("Std", ", ".join(f"{v:g}" for v in self.std)),
            ("Channels", str(self.channels)),
            ("Head", head),
            ("Default layer", f"{self.default_layer} (of {self.layer_count} layers)"),
        ]


def parse_triple(text: str, what: str) -> tuple[float, float, float] | None:
    """Three numbers from "0.485, 0.456, 0.406" (commas or spaces); None for an empty field."""
    text = text.strip().strip("[]()")
    if not text:
        return None
    parts = [p for p in re.split(r"[,\s;]+", text) if p]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 3 or not all(v == v and abs(v) != float("inf") for v in values):
        raise UserError(f"The {what} must be three numbers (red, green, blue), e.g. 0.485, 0.456, 0.406; "
                         f"got {text!r}.")
    if what == "std" and min(values) <= 0:
        raise UserError(f"The std must be three positive numbers; got {text!r}.")
    return values  # type: ignore[return-value]


def _check(new: NewNetwork, folder: Path, trust: Trust) -> tuple[str, str | None, list[FileGiven]]:
    """(name, the card's arch (None for a model folder), the model folder's files) checked, or one sentence saying
    what to change. Paths on this machine are checked against `trust` before anything is read from them."""
    if new.weights is not None and new.weights.path is not None:
        check_server_path(new.weights.path, trust, what="weights file")
        if Path(new.weights.path).expanduser().is_dir():  # a folder typed where the file goes: which to choose
            raise folder_given_error(Path(new.weights.path).expanduser(), shown_as=new.weights.path)
    if new.folder_path.strip():
        check_server_path(Path(new.folder_path.strip()).expanduser(), trust, what="model folder")
    if new.stats_images.strip():
        check_server_path(Path(new.stats_images.strip()).expanduser(), trust, what="image folder", folder=True)
    name = new.name.strip()
    if not NAME_PATTERN.match(name):
        raise ModelCardError("Give the network a name of letters, digits, '-', '_' or '.' (up to 64, no spaces), "
                             f"e.g. skin-lesions; not {shown(name, 40)!r}." if name else "Give the network a name.")
    title = new.title.strip()
    if len(title) > MAX_TITLE_CHARS:
        raise ModelCardError(f"Give the network a title of at most {MAX_TITLE_CHARS} characters; this one has "
                             f"{len(title):,}.")
    taken = {c.name.lower() for c in find_cards(folder)}
    if name.lower() in taken or (folder / name).exists():
        raise ModelCardError(f"A network named {name} exists already in {folder}; choose another name.")
    arch = _arch_entry(new)
    files: list[FileGiven] = []
    if arch is None:
        if new.weights is not None:
            raise ModelCardError("A model folder brings its own weights; leave the weights file out, or choose "
                                 "another source for a state_dict.")
        files = _folder_files(new, trust)
    elif new.weights is None:
        raise ModelCardError("Give the weights file: the state_dict you saved with "
                             "torch.save(model.state_dict(), \"model.pth\") (.pth, .pt or .safetensors).")
    elif new.weights.suffix not in WEIGHTS_SUFFIXES:
        raise ModelCardError(f"The weights file {shown(new.weights.name)} is not a .pth, .pt or .safetensors file; save "
                             "them with torch.save(model.state_dict(), \"model.pth\").")
    if new.classes is not None and new.classes.suffix not in CLASS_SUFFIXES:
        raise ModelCardError(f"The class list {shown(new.classes.name)} is not a .txt, .json or .csv file.")
    if new.classes is not None:
        check_class_list_size(new.classes.size(), new.classes.name)  # before it is copied or read
    if new.stats_images.strip():
        from ..images import find_images

        images = Path(new.stats_images.strip()).expanduser()
        if not images.is_dir():
            raise ModelCardError(f"The statistics image folder {shown(images)} does not exist on this machine.")
        if not find_images(images):
            raise ModelCardError(f"The statistics image folder {shown(images)} holds no images (jpg, png, …).")
    return name, arch, files


def _arch_entry(new: NewNetwork) -> str | None:
    """The card's arch for the form's source and architecture ("timm:resnet18", "efficientnet_lite0"; None for a
    model folder), or one sentence saying what to change."""
    if new.source not in NETWORK_SOURCES:
        raise ModelCardError(f"Choose the network's source: {', '.join(NETWORK_SOURCES.values())}; not "
                             f"{shown(new.source, 40)!r}.")
    if new.source == "folder":
        return None
    prefix = {"torchvision": TORCHVISION_PREFIX, "timm": TIMM_PREFIX, "hf": HF_PREFIX}.get(new.source, "")
    arch = new.arch.strip()
    arch = arch[len(prefix):] if prefix and arch.startswith(prefix) else arch
    if new.source == "torchvision":
        if arch not in torchvision_names():
            raise ModelCardError(f"torchvision has no classification network {shown(arch, 40)!r}.")
    elif new.source == "timm":
        if not arch:
            raise ModelCardError("Give the timm model's name, e.g. resnet18 or convnext_tiny.")
        from ..networks.timm_models import timm_name

        arch = timm_name(arch)  # or the closest names timm has
    elif new.source == "hf":
        if not arch:
            raise ModelCardError("Give the Hugging Face model's id, e.g. google/vit-base-patch16-224.")
        try:
            repo_id(arch)
        except UnknownModelError:
            raise ModelCardError(f"{shown(arch, 60)!r} is not a Hugging Face model id; give ORG/NAME, e.g. "
                                 "google/vit-base-patch16-224.") from None
    elif arch not in BUILTIN_BACKBONES:
        raise ModelCardError(f"Choose one of the built-in backbones ({', '.join(BUILTIN_BACKBONES)}), not "
                             f"{shown(arch, 40)!r}.")
    return arch if new.source == "builtin" else prefix + arch


def _folder_files(new: NewNetwork, trust: Trust) -> list[FileGiven]:
    """The model folder's files to copy: the uploaded ones, checked by name, or those of the folder on this machine
    (its path checked against `trust` first, its config.json read for its layout: `model_folders.read_folder`)."""
    path = new.folder_path.strip()
    if path and new.folder_files:
        raise ModelCardError("Give the model folder's files or its path on this machine, not both.")
    if path:
        folder, _, _ = read_folder(Path(path).expanduser(), trust)
        weights = next((folder / n for n in FOLDER_WEIGHTS if (folder / n).is_file()), None)
        if weights is None:
            raise ModelCardError(f"The model folder {shown(path)} has no model.safetensors (or pytorch_model.bin) to "
                                 "copy; save the model again as one file.")
        return [FileGiven.local(folder / n) for n in ("config.json", "preprocessor_config.json", *TOKENIZER_FILES)
                if (folder / n).is_file()] + [FileGiven.local(weights)]
    if not new.folder_files:
        raise ModelCardError("Give the model folder: its config.json and model.safetensors (and its "
                             "preprocessor_config.json, if it has one), or its path on this machine.")
    names = [f.name for f in new.folder_files]
    unknown = next((n for n in names if n not in FOLDER_FILES), None)
    if unknown is not None:
        raise ModelCardError(f"{shown(unknown)} is no file of a model folder here; give config.json, model.safetensors "
                             "(or pytorch_model.bin) and, if it has one, preprocessor_config.json (a CLIP model: "
                             "its tokenizer's files too, tokenizer.json or vocab.json and merges.txt).")
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ModelCardError(f"The file {twice} is given twice; give each file of the model folder once.")
    if "config.json" not in names:
        raise ModelCardError("The model folder's config.json is missing; give it together with model.safetensors.")
    if not any(n in FOLDER_WEIGHTS for n in names):
        raise ModelCardError("The model folder's weights are missing; give model.safetensors (or pytorch_model.bin) "
                             "together with config.json.")
    return list(new.folder_files)


def _load_candidate(new: NewNetwork, root: Path, trust: Trust) -> tuple[Path, str, tuple]:
    """Write the network's card and files into a working folder <root>/.adding-<name>-<id>/ (hidden from the menu)
    and load the card once: (working folder, name, what `load_card` returned). On a refusal the folder is removed
    and the library's message raised, naming the files as the user gave them."""
    name, arch, folder_files = _check(new, root, trust)
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".adding-{name}-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        given: dict[Path, object] = {}  # working paths → what the user gave, for messages
        entries: dict = {}
        if arch is None:
            (work / MODEL_SUBFOLDER).mkdir()
            for file in folder_files:
                file.copy_to(work / MODEL_SUBFOLDER / file.name)
                given[work / MODEL_SUBFOLDER / file.name] = file.name
            entries["model_folder"] = MODEL_SUBFOLDER
        else:
            weights = f"{name}{new.weights.suffix}"
            new.weights.copy_to(work / weights)
            given[work / weights] = new.weights.name
            entries.update(arch=arch, weights=weights)
        if new.classes is not None:
            entries["classes"] = f"classes{new.classes.suffix}"
            new.classes.copy_to(work / entries["classes"])
            given[work / entries["classes"]] = new.classes.name
        images = new.stats_images.strip()

        def load(**head) -> tuple:
            write_card(
                work / f"{name}.toml", name=name, title=new.title.strip() or None, layer=new.layer.strip() or None,
                stats_images=str(Path(images).expanduser().resolve()) if images else None,
                preprocess={k: v for k, v in new.preprocess.items() if v is not None}, trust=trust, **entries, **head,
            )
            return load_card(work / f"{name}.toml", trust_pickle=False, trust=trust)

        try:  # the library's message for anything that does not fit
            try:
                loaded = load()
            except WeightsMismatchError as err:
                if not err.binary:
                    raise
                # weights with one output for a class list of two names: a binary classifier (the form has no
                # head field, so it writes the head a card's author would)
                loaded = load(head="binary")
        except USER_ERRORS as err:
            raise _named(err, {**given, work: root / name}) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return work, name, loaded


def _source_text(new: NewNetwork) -> str:
    """The source as the preview names it: "timm model resnet18", "Built-in backbone with your head: vgg16"."""
    if new.source == "folder":
        return NETWORK_SOURCES["folder"]
    arch = new.arch.strip().split(":", 1)[-1] if new.source != "hf" else new.arch.strip().removeprefix(HF_PREFIX)
    return f"{NETWORK_SOURCES[new.source]}: {arch}"


def preview_network(new: NewNetwork, folder: str | os.PathLike | None = None,
                    trust: Trust | None = None) -> NetworkPreview:
    """What the network would be, read by loading its card once in a working folder that is removed afterwards
    (nothing is added): its classes (from the class list given, else the model's configuration), preprocessing,
    input channels, head, default layer and number of layers. Refusals as `add_network`'s."""
    trust = trust if trust is not None else Trust.for_app()
    root = Path(folder).expanduser() if folder is not None else models_dir()
    work, name, (spec, _, _, classes) = _load_candidate(new, root, trust)
    try:
        return NetworkPreview(
            name=name, source=_source_text(new), class_count=len(classes),
            first_classes=tuple(classes[:PREVIEW_CLASSES]),
            classes_from="your class list" if new.classes is not None else "the model's configuration",
            resize=spec.resize, crop=spec.crop, interpolation=spec.interpolation, mean=tuple(spec.mean),
            std=tuple(spec.std), channels=int(getattr(spec, "channels", 3)),  # fields other sources may lack
            head=str(getattr(spec, "head", "softmax")), default_layer=spec.default_layer,
            layer_count=len(spec.layers),
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def add_network(new: NewNetwork, folder: str | os.PathLike | None = None, trust: Trust | None = None) -> Path:
    """Write the network's card and its files into <folder>/<name>/ (folder: the models folder) and return the
    card's path. The card is loaded once first (weights read safely, never unpickled): if anything does not fit,
    its message is raised and the folder is left as it was. trust: which paths on this machine may be read
    (default: the app's owner's, `Trust.for_app()`, as if the app served other machines)."""
    trust = trust if trust is not None else Trust.for_app()
    root = Path(folder).expanduser() if folder is not None else models_dir()
    work, name, _ = _load_candidate(new, root, trust)
    try:
        target = root / name
        if target.exists():
            raise ModelCardError(f"A network named {name} exists already in {root}; choose another name.")
        os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target / f"{name}.toml"


def _named(err: BaseException, names: dict[Path, object]) -> BaseException:
    """`err` with the paths of the working folder replaced by what the user gave (an upload's file name),
    so the message names the files as the user knows them."""
    text = str(err)
    for path, name in names.items():
        text = text.replace(str(path.resolve()), shown(name)).replace(str(path), shown(name))
    try:
        if isinstance(err, UserError):  # keep what each front end should do, and what the error knows
            named = type(err)(text, cli_hint=err.cli_hint, app_hint=err.app_hint)
            named.__dict__.update({k: v for k, v in vars(err).items() if k not in ("message", "cli_hint", "app_hint")})
            return named
        return type(err)(text)
    except Exception:  # noqa: BLE001 - an error type that wants other arguments keeps its own message
        return err
