"""What the person running the program allows: code from model cards, card paths outside the card's folder,
and which paths on this machine may be typed in (the app's form and folder fields).

A model card is data. Its `package.module:function` builder (and a module beside the card) is Python code,
run only when `Trust.code` is set: on the command line `--trust-code`, in the app `IBA_TRUST_CODE=1` set by
its owner (like Hugging Face's `trust_remote_code`, which the same setting gates for a Hugging Face model that
comes with its own modelling code). The paths a card names stay inside the card's folder
(symlinks resolved first) unless outside paths are allowed (the same setting: `--trust-code`,
`IBA_TRUST_CODE=1`) or, in the app, they lead into one of its owner's folders (the models folder, IBA_DATA_DIRS).
A card's image folder for feature statistics (`stats_images`), read as images and nothing else, also goes wherever
its reader may type a folder (`check_card_images`): on the command line and in an app on localhost alone, the
owner's folders are theirs.

    Trust.local(code=args.trust_code)        # the command line and Python: the local user's typed paths;
                                             # card code and card paths outside its folder only with code
    Trust.for_app(localhost=...)             # the app: IBA_TRUST_CODE, IBA_DATA_DIRS, the models folder

A `Trust` is passed explicitly into the functions that load (no process-wide state). Refusals are
`NotTrustedError` (a `UserError`): what was refused, and for each front end the flag or setting that allows it.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import settings
from .errors import UserError

#: `Trust.server_paths` value allowing every path on this machine.
ANY: Literal["any"] = "any"

#: How each front end allows code from a model card (Python: `trust=Trust.local(code=True)`).
CODE_CLI_HINT = "Add --trust-code to run it, only for a card whose code you trust."
CODE_APP_HINT = f"The app runs it only when its owner starts the app with {settings.TRUST_CODE_ENV}=1."
#: How each front end allows a card's path outside the card's folder (the same setting as code).
OUTSIDE_CLI_HINT = "Add --trust-code to follow it, only for a card you trust, or move the file into the card's folder."
OUTSIDE_APP_HINT = (f"The app reads such paths only when its owner sets {settings.TRUST_CODE_ENV}=1 or names "
                    f"their folder in {settings.DATA_DIRS_ENV}.")
#: How the app allows a typed path on its machine.
SERVER_APP_HINT = (f"Upload a file instead; a folder is read once the app's owner names it (or a folder above it) "
                   f"in {settings.DATA_DIRS_ENV}.")
#: How the app allows a folder on its machine that cannot be uploaded instead (images, a run): the one setting.
FOLDER_APP_HINT = (f"The app reads it once its owner names that folder (or a folder above it) in "
                   f"{settings.DATA_DIRS_ENV}.")
#: The longest part of a path or name a message repeats.
SHOWN_CHARS = 80


class NotTrustedError(UserError):
    """Something the person running the program has not allowed; the hints say how to allow it."""


@dataclass(frozen=True)
class Trust:
    """What may happen: run code from model cards (`code`), follow card paths outside the card's folder
    (`outside_paths`; else only into `card_folders`, the owner's named folders), and read typed paths on this
    machine (`server_paths`: allowed folders, or ANY; ANY lets no card's path out of its folder but its image
    folder for statistics, `check_card_images`)."""

    code: bool = False
    outside_paths: bool = False
    server_paths: tuple[Path, ...] | Literal["any"] = ()
    card_folders: tuple[Path, ...] = ()

    @classmethod
    def local(cls, *, code: bool = False) -> "Trust":
        """The command line's and Python's: the local user may read any path they type; code from a card, and
        a card's paths outside its folder, only when allowed (`code`: --trust-code), as in the app."""
        return cls(code=code, outside_paths=code, server_paths=ANY)

    @classmethod
    def for_app(cls, *, localhost: bool = False) -> "Trust":
        """The app's, from its owner's environment: code and outside card paths with IBA_TRUST_CODE=1; typed
        paths inside the models folder and the IBA_DATA_DIRS folders, anywhere when the app listens on this
        machine only (`localhost`: its visitors are its owner) and its owner names no IBA_DATA_DIRS (an owner
        who names them, e.g. behind a reverse proxy on 127.0.0.1, is held to them)."""
        code = settings.trust_code()
        named = settings.data_dirs()
        roots = tuple(dict.fromkeys(_resolved(p) for p in (settings.models_dir(), *named)))
        anywhere = localhost and not named
        return cls(code=code, outside_paths=code, server_paths=ANY if anywhere else roots, card_folders=roots)


#: The default of the library's loaders: the local user's, without code (so a card's paths stay in its folder).
LOCAL = Trust.local()


def is_local_address(address: str | None) -> bool:
    """Whether a server address (Streamlit's `server.address`) listens on this machine only: a loopback IP
    literal (127.0.0.0/8, ::1) or the name "localhost"; any other name (even "127.x.example") and an unset
    address (every interface) are not."""
    text = (address or "").strip().lower().strip("[]")
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """`text` as a message repeats it: at most `limit` characters, the cut marked with '…'. A path (a PathLike, or
    a string without spaces holding a slash) is cut in the middle, so the message still names the file or folder
    the user gave, which is at its end; other text keeps its beginning."""
    path_like = isinstance(text, os.PathLike)
    text = str(text)
    if len(text) <= limit:
        return text
    if path_like or (("/" in text or "\\" in text) and not any(c.isspace() for c in text)):
        head = (limit - 1) // 3
        return text[:head] + "…" + text[len(text) - (limit - 1 - head):]
    return text[: limit - 1].rstrip() + "…"


def _resolved(path: Path) -> Path:
    """The absolute path with every symlink resolved (so a link cannot point out of an allowed folder)."""
    return Path(os.path.realpath(Path(path).expanduser()))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def visitor_path(path: str | os.PathLike, trust: Trust) -> str:
    """`path` as a visitor may see it: whole for the machine's own user (`server_paths` ANY), else relative to the
    allowed folder holding it, named by that folder's own name ("data/runs/val"), else only its last part — the
    server's layout above the folders its owner allowed never reaches a visitor."""
    if trust.server_paths == ANY:
        return str(path)
    resolved = _resolved(Path(path))
    for root in trust.server_paths:
        if _inside(resolved, root):
            return str(Path(root.name) / resolved.relative_to(root))
    return resolved.name


def visitor_text(text: str, trust: Trust) -> str:
    """`text` (a sentence that may hold paths, e.g. where statistics came from) as a visitor may see it: every
    allowed folder's absolute path in it replaced by that folder's own name, as `visitor_path` names paths; whole
    for the machine's own user."""
    if trust.server_paths == ANY:
        return text
    for root in sorted(trust.server_paths, key=lambda r: len(str(r)), reverse=True):  # the deepest folder first
        text = text.replace(str(root), root.name)
    return text


def server_path_allowed(path: str | os.PathLike, trust: Trust) -> bool:
    """Whether `path` (symlinks resolved) lies in a folder `trust.server_paths` allows."""
    if trust.server_paths == ANY:
        return True
    resolved = _resolved(Path(path))
    return any(_inside(resolved, root) for root in trust.server_paths)


def check_code(what: str, trust: Trust, *, source: str = "a model card") -> None:
    """Refuse to run code (`what`, e.g. 'The model card x.toml names the builder os:system') unless allowed.

    source: where the code came from, as the message names it ("a model card", "a model": a Hugging Face
    model's own modelling code, which `trust_remote_code` would run)."""
    if not trust.code:
        noun = source.split()[-1]
        raise NotTrustedError(f"{what}, which is Python code, and code from {source} runs only when allowed.",
                              cli_hint=CODE_CLI_HINT.replace("card", noun), app_hint=CODE_APP_HINT)


def check_inside(path: str | os.PathLike, root: str | os.PathLike, trust: Trust, *, what: str = "path") -> Path:
    """`path` (relative to `root` unless absolute) resolved, symlinks first; refused when it leads outside
    `root` unless outside paths are allowed or it lies in one of the owner's folders (`trust.card_folders`)."""
    root = _resolved(Path(root))
    resolved = _resolved(root / Path(path).expanduser())
    if (_inside(resolved, root) or trust.outside_paths
            or any(_inside(resolved, folder) for folder in trust.card_folders)):
        return resolved
    raise NotTrustedError(f"The {what} {shown(path)} leads outside the model card's folder {shown(root)}, so it is "
                          "not read.", cli_hint=OUTSIDE_CLI_HINT, app_hint=OUTSIDE_APP_HINT)


def check_server_path(path: str | os.PathLike, trust: Trust, *, what: str = "path", folder: bool = False) -> Path:
    """`path` resolved (symlinks first) when `trust` lets it be read, else a refusal saying what to do (`folder`: a
    folder no upload can stand for, so the hint names only the setting that allows it)."""
    resolved = _resolved(Path(path))
    if server_path_allowed(resolved, trust):
        return resolved
    folders = ", ".join(shown(p) for p in trust.server_paths) if trust.server_paths != ANY else ""
    raise NotTrustedError(
        f"The {what} {shown(path)} is outside the folders this app may read ({folders or 'none'}), so it is not "
        "read.", app_hint=FOLDER_APP_HINT if folder else SERVER_APP_HINT)


def check_card_images(path: str | os.PathLike, root: str | os.PathLike, trust: Trust, *,
                      what: str = "stats_images path") -> Path:
    """A model card's image folder (`stats_images`), resolved: unlike the card's other paths it is read as images
    for feature statistics and nothing else, so it may also lie wherever the reader may read a folder it types
    (`trust.server_paths`: anywhere for the command line's user and for an app that listens on this machine
    alone, whose visitor is its owner; else the owner's folders). Refused with the one setting that allows it."""
    root = _resolved(Path(root))
    resolved = _resolved(root / Path(path).expanduser())
    if (_inside(resolved, root) or trust.outside_paths or server_path_allowed(resolved, trust)
            or any(_inside(resolved, folder) for folder in trust.card_folders)):
        return resolved
    raise NotTrustedError(f"The {what} {shown(path)} leads outside the model card's folder {shown(root)} and the "
                          "folders this app may read, so its images are not read.",
                          cli_hint=OUTSIDE_CLI_HINT, app_hint=FOLDER_APP_HINT)
