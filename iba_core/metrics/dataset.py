"""Evaluation images and their labels.

`list_items(root)` finds every image below `root` (recursively, sorted) and labels it, first match wins:

1. a label file's row for the image (`labels.txt`/`labels.csv` in `root`, or `--labels FILE`):
   `<image>,<label>` where <image> is the path relative to root, the file name or its stem, and <label>
   a class index, an ImageNet class name or a WordNet id;
2. the image's class folder (the top-level folder below root): named by a class index (`285/…`), by a
   class name, or by a WordNet id (`n02123045/…`) when a label file maps wnids to indices — rows
   `<wnid>,<index>`, or a synset list with one wnid per line in class-index order (ImageNet's
   `LOC_synset_mapping.txt` / `synsets.txt`, also found in root);
3. otherwise no label (the metrics then explain the network's top-1 class).

Labels resolve by the rules readout training uses too (`iba_core.datasets`, which also parses the
label files); here a label that does not resolve is simply None.
No wnid→index table ships offline, hence the mapping file for wnid-named folders.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..datasets import LabelMap, LabelResolver, class_folder, find_label_file, read_label_file
from ..errors import MissingFileError
from ..images import find_images

__all__ = ["ImageItem", "LabelMap", "find_label_file", "list_items", "read_label_file"]


@dataclass(frozen=True)
class ImageItem:
    key: str  # path relative to the image folder (posix): the image's identity in the results
    path: Path
    label: int | None = None


def list_items(
    root: str | Path,
    labels_file: str | Path | None = None,
    class_index: Callable[[str], int] | None = None,
    limit: int | None = None,
    files: Sequence[Path] | None = None,
) -> list[ImageItem]:
    """Images below `root` with their labels (None where unknown), sorted by relative path.

    class_index turns a label given as a class name into an index (e.g. `Network.class_index`);
    without it only class indices and WordNet ids resolve. files: these images, in this order, instead of
    every image below root (a list of images; one outside root is keyed by its path relative to root).
    """
    root = Path(root).expanduser()
    files = find_images(root) if files is None else [Path(f) for f in files]
    if limit is not None:
        files = files[: max(0, limit)]
    if labels_file is None:
        labels_file = find_label_file(root)
    elif not Path(labels_file).is_file():
        raise MissingFileError(f"Label file not found: {labels_file}")
    labels = read_label_file(labels_file) if labels_file is not None else LabelMap.empty()
    resolve = LabelResolver(wnids=labels.wnids, class_index=class_index)

    items = []
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
            label = resolve.get(folder)
        items.append(ImageItem(rel, path, label))
    return items
