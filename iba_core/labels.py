"""The labels of image folders: one resolver for every command that reads a folder's classes.

`train-readout`, `evaluate` and `attribute FOLDER` (and the Dataset page's runs) label an image folder by the
same rules, so one ImageNet-style folder gets the same class indices everywhere.

A *label* is the name of an image's class folder (the top-level folder below the image root, `class_folder`:
images in sub-folders of a class folder belong to that class; images directly in the root have none) or an
entry of a label file. `LabelResolver` turns one into a class index:

- a **class index** (``285``), checked against the number of classes;
- a **class name** as the network lists it (``tabby``, case-insensitive, or a part of a name that fits exactly
  one class: `iba_core.classes.resolve_class`); a name that two classes share (ImageNet has two ``crane``s) is
  ambiguous and resolves to nothing;
- a **WordNet id** (``n02123045``), first match wins:
  1. a wnid → index table you give: a label file (`read_label_file`: ImageNet's ``LOC_synset_mapping.txt`` /
     ``synsets.txt`` or any text file with one wnid per line in class-index order, ``<wnid>,<index>`` rows, or
     Keras' ``imagenet_class_index.json``), named or found in the image root (`LABEL_FILES`);
  2. for a network whose class list is ImageNet-1k's (1000 classes named as ImageNet names them): the wnid's
     ImageNet-1k index (`imagenet_synsets`: the ILSVRC-2012 synset list that ships with timm, read as a file);
  3. for another network: the wnid's ImageNet names looked up in the network's class list (one exact,
     case-insensitive match: a network fine-tuned on some ImageNet classes that kept their names);
  4. otherwise the wnid is unknown: the image is unlabelled.
  The sorted order of the folders present is never used: a tree of a few ImageNet classes would get 0, 1, 2 …

Unlabelled images are None in `iba_core.image_folders.list_items` (evaluation and folder runs explain the
network's top-1) and -1 in `folder_labels` (readout training trains on the network's top-1). Readout training is
strict besides: a class folder whose name does not resolve is a `DataError` that says how to name it (or pass
``labels=top1``), since training on the wrong class is worse than not starting.

Label files: separators may be commas, tabs or spaces; blank lines and lines starting with '#' are
ignored. A row is ``<image>,<label>`` (the image's path relative to the root, its file name or its
stem) or ``<wnid>,<index>``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .classes import MAX_INDEX_DIGITS, resolve_class
from .errors import MissingFileError, UserError

WNID = re.compile(r"^n\d{8}$")
#: Label files found in an image root when none is named.
LABEL_FILES = ("labels.txt", "labels.csv", "LOC_synset_mapping.txt", "synsets.txt")
#: A class list is ImageNet-1k's when at least this share of its 1000 names are ImageNet's names for the same index
#: (torchvision's list renames 2 of 1000: "crane bird", "maillot tank suit").
IMAGENET_AGREEMENT = 0.95


class DataError(UserError):
    """Images or labels that cannot be used (no images, class folders whose class cannot be told)."""


# --------------------------------------------------------------------------------------------
# Label files.


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


def _read_class_index_json(path: Path, text: str) -> LabelMap:
    """Keras' imagenet_class_index.json: {"0": [wnid, name], …}."""
    try:
        data = json.loads(text)
        wnids = {str(v[0]): int(k) for k, v in data.items()}
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, RecursionError) as err:
        raise DataError(f"{path} is not an imagenet_class_index.json-style map ({{\"0\": [wnid, name]}}).") from err
    return LabelMap({}, wnids)


