"""Evaluation images and their labels.

`list_items(root)` finds every image below `root` (recursively, sorted) and labels it, first match wins:

1. a label file's row for the image (`labels.txt`/`labels.csv` in `root`, or `--labels FILE`):
   `<image>,<label>` where <image> is the path relative to root, the file name or its stem, and <label>
   a class index or an ImageNet class name;
2. the image's class folder: named by a class index (`285/…`), or by a WordNet id (`n02123045/…`)
   when a label file maps wnids to indices — rows `<wnid>,<index>`, or a synset list with one wnid per
   line in class-index order (ImageNet's `LOC_synset_mapping.txt` / `synsets.txt`, also found in root);
3. otherwise no label (the metrics then explain the network's top-1 class).

Separators may be commas, tabs or spaces; blank lines and lines starting with '#' are ignored.
No wnid→index table ships offline, hence the mapping file for wnid-named folders.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

WNID = re.compile(r"^n\d{8}$")
LABEL_FILES = ("labels.txt", "labels.csv", "LOC_synset_mapping.txt", "synsets.txt")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".jfif"}


@dataclass(frozen=True)
class ImageItem:
    key: str  # path relative to the image folder (posix): the image's identity in the results
    path: Path
    label: int | None = None


@dataclass
class LabelMap:
    images: dict[str, str]  # image path / name / stem → label text
    wnids: dict[str, int]  # WordNet id → class index

    @classmethod
    def empty(cls) -> "LabelMap":
        return cls({}, {})


def _split(line: str) -> list[str]:
    """Split at the first tab, else after a leading wnid + space, else at the first comma or space."""
    if "\t" in line:
        return [p.strip() for p in line.split("\t", 1)]
    head = line.split(None, 1)
    if WNID.match(head[0]):
        return head
    if "," in line:
        return [p.strip() for p in line.split(",", 1)]
    return head


def read_label_file(path: str | Path) -> LabelMap:
    """Parse a label / wnid-mapping file (see the module docstring)."""
    rows = []
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rows.append(_split(line))
    labels = LabelMap.empty()
    wnid_rows = [r for r in rows if WNID.match(r[0])]
    synset_list = bool(rows) and len(wnid_rows) == len(rows) and not any(
        len(r) > 1 and r[1].strip().isdigit() for r in rows
    )
    if synset_list:  # one wnid per line, in class-index order
        labels.wnids = {r[0]: i for i, r in enumerate(rows)}
        return labels
    for r in rows:
        if len(r) < 2:
            continue
        key, value = r[0], r[1].strip()
        if WNID.match(key) and value.isdigit():
            labels.wnids[key] = int(value)
        else:
            labels.images[key] = value
    return labels


def find_label_file(root: str | Path) -> Path | None:
    root = Path(root)
    return next((root / n for n in LABEL_FILES if (root / n).is_file()), None)


def find_images(root: str | Path) -> list[Path]:
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"Image folder not found: {root}")
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def list_items(
    root: str | Path,
    labels_file: str | Path | None = None,
    class_index: Callable[[str], int] | None = None,
    limit: int | None = None,
) -> list[ImageItem]:
    """Images below `root` with their labels (None where unknown), sorted by relative path.

    class_index turns a label given as a class name into an index (e.g. `LoadedModel.class_index`).
    """
    root = Path(root).expanduser()
    files = find_images(root)
    if limit is not None:
        files = files[: max(0, limit)]
    if labels_file is None:
        labels_file = find_label_file(root)
    elif not Path(labels_file).is_file():
        raise FileNotFoundError(f"Label file not found: {labels_file}")
    labels = read_label_file(labels_file) if labels_file is not None else LabelMap.empty()

    def to_index(text: str) -> int | None:
        text = text.strip()
        if WNID.match(text):
            return labels.wnids.get(text)
        if class_index is not None:  # checks the index range, resolves class names
            try:
                return int(class_index(text))
            except (ValueError, KeyError):
                return None
        return int(text) if text.isdigit() else None

    items = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        label = None
        for key in (rel, path.name, path.stem):
            if key in labels.images:
                label = to_index(labels.images[key])
                break
        if label is None and path.parent != root:
            label = to_index(path.parent.name)
        items.append(ImageItem(rel, path, label))
    return items
