"""Links that reopen a view: what a page shows before Run, as the query parameters of its URL.

A view is the image (a sample photo by name, or an upload this server kept, by its digest), the network, the
layer (or CoIBA's layer range, which also chooses CoIBA), β·k, the class and the Per-Sample replay step; the page is
the URL's path. `to_params` writes a view as short strings, `from_params` reads one back and says in one sentence
per value what it could not use (the rest of the view still opens); `fit` checks the layer, the range and the class
against the network once it is loaded.

Safety: a link never names a file on the server. Its image is a sample photo's name or `upload:` and a digest of
exactly 16 hex digits, which names a file in the cache's uploads folder; its network is a built-in's key,
`torchvision:NAME` of a torchvision classifier, or `card:NAME` of a model card in the models folder (looked up by
name among the cards found there, never by a path).

Uploads: `keep_upload` saves each accepted upload once in the disk cache (`iba_core.cache`), bounded to
KEEP_UPLOADS files and KEEP_UPLOADS_MB megabytes, the least recently used removed first; `kept_upload` reads
one back, so a link with `image=upload:<digest>` reopens it for anyone on the same server while it is kept.
"""
from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from ..bottleneck import BETA_K_RANGE
from ..cache import cache_file, load_arrays, save_arrays
from ..coiba import layer_range as coiba_layers, parse_range, range_text
from ..errors import UserError, quoted
from ..images import sample_image_names
from ..networks import REGISTRY
from ..networks.card_format import CARD_PREFIX
from ..networks.torchvision_any import PREFIX as TORCHVISION_PREFIX
from .choices import BETA_K_CHOICES
from .inputs import SAMPLE_PREFIX, ImageInput, image_digest
from .models import TORCHVISION_CHOICE, CardChoice, torchvision_names

log = logging.getLogger(__name__)

#: The query parameters of a view, in the order a link lists them.
PARAMS = ("image", "network", "layer", "range", "beta_k", "target", "step")
#: `image=upload:<digest>`: an uploaded image kept in the cache, by `inputs.image_digest`.
UPLOAD_PREFIX = "upload:"
#: The form of `inputs.image_digest` (the first 16 hex digits of a SHA-1): nothing else names a kept upload.
DIGEST_PATTERN = re.compile(r"[0-9a-f]{16}")
#: A longer value is refused without being repeated (no key, name or number of the app is this long).
MAX_VALUE_CHARS = 100
#: The largest replay step a link may ask for (the steps field's own maximum is far below).
MAX_STEP = 10_000
#: Kept uploads: at most this many files and megabytes in all; the least recently used go first.
KEEP_UPLOADS = 200
KEEP_UPLOADS_MB = 500
#: The cache folder (under settings.cache_dir()) of kept uploads.
UPLOADS_KIND = "uploads"
#: The sentence for a link whose upload this server no longer keeps (or never kept).
UPLOAD_GONE = "The uploaded image of this link is not on this server any more; upload it again."


@dataclass(frozen=True)
class View:
    """What a page shows before Run; None: not given (the page's own choice stays)."""

    image: str | None = None  # a sample photo's name, or "upload:<digest>"
    network: str | None = None  # a built-in's key, "torchvision:NAME" or "card:NAME"
    layer: str | None = None
    layer_range: tuple[str, str] | None = None  # CoIBA's first and last layer: the Per-Sample page's CoIBA
    beta_k: float | None = None
    target: int | None = None  # a class index
    step: int | None = None  # the Per-Sample replay step, from 1

    @property
    def upload_digest(self) -> str | None:
        """The digest of an uploaded image, or None for a sample photo or no image."""
        if self.image is not None and self.image.startswith(UPLOAD_PREFIX):
            return self.image[len(UPLOAD_PREFIX):]
        return None


def image_value(image: ImageInput) -> str:
    """The link's `image` for a chosen image: a sample's name or upload:<digest>."""
    if image.digest.startswith(SAMPLE_PREFIX):
        return image.digest[len(SAMPLE_PREFIX):]
    return UPLOAD_PREFIX + image.digest


def to_params(view: View) -> dict[str, str]:
    """The view's query parameters (those given), as short strings in PARAMS order."""
    values = {"image": view.image, "network": view.network, "layer": view.layer,
              "range": None if view.layer_range is None else range_text(*view.layer_range),
              "beta_k": None if view.beta_k is None else format(view.beta_k, "g"),
              "target": None if view.target is None else str(int(view.target)),
              "step": None if view.step is None else str(int(view.step))}
    return {name: values[name] for name in PARAMS if values[name] is not None}


def _shown(value: str) -> str:
    """A value from a link as a message quotes it (shortened; the page escapes its Markdown)."""
    return quoted(value, 40)


