"""The pictures of a run on the Dataset page, with no Streamlit: an image of the run as its network saw it, the
gallery of overlays on one bits scale with its captions and scale note, the link that opens an image on the
Per-Sample page, and the small thumbnails and lone maps the per-class view and the report show.

    cells = gallery(run, rows.head(GALLERY_PAGE), trust)   # PNG overlays on one scale, with their links

A link never names a file on the server: an image of the run is kept as an upload (`links.keep_upload`, the
bounded cache of uploads) and the link names it by its digest, as a link to an uploaded image does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import numpy as np
from PIL import Image

from ..render.colours import BITS_LABEL
from ..render.text import shown_name
from ..runs.highlights import BITS_UNIT, few_bits_reference
from ..runs.store import RunFolderError
from ..runs.tables import Run
from ..trust import NotTrustedError, Trust, check_server_path
from . import links
from .dataset import (FEW_BITS_COLUMN, is_missing, method_names, method_units, range_ends, result_rows,
                      with_flags)

if TYPE_CHECKING:
    import pandas as pd

#: Images per gallery view (a page of the gallery).
GALLERY_PAGE = 12
#: The Per-Sample page's URL path (app.py's page for pages/per_sample.py).
PER_SAMPLE_PATH = "per_sample"
#: Side of an image's thumbnail in the cluster view and the report, in pixels.
THUMB_PX = 96


# ---- images of the run ----------------------------------------------------------------------------


def readable_image_path(run: Run, row, trust: Trust) -> Path | None:
    """The row's image file when it exists and `trust` lets the app read it, else None (the page says so)."""
    try:
        resolved = check_server_path(run.image_path(row), trust, what="image")
    except (NotTrustedError, RunFolderError):  # not allowed here, or a key that leaves the run's image folder
        return None
    return resolved if resolved.is_file() else None


def _preprocess(run: Run, height: int, width: int):
    """The crop the run's network saw, from run.json's preprocess (resize, crop) when recorded (checked when the
    run was opened: `runs.run_file`), else the short side resized to the map's size and centre-cropped; a map's
    size outside a card's crop range (an edited table) is a RunFolderError before any image is made."""
    from ..networks.card_format import CROP_RANGE
    from ..networks.spec import Preprocess

    info = run.info.get("preprocess") or {}
    crop = int(info.get("crop") or min(height, width))
    resize = int(info.get("resize") or crop)
    if not info.get("crop") and not CROP_RANGE[0] <= crop <= CROP_RANGE[1]:
        raise RunFolderError(f"The run's map of {height} × {width} pixels lies outside a network's crop range "
                             f"({CROP_RANGE[0]} to {CROP_RANGE[1]} pixels).")
    return Preprocess((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), resize=resize, crop=crop)


def network_crop(run: Run, row, trust: Trust) -> Image.Image | None:
    """The row's image as the network saw it (its crop, RGB), or None when it cannot be read here."""
    path = readable_image_path(run, row, trust)
    if path is None:
        return None
    r = run.row(row)
    try:
        pre = _preprocess(run, int(r["height"]), int(r["width"]))
        return pre.crop(pre.load(path)).convert("RGB")
    except Exception:  # noqa: BLE001 - a file changed since the run: shown as missing, never a traceback
        return None


# ---- the gallery ----------------------------------------------------------------------------------


@dataclass
class GalleryCell:
    """One overlay of the gallery: the picture (PNG, with its legend), a caption, the Per-Sample link."""

    index: object  # the row's index in the table
    png: bytes | None  # None: the image cannot be read here
    caption: str
    link: str | None


def page_scale(run: Run, rows: "pd.DataFrame") -> float:
    """The gallery's one bits scale: the largest bits per pixel among the bottleneck maps of `rows` (the rows of
    one gallery view), but never below the mean bits per pixel of a typical map of the run (the few-bits
    reference total over the map's pixels), so maps that hold almost nothing look dark instead of being stretched
    to a uniformly bright square; 0 when none."""
    units = method_units(run)
    table = result_rows(run.table)
    references: dict[str, float | None] = {}
    top = 0.0
    for _, row in rows.iterrows():
        method = row["method"]
        if units.get(method) != BITS_UNIT:
            continue
        values = run.heatmap(row)
        top = max(top, float(np.nanmax(values)))
        if method not in references:
            totals = table.loc[table["method"] == method, "total_bits"]
            references[method] = few_bits_reference(totals.to_numpy(dtype=np.float64, na_value=np.nan))
        if references[method] is not None and values.size:
            top = max(top, references[method] / values.size)
    return top


