"""Bounding-box metric (paper §4.5): how many of the n highest-scored pixels lie inside the box.

For a box (mask) of n pixels, the score is |top-n pixels ∩ box| / n ∈ [0, 1]; a random map scores
about the box's share of the image. Boxes come from Pascal-VOC-style XML files (the format of the
ImageNet validation boxes); their coordinates refer to the original image and are mapped through the
network's own preprocessing (resize the short side, centre-crop; `boxes_on_crop`) onto the crop. An image
with several boxes is scored against their union. Images whose box covers more of the crop than
`LARGEST_BOX_SHARE` are skipped, as in the paper.

Coordinates are read as pixel edges: a box [xmin, xmax] covers the crop pixels whose centres fall
inside the mapped interval. Ties in the attribution (e.g. a flat map) are broken at random, with a
fixed seed, so a constant map scores like a random one rather than favouring the top-left corner.
"""
from __future__ import annotations

import math
import re

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import UserError
from ..images import MAX_SIDE
from ..networks.spec import CROP, RESIZE
from .common import group_records, method_label, resolve_map

METRIC = "bbox"
#: Paper §4.5: only images whose boxes cover less than 33 % of the input are evaluated.
LARGEST_BOX_SHARE = 0.33
#: A document type declaration or an entity: a VOC annotation has neither, and an entity can expand without bound.
DOCTYPE = re.compile(r"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)


class InvertedBoxError(UserError):
    """An annotation whose box is inverted or empty (xmin ≥ xmax or ymin ≥ ymax): a fault of the file, told apart
    from one that cannot be read at all (a folder run counts each by its reason)."""


@dataclass(frozen=True)
class Box:
    """A box in the original image's pixel coordinates."""

    name: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float


@dataclass
class Annotation:
    width: int
    height: int
    boxes: list[Box] = field(default_factory=list)
    filename: str = ""


def parse_voc(path_or_text: str | Path) -> Annotation:
    """Read a Pascal-VOC / ImageNet bounding-box XML file (or its text)."""
    text = path_or_text
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and not path_or_text.lstrip().startswith("<")):
        text = Path(path_or_text).read_text(encoding="utf-8")
    if DOCTYPE.search(text):  # entities expand (billion laughs) or read files: never parsed, whatever expat allows
        raise UserError("The annotation declares a DOCTYPE or entities, which a Pascal-VOC annotation never holds, "
                        "so it is not read.")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise UserError(f"Not a readable VOC XML annotation: {err}.") from err

    def number(node, tag: str) -> float:
        child = node.find(tag)
        if child is None or child.text is None:
            raise UserError(f"The annotation lacks <{tag}>.")
        try:
            value = float(child.text)
        except ValueError:
            raise UserError(f"The annotation's <{tag}> is not a number ({child.text.strip()[:40]!r}).") from None
        if not math.isfinite(value) or value < 0:
            raise UserError(f"The annotation's <{tag}> must be a finite number of pixels ≥ 0 (it is {value:g}).")
        return value

    size = root.find("size")
    if size is None:
        raise UserError("The annotation lacks <size> (width and height of the original image).")
    boxes = []
    for obj in root.iter("object"):
        bb = obj.find("bndbox")
        if bb is None:
            continue
        name = (obj.findtext("name") or "").strip()
        box = Box(name, number(bb, "xmin"), number(bb, "ymin"), number(bb, "xmax"), number(bb, "ymax"))
        if box.xmin >= box.xmax or box.ymin >= box.ymax:
            raise InvertedBoxError(f"The annotation's box {name[:40]!r} is inverted or empty (xmin {box.xmin:g}, xmax "
                            f"{box.xmax:g}, ymin {box.ymin:g}, ymax {box.ymax:g}).")
        boxes.append(box)
    width, height = number(size, "width"), number(size, "height")
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):  # larger: no image read here, and int(inf) later
        raise UserError(f"The annotation's image size must be from 1 to {MAX_SIDE:,} pixels a side (it says "
                        f"{width:g} × {height:g}).")
    width, height = int(width), int(height)
    return Annotation(width, height, boxes, root.findtext("filename") or "")


def crop_geometry(width: int, height: int, resize: int = RESIZE, crop: int = CROP) -> tuple[float, float, int, int]:
    """(scale_x, scale_y, left, top) of torchvision's Resize(resize) + CenterCrop(crop) for an image.

    Matches torchvision: the short side becomes `resize`, the long side int(resize · long / short);
    the crop offsets are round((size − crop) / 2).
    """
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = resize, int(resize * long / short)
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    left = int(round((new_w - crop) / 2.0))
    top = int(round((new_h - crop) / 2.0))
    return new_w / width, new_h / height, left, top


def box_to_crop(box: Box, width: int, height: int, resize: int = RESIZE,
                crop: int = CROP) -> tuple[float, float, float, float]:
    """The box's (x0, y0, x1, y1) in crop coordinates (may extend beyond the crop)."""
    sx, sy, left, top = crop_geometry(width, height, resize, crop)
    return box.xmin * sx - left, box.ymin * sy - top, box.xmax * sx - left, box.ymax * sy - top