def from_params(params: Mapping[str, str], cards: Iterable[CardChoice] = ()) -> tuple[View, list[str]]:
    """The view a link's query parameters describe, and one sentence per value that cannot be used (that value
    is left out of the view; the rest still opens). Never raises. Unknown parameters are ignored.

    cards: the model cards in the models folder (`models.find_cards`), for `network=card:NAME`. The layer and
    the class are checked against the network by `fit`, once it is loaded.
    """
    problems: list[str] = []
    given: dict[str, str] = {}
    for name in PARAMS:
        value = params.get(name)
        if value is None:
            continue
        value = str(value).strip()
        if not value:
            continue
        if len(value) > MAX_VALUE_CHARS:
            problems.append(f"The link's {_NAMES[name]} is too long to be one; it is left out.")
            continue
        given[name] = value
    view = View()
    if "image" in given:
        image, problem = _image(given["image"])
        view = replace(view, image=image)
        problems += [problem] if problem else []
    if "network" in given:
        value = given["network"]
        if network_option(value, cards) is None:
            problems.append(f"The link's network {_shown(value)} is not offered on this server; the network "
                            "chosen here stays.")
        else:
            view = replace(view, network=value)
    if "layer" in given:
        view = replace(view, layer=given["layer"])
    if "range" in given:
        try:
            view = replace(view, layer_range=parse_range(given["range"]))
        except UserError:
            problems.append(f"The link's layer range {_shown(given['range'])} is not two layer names as FIRST:LAST; "
                            "it is left out.")
    if "beta_k" in given:
        beta_k, problem = _beta_k(given["beta_k"])
        view = replace(view, beta_k=beta_k)
        problems += [problem] if problem else []
    for name in ("target", "step"):
        if name in given:
            value = given[name]
            top = MAX_STEP if name == "step" else None
            low = 1 if name == "step" else 0
            if not re.fullmatch(r"\d{1,7}", value) or int(value) < low or (top is not None and int(value) > top):
                what = "a class index (a whole number from 0)" if name == "target" else \
                    f"a replay step (a whole number from 1 to {MAX_STEP})"
                problems.append(f"The link's {_NAMES[name]} {_shown(value)} is not {what}; it is left out.")
            else:
                view = replace(view, **{name: int(value)})
    return view, problems


_NAMES = {"image": "image", "network": "network", "layer": "layer", "range": "layer range", "beta_k": "β·k",
          "target": "class", "step": "replay step"}


def _image(value: str) -> tuple[str | None, str | None]:
    if value.startswith(UPLOAD_PREFIX):
        digest = value[len(UPLOAD_PREFIX):]
        if not DIGEST_PATTERN.fullmatch(digest):
            return None, "The link's uploaded image is not named by a digest of 16 hex digits; it is left out."
        if not upload_path(digest).is_file():
            return None, UPLOAD_GONE
        return value, None
    if value in sample_image_names():
        return value, None
    return None, (f"The link's image {_shown(value)} is not one of the sample photos; the image chosen here "
                  "stays.")


def _beta_k(value: str) -> tuple[float | None, str | None]:
    """β·k from a link: a number in BETA_K_RANGE, set to the nearest value the slider offers."""
    low, high = BETA_K_RANGE
    try:
        number = float(value)
    except ValueError:
        return None, f"The link's β·k {_shown(value)} is not a number; it is left out."
    if not (math.isfinite(number) and low <= number <= high):
        return None, (f"The link's β·k {_shown(value)} is outside {low:g} to {high:g}; it is left out.")
    nearest = min(BETA_K_CHOICES, key=lambda c: abs(math.log(c) - math.log(number)))
    if not math.isclose(nearest, number, rel_tol=1e-6):
        return nearest, (f"The link's β·k {number:g} is not on the slider; the nearest value, {nearest:g}, is set.")
    return nearest, None


def network_option(value: str, cards: Iterable[CardChoice] = ()) -> str | None:
    """The network menu's option for a link's network value (a built-in's key, the torchvision entry for
    torchvision:NAME, a card's path for card:NAME of a usable card found in the models folder), or None when
    this server offers no such network."""
    if value in REGISTRY:
        return value
    if value.startswith(TORCHVISION_PREFIX):
        return TORCHVISION_CHOICE if value[len(TORCHVISION_PREFIX):] in torchvision_names() else None
    if value.startswith(CARD_PREFIX):
        name = value[len(CARD_PREFIX):]
        return next((c.key for c in cards if c.name == name and not c.error), None)
    return None


