"""Your networks in the app: the network menu (built-ins, the model cards in the models folder, any torchvision
classifier) and adding a network from uploaded files (a model card written into the models folder).

The models folder is `settings.models_dir()` (IBA_MODELS_DIR). `find_cards` lists the cards in it and one
folder level below; `add_network` writes a new one as <folder>/<name>/<name>.toml with its weights and class
list next to it, after loading it once to check it: a state dict that does not fit, a class list of the wrong
length or a layer the network does not have gives the library's message, and nothing is left in the folder.
Weights are only ever read safely (tensors, no unpickling: `networks.state_files`).

What the app may do is its owner's `Trust` (`iba_core.trust`, `Trust.for_app`), passed in by the page: code
model cards run and card paths leave the card's folder only with IBA_TRUST_CODE=1; a path on the server typed
into the form is read only inside the models folder and the IBA_DATA_DIRS folders (anywhere when the app
listens on localhost only), and checked before anything is read. The form only ever writes torchvision cards.
"""
from __future__ import annotations

import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import USER_ERRORS, UserError, user_message
from ..networks import DEFAULT_NETWORK, REGISTRY
from ..networks.cards import CARD_PREFIX, ModelCardError, is_card_key, load_card, read_card, write_card
from ..networks.torchvision_any import PREFIX as TORCHVISION_PREFIX, classification_models
from ..settings import models_dir
from ..trust import Trust, check_server_path, shown

#: The network menu's entry that opens the choice of a torchvision classifier.
TORCHVISION_CHOICE = TORCHVISION_PREFIX
#: The torchvision classifier offered first.
DEFAULT_TORCHVISION = "resnet18"
#: The architecture the "Add your network" form offers first.
DEFAULT_ARCH = "resnet50"
WEIGHTS_SUFFIXES = (".pth", ".pt", ".safetensors")
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
        except ValueError as err:  # ModelCardError, NotTrustedError
            found.append(CardChoice(path.resolve(), path.stem, error=user_message(err, "app")))
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
    except ValueError:  # ModelCardError, NotTrustedError: loading says why
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


def source_note(key: str, network) -> str:
    """A caption for the chosen network: where it comes from and its classes."""
    spec = network.spec
    if is_card_network(network):
        path = str(key).replace("`", "'")  # inside the Markdown code span
        return (f"Your network from the model card `{path}`: {len(network.categories)} classes, input "
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

    def copy_to(self, target: Path) -> None:
        if self.data is not None:
            target.write_bytes(self.data)
            return
        if self.path is None or not self.path.is_file():
            raise ModelCardError(f"File not found: {self.path}.")
        shutil.copyfile(self.path, target)


@dataclass
class NewNetwork:
    """What the "Add your network" form gives."""

    name: str
    arch: str  # a torchvision classification builder (NAME or torchvision:NAME)
    weights: FileGiven | None
    classes: FileGiven | None
    title: str = ""
    layer: str = ""
    stats_images: str = ""  # a folder on this machine; empty: none (the sample photos, with a warning)
    preprocess: dict = field(default_factory=dict)  # resize, crop, mean, std; missing or None: the arch's default


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
        raise ValueError(f"The {what} must be three numbers (red, green, blue), e.g. 0.485, 0.456, 0.406; "
                         f"got {text!r}.")
    if what == "std" and min(values) <= 0:
        raise ValueError(f"The std must be three positive numbers; got {text!r}.")
    return values  # type: ignore[return-value]


def _check(new: NewNetwork, folder: Path, trust: Trust) -> tuple[str, str]:
    """(name, arch) checked, or one sentence saying what to change. Paths on this machine are checked against
    `trust` before anything is read from them."""
    if new.weights is not None and new.weights.path is not None:
        check_server_path(new.weights.path, trust, what="weights file")
    if new.stats_images.strip():
        check_server_path(Path(new.stats_images.strip()).expanduser(), trust, what="image folder")
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
    arch = new.arch.strip()
    arch = arch[len(TORCHVISION_PREFIX):] if arch.startswith(TORCHVISION_PREFIX) else arch
    if arch not in torchvision_names():
        raise ModelCardError(f"torchvision has no classification network {shown(arch, 40)!r}.")
    if new.weights is None:
        raise ModelCardError("Give the weights file: the state_dict you saved with "
                             "torch.save(model.state_dict(), \"model.pth\") (.pth, .pt or .safetensors).")
    if new.weights.suffix not in WEIGHTS_SUFFIXES:
        raise ModelCardError(f"The weights file {shown(new.weights.name)} is not a .pth, .pt or .safetensors file; save "
                             "them with torch.save(model.state_dict(), \"model.pth\").")
    if new.classes is None:
        raise ModelCardError("Give the class names: a text file with one name a line, in the order of the "
                             "network's outputs (or a JSON list, or a CSV index,name).")
    if new.classes.suffix not in CLASS_SUFFIXES:
        raise ModelCardError(f"The class list {shown(new.classes.name)} is not a .txt, .json or .csv file.")
    if new.stats_images.strip():
        from ..images import find_images

        images = Path(new.stats_images.strip()).expanduser()
        if not images.is_dir():
            raise ModelCardError(f"The statistics image folder {shown(images)} does not exist on this machine.")
        if not find_images(images):
            raise ModelCardError(f"The statistics image folder {shown(images)} holds no images (jpg, png, …).")
    return name, arch


def add_network(new: NewNetwork, folder: str | os.PathLike | None = None, trust: Trust | None = None) -> Path:
    """Write the network's card, weights and class list into <folder>/<name>/ (folder: the models folder) and
    return the card's path. The card is loaded once first (weights read safely, never unpickled): if anything
    does not fit, its message is raised and the folder is left as it was. trust: which paths on this machine
    may be read (default: the app's owner's, `Trust.for_app()`, as if the app served other machines)."""
    trust = trust if trust is not None else Trust.for_app()
    root = Path(folder).expanduser() if folder is not None else models_dir()
    name, arch = _check(new, root, trust)
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".adding-{name}-{uuid.uuid4().hex[:8]}"
    work.mkdir()
    try:
        weights = f"{name}{new.weights.suffix}"
        classes = f"classes{new.classes.suffix}"
        new.weights.copy_to(work / weights)
        new.classes.copy_to(work / classes)
        images = new.stats_images.strip()
        write_card(
            work / f"{name}.toml", name=name, title=new.title.strip() or None, arch=TORCHVISION_PREFIX + arch,
            weights=weights, classes=classes, layer=new.layer.strip() or None,
            stats_images=str(Path(images).expanduser().resolve()) if images else None,
            preprocess={k: v for k, v in new.preprocess.items() if v is not None}, trust=trust,
        )
        try:  # the library's message for anything that does not fit
            load_card(work / f"{name}.toml", trust_pickle=False, trust=trust)
        except USER_ERRORS as err:
            raise _named(err, {work / weights: new.weights.name, work / classes: new.classes.name,
                               work: root / name}) from None
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
        if isinstance(err, UserError):  # keep what each front end should do
            return type(err)(text, cli_hint=err.cli_hint, app_hint=err.app_hint)
        return type(err)(text)
    except Exception:  # noqa: BLE001 - an error type that wants other arguments keeps its own message
        return err
