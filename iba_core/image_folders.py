"""The images of a folder with their labels: what `evaluate`, `attribute FOLDER` and the Dataset page's runs read.

`list_items(root)` finds every image below `root` (recursively, sorted) and labels it, first match wins:

1. a label file's row for the image (`labels.txt`/`labels.csv` in `root`, or `--labels FILE`):
   `<image>,<label>` where <image> is the path relative to root, the file name or its stem, and <label>
   a class index, a class name or a WordNet id;
2. the image's class folder (the top-level folder below root): named by a class index (`285/…`), by a
   class name, or by a WordNet id (`n02123045/…`);
3. otherwise no label (None: the metrics and folder runs then explain the network's top-1 class).

Labels, WordNet ids included, resolve by the one set of rules readout training uses too (`iba_core.labels`):
a label that does not resolve is None here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .images import find_images
from .labels import class_folder, folder_resolver


@dataclass(frozen=True)
class ImageItem:
    """One image of a folder: its key in the results, its file and its class index (None: unlabelled)."""

    key: str  # path relative to the image folder (posix): the image's identity in the results
    path: Path
    label: int | None = None


def list_items(
    root: str | Path,
    labels_file: str | Path | None = None,
    class_index: Callable[[str], int] | None = None,
    limit: int | None = None,
    files: Sequence[Path] | None = None,
    categories: Sequence[str] = (),
) -> list[ImageItem]:
    """Images below `root` with their labels (None where unknown), sorted by relative path.

    categories: the network's class names (`Network.categories`): class names resolve by them, and WordNet ids
    by ImageNet's when the list is ImageNet-1k's (`iba_core.labels`). class_index turns a label given as a class
    name into an index instead (e.g. a test's table). files: these images, in this order, instead of every image
    below root (a list of images; one outside root is keyed by its path relative to root).
    """
    root = Path(root).expanduser()
    files = find_images(root) if files is None else [Path(f) for f in files]
    if limit is not None:
        files = files[: max(0, limit)]
    resolve, labels = folder_resolver(root, labels_file, categories, class_index)

    items = []
    by_folder: dict[str, int | None] = {}
    for path in files:
        try:
            rel, folder = path.relative_to(root).as_posix(), class_folder(root, path)
        except ValueError:  # a listed image outside root: no class folder
            rel, folder = Path(os.path.relpath(path, root)).as_posix(), None
        label = None
        for key in (rel, path.name, path.stem):
            if key in labels.images:
                label = resolve.get(labels.images[key])
                break
        if label is None and folder is not None:
            if folder not in by_folder:  # once per class folder, not per image (a name is matched against every class)
                by_folder[folder] = resolve.get(folder)
            label = by_folder[folder]
        items.append(ImageItem(rel, path, label))
    return items