def gallery(run: Run, rows: "pd.DataFrame", trust: Trust, scale: float | None = None,
            with_links: bool = True, outlines=None) -> list[GalleryCell]:
    """The overlays of `rows` (at most one gallery view): bottleneck maps on one bits scale (`page_scale`, or
    `scale`), other methods each on its own maximum (their units differ); each with its legend and (with_links)
    its Per-Sample link. outlines: a function of (rows, {row index: crop size (H, W)}) giving {row index: (H, W)
    bool}, a region outlined over each overlay (a concept's: `dataset_concepts.outline_masks`)."""
    from ..render.overlays import outline_region, overlay_image, png_bytes, with_legend

    units, names = method_units(run), method_names(run)
    scale = page_scale(run, rows) if scale is None else scale
    few = with_flags(run, rows)[FEW_BITS_COLUMN]
    crops = {index: network_crop(run, row, trust) for index, row in rows.iterrows()}
    masks = outlines(rows, {i: (c.height, c.width) for i, c in crops.items() if c is not None}) if outlines else {}
    cells = []
    for index, row in rows.iterrows():
        heatmap = run.heatmap(row)
        crop = crops[index]
        bits = units.get(row["method"]) == BITS_UNIT
        png = None
        if crop is not None:
            values = heatmap if bits else np.abs(heatmap)
            top = scale if bits else (float(values.max()) if values.size else 0.0)
            picture = overlay_image(crop, values, top=top)
            if index in masks:  # drawn before the legend: the outline lies on the image only
                picture = outline_region(picture, masks[index])
            picture = with_legend(picture, values, max(top, 1e-6),
                                  label=map_label(units, row["method"], absolute=not bits))
            png = png_bytes(picture, optimize=False)
        caption = cell_caption(row, names.get(row["method"], row["method"]), bits, bool(few[index]))
        cells.append(GalleryCell(index, png, caption, per_sample_link(run, row, trust) if with_links else None))
    return cells


def map_label(units: dict[str, str], method: str, absolute: bool = False) -> str:
    """What a legend calls the values of `method`'s maps: bits per pixel for the bottlenecks, else the method's
    unit (or "attribution"), marked as absolute values where the picture shows |map|."""
    if units.get(method) == BITS_UNIT:
        return BITS_LABEL
    label = units.get(method) or "attribution"
    return f"|{label}|" if absolute else label


def scale_note(run: Run, rows: "pd.DataFrame", scale: float) -> str:
    """The gallery's sentence on its colour scales: the bottleneck maps' one bits scale where the view has any,
    and that other methods' maps (absolute values, not bits) each go to their own maximum."""
    units = method_units(run)
    bits = rows["method"].map(lambda m: units.get(m) == BITS_UNIT)
    others = "other methods' maps (absolute values, not bits) each on their own maximum, as their units differ"
    if not bits.any():
        return "These methods' maps are not in bits: each is drawn as absolute values on its own maximum."
    note = (f"One colour scale for the bottleneck maps of this view: 0 – {scale:.3g} bits per pixel (the largest "
            "value among them, or a typical map's mean if larger, so maps that hold almost nothing stay dark)")
    return f"{note}; {others}." if not bits.all() else f"{note}."


def cell_caption(row, method_name: str, bits: bool, few_bits: bool = False) -> str:
    """A gallery cell's caption: image, class, correct or not, bits (and "needs very few bits" where flagged) and
    border share; every name in a bidi isolate, so the numbers after it read in order (`shown_name`)."""
    name = row["class_name"]
    parts = [shown_name(row["image"]), shown_name(name) if isinstance(name, str) else f"class {row['target']}"]
    if not is_missing(row["correct"]):
        parts.append("correct" if bool(row["correct"]) else f"predicted {shown_name(row['predicted_name'])}")
    parts.append(shown_name(method_name))
    if bits and not is_missing(row["total_bits"]):
        parts.append(f"{float(row['total_bits']):.1f} bits" + (" (needs very few bits)" if few_bits else ""))
    if not is_missing(row["border_share"]):
        parts.append(f"border {float(row['border_share']):.0%}")
    return " · ".join(parts)


# ---- the link to the Per-Sample page --------------------------------------------------------------


def run_layer(run: Run, method: str) -> str | None:
    """The layer of a method's bottleneck (its settings in run.json), else the run's layer."""
    settings = run.info.get("methods", {}).get(method, {}).get("settings", {})
    return settings.get("layer") or run.info.get("layer")