def read_label_file(path: str | os.PathLike) -> LabelMap:
    """Parse a label / wnid-mapping file (see the module docstring); OSError if it cannot be read."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"The label file {path} is not UTF-8 text ({err.reason} at byte {err.start:,}).") from None
    if path.suffix.lower() == ".json":
        return _read_class_index_json(path, text)
    rows = []
    for raw in text.splitlines():
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
        if WNID.match(key) and value.isdecimal() and len(value) <= MAX_INDEX_DIGITS:  # what int() reads
            labels.wnids[key] = int(value)
        else:
            labels.images[key] = value
    return labels


def read_class_map(path: str | os.PathLike) -> dict[str, int]:
    """wnid → class index from a class map (any file `read_label_file` reads); DataError if it has none."""
    path = Path(path).expanduser()
    try:
        table = read_label_file(path).wnids
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"Cannot read the class map {path}: {err}") from err
    if not table:
        raise DataError(f"{path} does not list WordNet ids (e.g. n01440764).")
    return table


def find_label_file(root: str | os.PathLike) -> Path | None:
    """The first of LABEL_FILES present in `root`, if any."""
    root = Path(root)
    return next((root / n for n in LABEL_FILES if (root / n).is_file()), None)


# --------------------------------------------------------------------------------------------
# ImageNet-1k's classes.


@lru_cache(maxsize=1)
def imagenet_synsets() -> dict[str, tuple[int, tuple[str, ...]]]:
    """wnid → (ImageNet-1k class index, its names) for the 1000 ILSVRC-2012 classes; empty where timm (which ships
    the list as data files) is not installed. The files are read, timm is not imported."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    info = Path(next(iter(spec.submodule_search_locations))) / "data" / "_info"
    try:
        wnids = (info / "imagenet_synsets.txt").read_text(encoding="utf-8").split()
        lemmas = dict(line.split("\t", 1) for line in
                      (info / "imagenet_synset_to_lemma.txt").read_text(encoding="utf-8").splitlines() if "\t" in line)
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    if len(wnids) != 1000:
        return {}
    return {w: (i, tuple(n.strip() for n in lemmas.get(w, "").split(",") if n.strip())) for i, w in enumerate(wnids)}


def is_imagenet_1k(categories: Sequence[str]) -> bool:
    """Whether a class list is ImageNet-1k's: 1000 names, nearly all of them ImageNet's names for the same index."""
    synsets = imagenet_synsets()
    if len(categories) != 1000 or not synsets:
        return False
    names = {i: {n.lower() for n in names} | {", ".join(names).lower()} for i, names in synsets.values()}
    agree = sum(str(name).strip().lower() in names[i] for i, name in enumerate(categories))
    return agree >= IMAGENET_AGREEMENT * len(categories)


# --------------------------------------------------------------------------------------------
# The resolver.


class LabelResolver:
    """Class index for a label (a folder name or a label file's text); see the module docstring.

    categories: the network's class names in index order (empty: indices are not range-checked, names and
    ImageNet wnids resolve only through `class_index` and `wnids`). class_index: resolves indices and names
    instead of `resolve_class` (e.g. `Network.class_index`, or a test's table). wnids: a wnid → index table given
    by the user (a label file), which wins over ImageNet's own.
    """

    def __init__(
        self,
        categories: Sequence[str] = (),
        wnids: Mapping[str, int] | None = None,
        class_index: Callable[[str], int] | None = None,
    ):
        self.categories = list(categories)
        self.wnids = dict(wnids or {})
        self.class_index = class_index
        self.imagenet = is_imagenet_1k(self.categories)
        self._by_name: dict[str, list[int]] = {}
        for i, name in enumerate(self.categories):
            self._by_name.setdefault(str(name).strip().lower(), []).append(i)

    def wnid_index(self, wnid: str) -> int | None:
        """The class index of a WordNet id by rules 1–3 of the module docstring, or None when it is unknown."""
        if wnid in self.wnids:
            return self.wnids[wnid]
        index, names = imagenet_synsets().get(wnid, (None, ()))
        if index is None:
            return None
        if self.imagenet:
            return index
        for name in names:  # ImageNet's names for it, most common first
            hits = self._by_name.get(name.lower(), [])
            if len(hits) == 1:
                return hits[0]
        return None

    def __call__(self, label: str) -> int:
        """The class index of `label`; DataError with the reason when there is none."""
        text = str(label).strip()
        if WNID.match(text):
            index = self.wnid_index(text)
            if index is None:
                raise DataError(f"No class index is known for the WordNet id {text}: no wnid → index table names it, "
                                "and the network's class list does not name it (it is not an ImageNet-1k class).")
            return index
        try:
            if self.class_index is not None:
                return int(self.class_index(text))
            same = self._by_name.get(text.lower(), [])
            if len(same) > 1:
                raise DataError(f"The class name {text!r} is ambiguous (indices {same}); give its index.")
            return resolve_class(self.categories, text)
        except DataError:
            raise
        except UserError as err:  # the class list's own sentence (no class so named, an index out of range)
            raise DataError(err.message) from err

    def get(self, label: str) -> int | None:
        """The class index of `label`, or None when it does not resolve."""
        try:
            return self(label)
        except DataError:
            return None


