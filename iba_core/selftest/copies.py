"""The self-test's image copies: each image of the folder (or of a seeded sample) saved clean and marked, at the
network's resize geometry (`marks.resize_geometry`: why there, in `marks`), under OUT/clean and OUT/marked with the
same relative paths, as PNG (lossless: the two copies differ only where the mark is). The test's identity
(network, weights, preprocessing, mark, images, and once the reaction is known the class the mark pushes toward) is
kept in OUT/mark.json: a rerun with the same request reuses the copies, another request into the same folder is
refused, and so is a rerun that finds another class pushed toward."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..cache import write_atomic
from ..errors import UserError
from ..image_folders import ImageItem
from ..jsonable import jsonable
from ..progress import ProgressFn
from .marks import Mark, Placed, plant, resize_geometry

CLEAN, MARKED = "clean", "marked"
IDENTITY_FILE = "mark.json"
#: The mark as drawn on the crop (RGBA, crop × crop): the page draws it, `open_self_test` reads its region back.
LAYER_FILE = "mark_layer.png"
#: The seed of --sample's draw: the same folder and N give the same images.
SAMPLE_SEED = 0


def copy_key(key: str) -> str:
    """The copies' relative path for an image key: the key itself for a PNG, else the key with ".png" added (a
    JPEG's copy is lossless too, and two files "a.jpg" and "a.png" keep two copies)."""
    return key if key.lower().endswith(".png") else f"{key}.png"


def sampled(items: Sequence[ImageItem], sample: int | None) -> tuple[list[ImageItem], dict]:
    """The images the test uses: all, or `sample` of them drawn with `SAMPLE_SEED` (in folder order); and the
    sample said as data (images, of, seed)."""
    items = list(items)
    if sample is not None and sample < 1:
        raise UserError(f"The sample must be at least 1 image (you gave {sample}).", cli_hint="Give --sample 1 or more.")
    if sample is None or sample >= len(items):
        return items, {"images": len(items), "of": len(items), "seed": None}
    chosen = np.sort(np.random.default_rng(SAMPLE_SEED).choice(len(items), size=sample, replace=False))
    return [items[i] for i in chosen], {"images": sample, "of": len(items), "seed": SAMPLE_SEED}


def identity(network, mark: Mark, items: Sequence[ImageItem], sample: dict) -> dict:
    """What the copies are made of: a rerun into the same folder must ask the same."""
    pre = network.preprocess
    return jsonable({
        "network": network.key, "weights": getattr(network, "weights_id", ""),
        "preprocess": {"resize": pre.resize, "crop": pre.crop_size, "interpolation": pre.interpolation,
                       "channels": pre.channels},
        "mark": mark.identity(), "sample": sample, "images": [item.key for item in items],
    })


def check_identity(out_dir: Path, wanted: dict) -> None:
    """Record the test's identity in OUT/mark.json, or check that the one there is the same (a UserError in one
    sentence, saying what differs, when not; also for a folder with copies but no record)."""
    path = out_dir / IDENTITY_FILE
    if path.is_file():
        try:
            had = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise UserError(f"The self-test record {path} cannot be read ({err}).",
                            cli_hint="Give another --out folder.", app_hint="Choose another folder for this test.") from None
        differ = [k for k in wanted if had.get(k) != wanted[k]]
        if differ:
            raise UserError(f"The folder {out_dir} holds a self-test with another {', '.join(differ)}.",
                            cli_hint="Give another --out folder, or the same request to resume it.",
                            app_hint="Choose another folder for this test, or repeat the same request.")
        return
    if (out_dir / CLEAN).exists() or (out_dir / MARKED).exists():
        raise UserError(f"The folder {out_dir} holds image copies but no self-test record ({IDENTITY_FILE}).",
                        cli_hint="Give another --out folder.")
    text = json.dumps(wanted, indent=1)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def check_toward(out_dir: Path, toward: int, name: str) -> None:
    """Record in OUT/mark.json the class the mark pushes toward (its pair of runs explains that class), or check
    that the one recorded is the same: a UserError in one sentence naming both when a rerun finds another."""
    path = out_dir / IDENTITY_FILE
    try:
        had = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"The self-test record {path} cannot be read ({err}).",
                        cli_hint="Give another --out folder.", app_hint="Choose another folder for this test.") from None
    before = had.get("toward")
    if before is not None and before.get("class") != toward:
        raise UserError(f"The folder {out_dir} holds a self-test whose mark pushed the predictions toward "
                        f"{before.get('name')!r}, where this run finds {name!r}, so its runs for that class cannot be "
                        "resumed.", cli_hint="Give another --out folder.", app_hint="Choose another folder for this "
                        "test.")
    if before is None:
        text = json.dumps({**had, "toward": {"class": int(toward), "name": str(name)}}, indent=1)
        write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _save_png(path: Path, image) -> None:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    write_atomic(path, lambda tmp: tmp.write_bytes(buffer.getvalue()))


def save_layer(out_dir: Path, placed: Placed) -> None:
    """The mark as drawn on the crop, RGBA (alpha 0 outside it), to OUT/mark_layer.png."""
    from PIL import Image

    rgba = np.dstack([placed.colour, np.rint(placed.alpha * 255).astype(np.uint8)])
    _save_png(out_dir / LAYER_FILE, Image.fromarray(rgba, "RGBA"))


@dataclass
class Copies:
    """The copies made (or found from an earlier call): each image's item with its copy's key, and the images that
    could not be read (key: why), the first few kept."""

    items: list[ImageItem]
    keys: list[str]
    unreadable: dict[str, str]


def make_copies(network, items: Sequence[ImageItem], placed: Placed, out_dir: Path,
                progress: ProgressFn | None = None) -> Copies:
    """Save each image clean and marked (skipped where both copies exist: a rerun); an image that cannot be read is
    left out and said."""
    pre = network.preprocess
    kept, keys, unreadable = [], [], {}
    for done, item in enumerate(items):
        key = copy_key(item.key)
        clean, marked = out_dir / CLEAN / key, out_dir / MARKED / key
        if not (clean.is_file() and marked.is_file()):
            try:
                resized, offset = resize_geometry(pre.load(item.path), pre)
            except UserError as err:
                if len(unreadable) < 20:
                    unreadable[item.key] = err.message
                continue
            except OSError as err:
                if len(unreadable) < 20:
                    unreadable[item.key] = f"The file could not be read ({err.strerror or err})."
                continue
            _save_png(clean, resized)
            _save_png(marked, plant(resized, offset, placed))
        kept.append(item)
        keys.append(key)
        if progress is not None:
            progress(done + 1, len(items), f"copies · {item.key}")
    if not kept:
        raise UserError(f"None of the {len(items)} images could be read, so nothing can be marked"
                        + (f" (e.g. {next(iter(unreadable.values()))})" if unreadable else "") + ".")
    return Copies(kept, keys, unreadable)


def probabilities(network, folder: Path, keys: Sequence[str]) -> np.ndarray:
    """(N, classes) class probabilities of the network for the copies `keys` below `folder`, read as a folder run
    reads them."""
    pre = network.preprocess
    return np.stack([network.probabilities(pre.normalise(pre.crop(pre.load(folder / key)))).float().cpu().numpy()
                     for key in keys])


__all__ = ["CLEAN", "Copies", "IDENTITY_FILE", "LAYER_FILE", "MARKED", "SAMPLE_SEED", "check_identity", "check_toward",
           "copy_key", "identity", "make_copies", "probabilities", "sampled", "save_layer"]