def preprocess_sizes(preprocess) -> tuple[int, int]:
    """(resize, crop) of a network's preprocessing (`Network.preprocess`: `.resize`, `.crop_size`);
    ImageNet's 256 and 224 for an object without them."""
    return int(getattr(preprocess, "resize", RESIZE)), int(getattr(preprocess, "crop_size", CROP))


def boxes_on_crop(annotation: Annotation, preprocess) -> tuple[np.ndarray, list[tuple[float, float, float, float]]]:
    """(union mask on the crop, each box's (x0, y0, x1, y1) in crop coordinates) for the network whose
    preprocessing this is: the one mapping from the original image to the crop, for the CLI and the app."""
    resize, crop = preprocess_sizes(preprocess)
    boxes = [box_to_crop(b, annotation.width, annotation.height, resize, crop) for b in annotation.boxes]
    return box_mask(annotation, resize, crop), boxes


def box_mask(annotation: Annotation, resize: int = RESIZE, crop: int = CROP,
             names: Sequence[str] | None = None) -> np.ndarray:
    """(crop, crop) bool mask of the union of the boxes (optionally only those named in `names`)."""
    mask = np.zeros((crop, crop), dtype=bool)
    centres = np.arange(crop) + 0.5
    for box in annotation.boxes:
        if names is not None and box.name not in names:
            continue
        x0, y0, x1, y1 = box_to_crop(box, annotation.width, annotation.height, resize, crop)
        cols = (centres >= x0) & (centres <= x1)
        rows = (centres >= y0) & (centres <= y1)
        mask |= rows[:, None] & cols[None, :]
    return mask


def bbox_ratio(attribution, mask: np.ndarray, x: torch.Tensor | None = None, target: int = 0, seed: int = 0) -> float:
    """Fraction of the n highest-scored pixels inside the mask, n = the mask's pixel count.

    attribution: an (H, W) map, or a function (x, target) → map (then x is needed).
    """
    if callable(attribution):
        if x is None:
            raise ValueError("An attribution function needs the image x.")
        values = resolve_map(attribution, x, target)
    else:
        values = np.asarray(attribution, dtype=np.float64)
    mask = np.asarray(mask, dtype=bool)
    if values.shape != mask.shape:
        raise ValueError(f"Attribution {values.shape} and box mask {mask.shape} differ in shape.")
    n = int(mask.sum())
    if n == 0:
        raise UserError("The box mask is empty.")
    flat = np.nan_to_num(values.ravel(), nan=-np.inf)
    tiebreak = np.random.default_rng(seed).random(flat.size)
    top = np.lexsort((tiebreak, -flat))[:n]  # by value (descending), ties at random
    return float(mask.ravel()[top].sum() / n)


def find_annotation(boxes_dir: str | Path, image_key: str) -> Path | None:
    """The XML file for an image: <boxes>/<relative path>.xml, else <boxes>/**/<stem>.xml."""
    root = Path(boxes_dir)
    rel = Path(image_key).with_suffix(".xml")
    if (root / rel).is_file():
        return root / rel
    if (root / rel.name).is_file():
        return root / rel.name
    hits = sorted(root.rglob(rel.name))
    return hits[0] if hits else None


# --------------------------------------------------------------------------------------------
# Records → table.


def skipped_note(records: Sequence[dict]) -> str:
    """"\n\nN image(s) skipped: why (count), …" for the records that say an image was skipped ("" for none): each
    reason with its count, a box file that could not be read by its name and its fault."""
    reasons: dict[str, set] = {}
    for r in records:
        if r.get("skipped"):
            reasons.setdefault(str(r["skipped"]), set()).add(r.get("image"))
    if not reasons:
        return ""
    images = set().union(*reasons.values())
    listed = sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    shown = "; ".join(f"{why} ({len(imgs)})" for why, imgs in listed[:6])
    more = f"; {len(listed) - 6} other reasons" if len(listed) > 6 else ""
    return f"\n\n{len(images)} image(s) skipped: {shown}{more}."


def format_table(records: Sequence[dict]) -> str:
    from .results import markdown_table

    records_all = [r for r in records if r.get("metric", METRIC) == METRIC]
    records = [r for r in records_all if not r.get("skipped")]
    settings = list(dict.fromkeys(r["setting"] for r in records))
    models = {s: next(r.get("model", "") for r in records if r["setting"] == s) for s in settings}
    methods = list(dict.fromkeys(r["method"] for r in records))
    groups = group_records(records, "method", "setting")
    rows = []
    for m in methods:
        row = [method_label(records, m)]
        counts = []
        for s in settings:
            rs = [r["ratio"] for r in groups.get((m, s), []) if r.get("ratio") is not None]
            row.append(float(np.mean(rs)) if rs else None)
            counts.append(len(rs))
        row.append(max(counts, default=0))
        rows.append(row)
    header = ["Method", *(f"{models[s]} bbox".strip() for s in settings), "images"]
    note = skipped_note(records_all)
    return "### Bounding box: share of the top-n pixels inside the box (higher is better)\n\n" + markdown_table(
        header, rows
    ) + note + "\n"