def class_folder(root: str | os.PathLike, path: str | os.PathLike) -> str | None:
    """The class folder of an image: the top-level folder below `root` (None directly in root)."""
    parts = Path(path).relative_to(root).parts
    return parts[0] if len(parts) > 1 else None


def folder_resolver(root: str | os.PathLike, label_file: str | os.PathLike | None = None,
                    categories: Sequence[str] = (),
                    class_index: Callable[[str], int] | None = None) -> tuple[LabelResolver, LabelMap]:
    """The resolver for the images below `root` and the label file's rows: `label_file`, else the first of
    LABEL_FILES in root. MissingFileError when a named label file is missing."""
    if label_file is None:
        label_file = find_label_file(Path(root).expanduser())
    elif not Path(label_file).expanduser().is_file():
        raise MissingFileError(f"Label file not found: {label_file}")
    labels = read_label_file(label_file) if label_file is not None else LabelMap.empty()
    return LabelResolver(categories, labels.wnids, class_index), labels


def folder_labels(
    root: str | os.PathLike,
    files: Sequence[Path],
    categories: Sequence[str],
    mode: str = "auto",
    class_map: str | os.PathLike | None = None,
) -> tuple[list[int], str]:
    """Readout training's labels: a class index per file (-1: use the network's top-1) and a sentence saying where
    they came from, by the rules of the module docstring.

    mode: "auto" (class folders if there are any, else top-1), "folders" (class folders required) or
    "top1" (ignore folders). class_map: a wnid → index file for WordNet-id folders (else a label file in root).
    A class folder whose name does not resolve is a DataError.
    """
    root = Path(root).expanduser()
    if mode == "top1":
        return [-1] * len(files), "the network's own top-1 on each crop (labels=top1)"
    top = [class_folder(root, p) for p in files]
    folders = sorted({t for t in top if t is not None})
    if not folders:
        if mode == "folders":
            raise DataError(f"No class folders below {root}; put images in folders named by class, or use labels=top1.")
        return [-1] * len(files), "the network's own top-1 on each crop (unlabelled folder)"
    if class_map is not None:
        resolve = LabelResolver(categories, read_class_map(class_map))
        how = f"class folders (index, class name, or WordNet id via {class_map})"
    else:
        resolve, _ = folder_resolver(root, None, categories)
        how = "class folders (index, class name or WordNet id)"
    n = len(categories)
    mapping: dict[str, int] = {}
    for f in folders:
        try:
            mapping[f] = resolve(f)
        except DataError as err:
            wnid = bool(WNID.match(f))
            raise DataError(
                f"Cannot tell the class of folder {f!r} below {root}: {err}",
                cli_hint=("Pass a class map (--class-map LOC_synset_mapping.txt or imagenet_class_index.json), "
                          if wnid else "") + f"name class folders by index (0…{n - 1}) or by class name, or use "
                "--labels top1.",
                app_hint=f"Name class folders by index (0…{n - 1}) or by class name.",
            ) from err
    labels = [-1 if t is None else mapping[t] for t in top]
    unlabelled = labels.count(-1)
    if unlabelled:
        how += f"; {unlabelled} images outside class folders use the network's top-1"
    return labels, how