def per_sample_link(run: Run, row, trust: Trust) -> str | None:
    """A relative link (`per_sample?image=…&network=…&layer=…&target=…`) that opens the row's image on the
    Per-Sample page with the run's network, layer and class (and β·k for a Per-Sample or CoIBA row, and a CoIBA
    row's layer range, which opens CoIBA); None when the image cannot be read here or cannot be kept for the
    link."""
    from ..coiba import block_of

    r = run.row(row)
    path = readable_image_path(run, r, trust)
    if path is None:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest = links.keep_upload(str(r["image"]), data)  # its run name (class folder too)
    if digest is None:
        return None
    method = run.info.get("methods", {}).get(str(r["method"]), {})
    beta_k = method.get("settings", {}).get("beta_k") if method else None
    layers = method.get("settings", {}).get("layers") if method else None  # CoIBA's: the page opens CoIBA
    branch = bool(method) and method.get("settings", {}).get("placement") == "branch"
    view = links.View(image=links.UPLOAD_PREFIX + digest, network=run.info.get("network"),
                      layer=block_of(run_layer(run, str(r["method"]))) if branch else run_layer(run, str(r["method"])),
                      # a branch placement's inputs named by their blocks, as the page's range picker names them
                      layer_range=(tuple(block_of(n) if branch else n for n in range_ends(layers)) if layers
                                   else None),
                      beta_k=float(beta_k) if isinstance(beta_k, (int, float)) else None,
                      # a prompt row's target counts the run's prompts, not a class: the page takes the prompt
                      target=None if is_missing(r["target"]) or _has_prompt(r) else int(r["target"]))
    return f"{PER_SAMPLE_PATH}?{urlencode(links.to_params(view), safe=':')}"


def _has_prompt(row) -> bool:
    """Whether the row explains a text prompt (a CLIP run's), not a class."""
    prompt = row.get("prompt") if hasattr(row, "get") else None
    return isinstance(prompt, str) and bool(prompt)


# ---- thumbnails and maps alone --------------------------------------------------------------------


def image_thumbnail(run: Run, row, trust: Trust, size: int = THUMB_PX, top: float | None = None) -> bytes | None:
    """A small PNG of the row's map over its image as the network saw it (bottleneck maps on 0 – `top` bits per
    pixel, default their own maximum; other methods' |map| on its own maximum), or None when the image cannot be
    read here."""
    from ..render.overlays import overlay_image, png_bytes

    crop = network_crop(run, row, trust)
    if crop is None:
        return None
    r = run.row(row)
    heatmap = run.heatmap(r)
    bits = method_units(run).get(str(r["method"])) == BITS_UNIT
    picture = overlay_image(crop, heatmap if bits else np.abs(heatmap), top=top if bits else None)
    return png_bytes(picture.resize((size, size), Image.Resampling.BILINEAR), optimize=False)


def map_png(values: np.ndarray, label: str, size: int = 2 * THUMB_PX, top: float | None = None) -> bytes:
    """A map alone (no photo) on 0 – `top` (default: its own maximum), with the legend that states the scale in
    `label`."""
    from ..render.overlays import colorize, png_bytes, with_legend

    values = np.asarray(values, dtype=np.float32)
    if top is None:
        top = float(values.max()) if values.size else 0.0
    top = max(float(top), 1e-12)
    picture = Image.fromarray(colorize(values, vmax=top)).resize((size, size), Image.Resampling.NEAREST)
    return png_bytes(with_legend(picture, values, top, label=label), optimize=False)


def thumbnails_on_one_scale(run: Run, rows: "pd.DataFrame", trust: Trust) -> tuple[list[dict], float | None]:
    """The maps of `rows` over their images as small PNGs ([{image, caption, png}]) on one bits scale (the largest
    bits per pixel among them; None when no map is in bits), captions naming each image's total bits and flag."""
    units = method_units(run)
    scale = page_scale(run, rows)
    few = with_flags(run, rows)[FEW_BITS_COLUMN]
    cells = []
    for index, row in rows.iterrows():
        bits = units.get(row["method"]) == BITS_UNIT
        caption = shown_name(row["image"])  # isolated: the bits after it read in order
        if bits and not is_missing(row["total_bits"]):
            caption += f" · {float(row['total_bits']):.3g} bits" + (" · needs very few bits" if few[index] else "")
        cells.append({"image": str(row["image"]), "caption": caption,
                      "png": image_thumbnail(run, row, trust, top=scale if scale > 0 else None)})
    has_bits = rows["method"].map(lambda m: units.get(m) == BITS_UNIT).any() if len(rows) else False
    return cells, (scale if has_bits else None)
