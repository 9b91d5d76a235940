"""The images of a folder run: every image below a folder, or the images a `.txt` list names, labelled as
`evaluate` labels them (`image_folders.list_items`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from ..errors import UserError
from ..image_folders import ImageItem, list_items

#: A text file of image paths (one a line, relative to the file) stands for a folder.
LIST_SUFFIX = ".txt"


def read_image_list(path: str | os.PathLike) -> list[Path]:
    """The images a text file lists: one path a line, relative to the file's folder (or absolute); blank lines and
    lines starting with '#' are skipped, a path listed twice counts once."""
    path = Path(path).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"The image list {path} cannot be read ({err}).") from None
    files = [Path(os.path.normpath(path.parent / line.strip())) for line in lines
             if line.strip() and not line.strip().startswith("#")]
    return list(dict.fromkeys(files))


def list_images(source: str | os.PathLike, labels: str | os.PathLike | None = None,
                class_index: Callable[[str], int] | None = None,
                limit: int | None = None, categories: Sequence[str] = ()) -> tuple[Path, list[ImageItem]]:
    """(root, items) of a folder (every image below it, sorted) or of a `.txt` list of images (its folder is the
    root), labelled as `evaluate` labels them (`image_folders.list_items`: a label file, class folders, wnids)."""
    source = Path(source).expanduser()
    if source.is_dir():
        root, files = source, None
    elif source.is_file() and source.suffix.lower() == LIST_SUFFIX:
        root, files = source.parent, read_image_list(source)
    else:
        raise UserError(f"{source} is neither a folder of images nor a {LIST_SUFFIX} list of images.")
    items = list_items(root, labels, class_index, limit, files=files, categories=categories)
    if not items:
        raise UserError(f"No images (jpg, png, …) found {'below' if files is None else 'in the list'} {source}.")
    return root, items


__all__ = ["LIST_SUFFIX", "list_images", "read_image_list"]
