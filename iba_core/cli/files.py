"""The files a command reads and writes: checked before any slow work, written so that no half file is left.

Every command checks its inputs (exist, readable, an image's header decodes, a folder holds images) and its
outputs (parent folders created, an existing folder or file where the other is needed refused, the location
writable) at the start of `run`, before the network loads and before its heavy modules are imported: a typo
then costs a second, not a network load, and a finished run never fails at the last step for want of a folder.

Results are written through a temp file in the same folder and os.replace (iba_core.cache), so an interrupted
or failing write leaves the previous file, never half a new one.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UserError


def _shown(path: Path) -> str:
    """The path as the user typed it, quoted only where it holds spaces."""
    text = str(path)
    return repr(text) if " " in text else text


def readable_file(path: str | os.PathLike | None, what: str) -> Path | None:
    """`path` if it names an existing, readable, non-empty file; None stays None. `what` names it ("--weights")."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"The {what} file {_shown(path)} was not found; please check the path.")
    if not path.is_file():
        raise UserError(f"The {what} path {_shown(path)} is a folder; please give a file.")
    if not os.access(path, os.R_OK):
        raise UserError(f"The {what} file {_shown(path)} cannot be read (no permission).")
    if path.stat().st_size == 0:
        raise UserError(f"The {what} file {_shown(path)} is empty (0 bytes).")
    return path


def image_file(path: str | os.PathLike | None, what: str = "image") -> Path | None:
    """`path` if it is a readable image whose header declares a size the loader accepts (no pixel decoded)."""
    from ..band_images import read_image_size

    path = readable_file(path, what)
    if path is not None:
        read_image_size(path)
    return path


def weights_file(args) -> Path | None:
    """--weights as a readable file; the words load_network also takes there ("pretrained", "random") pass."""
    weights = getattr(args, "weights", None)
    if weights in (None, "pretrained", "random"):
        return None
    return readable_file(weights, "--weights")


def readable_folder(path: str | os.PathLike | None, what: str, kind: str = "Folder") -> Path | None:
    """`path` if it names an existing folder whose contents can be listed and read; None stays None.

    `what` names the option ("--boxes"), `kind` the folder in the not-found sentence ("Image folder").
    """
    if path is None:
        return None
    path = Path(path).expanduser()
    if not path.exists():
        raise UserError(f"{kind} not found: {_shown(path)}; please check the {what} path.")
    if not path.is_dir():
        raise UserError(f"The {what} path {_shown(path)} is a file, but a folder is needed there.")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UserError(f"The {what} folder {_shown(path)} cannot be read (no permission).")
    return path


def image_folder(path: str | os.PathLike | None, what: str) -> Path | None:
    """`path` if it is a readable folder with at least one image file below it (searched recursively)."""
    from ..images import IMAGE_SUFFIXES

    path = readable_folder(path, what, "Image folder")
    if path is None:
        return None
    # Stop at the first image: a folder of 50,000 photos is not listed twice.
    if next((p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()), None) is None:
        raise UserError(f"No images (jpg, png, …) found below {_shown(path)}; please check the {what} path.")
    return path


def output_folder(path: str | os.PathLike | None, what: str = "--out") -> Path | None:
    """`path` as a writable folder, created with its parents if missing; refused where a file stands."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise UserError(f"The {what} path {_shown(path)} is an existing file, but a folder is needed there; "
                        "please give a new or existing folder.")
    _make_folder(path, what)
    _probe(path, path, what)
    return path


def output_file(path: str | os.PathLike | None, what: str = "--out") -> Path | None:
    """`path` as a file that can be written: its folder created if missing; refused where a folder stands."""
    if path is None:
        return None
    path = Path(path).expanduser()
    if path.is_dir():
        raise UserError(f"The {what} path {_shown(path)} is an existing folder, but a file name is needed "
                        "there; please give a file name inside it.")
    _make_folder(path.parent, what)
    _probe(path.parent, path, what)
    return path


def _make_folder(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file stands where a folder of the path should be
        raise UserError(f"The folder for {what} cannot be made because part of the path {_shown(folder)} is "
                        "a file; please choose another path.") from None
    except OSError as err:  # no permission, read-only or missing file system
        raise UserError(f"The folder for {what} cannot be made at {_shown(folder)} ({err.strerror or err}); "
                        "please choose a location you can write to.") from None


def _probe(folder: Path, target: Path, what: str) -> None:
    """Create and remove a temp file in `folder`: the one check that holds for root, ACLs and read-only mounts."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".iba-write-check.")
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise UserError(f"The {what} location {_shown(target)} cannot be written ({err.strerror or err}); "
                        "please choose a location you can write to.") from None


# ---- atomic writes of results ------------------------------------------------------------------


def _atomic(path: Path, write) -> None:
    from ..cache import write_atomic  # the project's one atomic writer

    write_atomic(path, write)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    _atomic(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    _atomic(Path(path), lambda tmp: tmp.write_bytes(data))


def npy_path(path: str | os.PathLike) -> Path:
    """Where np.save(path) writes: `.npy` added unless the name ends with it."""
    path = Path(path)
    if path.name.endswith(".npy") or not path.name or path.is_dir():  # a folder: output_file refuses it
        return path
    return path.with_name(path.name + ".npy")


def save_npy(path: str | os.PathLike, array: Any) -> Path:
    """np.save, atomically, to npy_path(path); returns the path written."""
    import numpy as np

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.save(f, array)

    target = npy_path(path)
    _atomic(target, write)
    return target


def image_format(path: str | os.PathLike, what: str) -> str:
    """The PIL format that `path`'s extension names (e.g. PNG); refused before any work for an unknown one."""
    from PIL import Image

    suffix = Path(path).suffix.lower()
    fmt = Image.registered_extensions().get(suffix)
    if fmt is None or fmt not in Image.SAVE:
        raise UserError(f"The {what} file name {_shown(Path(path))} does not end in an image type that can be "
                        "written; please end it with .png.")
    return fmt


def save_image(path: str | os.PathLike, image) -> None:
    """Save a PIL image atomically, in the format its extension names."""
    fmt = image_format(path, "image")
    _atomic(Path(path), lambda tmp: image.save(tmp, format=fmt))