def fit(view: View, network) -> tuple[View, list[str]]:
    """The view with its layer, layer range and class checked against the loaded `network` (a `Network`): one left
    out, with a sentence, when the network has no such layer or class, or CoIBA cannot take the range
    (`coiba.layer_range`)."""
    problems: list[str] = []
    spec = network.spec
    if view.layer is not None and view.layer not in spec.layers:
        problems.append(f"The link's layer {_shown(view.layer)} is not a layer of {spec.title}; its default layer, "
                        f"{spec.default_layer}, is set.")
        view = replace(view, layer=None)
    if view.layer_range is not None:
        try:
            coiba_layers(network, *view.layer_range)
        except UserError as err:
            # the page then stays on its own bottleneck choice (no CoIBA is chosen for a range left out)
            problems.append(f"The link's layer range {_shown(range_text(*view.layer_range))} is left out. {err}")
            view = replace(view, layer_range=None)
    n = len(network.categories)
    if view.target is not None and not 0 <= view.target < n:
        problems.append(f"The link's class {view.target} is not one of the {n} classes of {spec.title} "
                        f"(0 to {n - 1}); the top prediction is set.")
        view = replace(view, target=None)
    return view, problems


# ---- uploads kept for links ----------------------------------------------------------------------


def upload_path(digest: str) -> Path:
    """The cache file of a kept upload; UserError unless `digest` has DIGEST_PATTERN's form (so a link's text
    never reaches a path)."""
    if not isinstance(digest, str) or not DIGEST_PATTERN.fullmatch(digest):
        raise UserError("An uploaded image is named by a digest of 16 hex digits.")
    return cache_file(UPLOADS_KIND, digest, suffix=".npz")


def keep_upload(name: str, data: bytes) -> str | None:
    """Save an accepted upload (already checked by `inputs.upload_input`) in the cache, once per content, and
    mark it as just used; then drop the least recently used beyond the bounds. Returns its digest, or None when
    it could not be kept (a read-only or full cache: the page works on, only its link cannot reopen the image)."""
    digest = image_digest(data)
    path = upload_path(digest)
    try:
        if path.is_file():
            os.utime(path)  # recently used: kept longest
        else:
            save_arrays(path, {"data": np.frombuffer(data, dtype=np.uint8)},
                        {"digest": digest, "name": str(name)[:MAX_VALUE_CHARS]}, compress=False)
            prune_uploads(path.parent, KEEP_UPLOADS, KEEP_UPLOADS_MB)
    except OSError as err:
        log.warning("Could not keep the upload %s for links: %s", digest, err)
        return None
    return digest


def kept_upload(digest: str) -> tuple[str, bytes] | None:
    """(file name, bytes) of a kept upload, or None when it is not (or no longer) kept, or is damaged (then
    removed by `cache.load_arrays`). Its bytes are checked against the digest."""
    try:
        path = upload_path(digest)
    except UserError:
        return None

    def check(arrays: dict, meta: dict) -> str | None:
        data = arrays.get("data")
        if data is None or data.dtype != np.uint8 or data.ndim != 1:
            return "not an upload's bytes"
        return None if image_digest(data.tobytes()) == digest else "its bytes do not match its digest"

    loaded = load_arrays(path, expect={"digest": digest}, check=check)
    if loaded is None:
        return None
    arrays, meta = loaded
    return str(meta.get("name") or "upload"), arrays["data"].tobytes()


def prune_uploads(folder: str | os.PathLike, max_files: int = KEEP_UPLOADS,
                  max_mb: float = KEEP_UPLOADS_MB) -> list[Path]:
    """Remove the least recently used kept uploads beyond `max_files` files or `max_mb` megabytes in all;
    returns the removed paths. Files other sessions remove meanwhile are skipped."""
    entries = []
    for path in Path(folder).glob("*.npz"):
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, path))
    entries.sort(key=lambda e: e[0], reverse=True)  # newest first
    removed, count, total = [], 0, 0
    for _, size, path in entries:
        count, total = count + 1, total + size
        if count > max_files or total > max_mb * 2**20:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


# ---- which image and network a shown result is of -------------------------------------------------


def result_note(result_image: str, result_network: str, current_image: str | None,
                current_network: str | None, *, result_digest: str = "", current_digest: str = "") -> str:
    """'' when a kept result shown on a page (a run) is of the image and network chosen above it; else one
    sentence that says which image (and network) it is of. Images are told apart by their content digests
    (`inputs.ImageInput.digest`: two uploads may share a file name), by name only where a digest is missing;
    names, as the page shows them (a file's or sample's name, a network's title), make the sentence. None: no
    usable image or network is chosen above (a refused upload, a network that does not load)."""
    if result_digest and current_digest:
        other_image = result_digest != current_digest
    else:
        other_image = result_image != current_image
    other_network = result_network != current_network
    # Another image under the same name (a photo re-exported, another upload called image.jpg): say so.
    which = (f"another image also named {result_image}" if other_image and result_image == current_image
             else result_image)
    if current_image is None:
        also = f" with {result_network}" if other_network else ""
        return f"This run is of {result_image}{also}; no usable image is chosen above, so the last run stays shown."
    if other_image and other_network:
        return (f"This run is of {which} with {result_network}, not of the image and network chosen "
                "above; press Run for those.")
    if other_image:
        return f"This run is of {which}, not of the image chosen above; press Run for that one."
    if other_network:
        return f"This run used {result_network}, not the network chosen above; press Run for that one."
    return ""
