"""The Dataset page's state and decisions, with no Streamlit: opening a run folder typed on the server, what stands
out across it (first, before any choice), filtering its table, the gallery of overlays on one bits scale, per class
the mean map and clusters of similar maps, the link that opens an image on the Per-Sample page, the HTML report, and
a folder run in the background.

    run = open_run_folder("/data/runs/val", trust)       # checked against the app's trust rules first
    found = highlights(run)                              # runs.highlights: few bits, flagged clusters, …
    rows = filter_rows(run.table, RowFilter(correct=False))
    cells = gallery(run, rows.head(12), trust)           # PNG overlays on one scale, with their links
    job = start_folder_job(shared, "/data/val", "/data/runs/val2", ["iba_10"], trust=trust)
    job.progress()                                       # (done, total, label), polled by the page

Images of a run are read only where the app's trust allows (`trust.check_server_path`: inside the owner's
folders, or anywhere for an app on localhost), so a run.json naming another folder cannot make the app show it.
A link never names a file on the server: an image of the run is kept as an upload (`links.keep_upload`, the
bounded cache of uploads) and the link names it by its digest, as a link to an uploaded image does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence
from urllib.parse import urlencode

import numpy as np
from PIL import Image

from ..errors import UserError
from ..per_sample import BottleneckSettings
from ..render.colours import BITS_LABEL
from ..runs.store import YARDSTICK_COLUMNS
from ..runs.highlights import (BITS_UNIT, BORDER_FLAG, RunHighlights, few_bits_mask, few_bits_reference,
                               mass_thumbnails, named, run_highlights)
from ..runs.per_class import class_mean_map, map_clusters
from ..runs.store import RunFolderError
from ..runs.tables import Run, open_run
from ..trust import NotTrustedError, Trust, check_server_path, visitor_path
from . import links
from .folder_job import (  # noqa: F401 - the Dataset page's folder run, kept importable from here
    PAGE_BATCH_IMAGES, PAGE_METRICS, FolderJob, FolderRunBusy, GPU_ROAD, RunEstimate, current_job, job_text,
    metric_cost_text, start_folder_job, stats_images_folder, time_one_image,
)

if TYPE_CHECKING:
    import pandas as pd

#: Images per gallery view (a page of the gallery).
GALLERY_PAGE = 12
#: The flag column: a row whose decision needs very few bits (`runs.highlights.few_bits_mask`).
FEW_BITS_COLUMN = "needs_few_bits"
#: The Per-Sample page's URL path (app.py's page for pages/per_sample.py).
PER_SAMPLE_PATH = "per_sample"
#: Side of an image's thumbnail in the cluster view and the report, in pixels.
THUMB_PX = 96
#: Numeric columns a user can filter by, in the order the page offers them.
MEASURES = ("total_bits", "border_share", "box_share", "concentration", "distance_to_class_mean", "p_target",
            "p_predicted", "p_with", "seconds", *YARDSTICK_COLUMNS)
CORRECT_CHOICES = ("all", "correct", "incorrect")


# ---- opening a run -----------------------------------------------------------------------------


def open_run_folder(text: str, trust: Trust) -> Run:
    """The run in the folder typed on the server, when `trust` lets the app read it (else a NotTrustedError
    saying why); an empty field or a folder that is no run: a UserError in one sentence. A run with damaged parts
    opens with the intact rows; `run.missing` says in one sentence what is left out (only read: nothing is moved)."""
    text = (text or "").strip()
    if not text:
        raise UserError("Type the path of a run folder on the server (the folder a folder run wrote its results to).")
    path = check_server_path(Path(text).expanduser(), trust, what="run folder")
    return open_run(path)


# ---- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowFilter:
    """Which result rows to show: classes (class names; empty: all), correct ("all", "correct", "incorrect"),
    methods (keys; empty: all), ranges {column: (low, high)} a row's value must lie in (NaN never does), and images
    (keys of the table; empty: all), e.g. the images of a highlight."""

    classes: tuple[str, ...] = ()
    correct: str = "all"
    methods: tuple[str, ...] = ()
    ranges: tuple[tuple[str, float, float], ...] = ()
    images: tuple[str, ...] = ()


def result_rows(table: "pd.DataFrame") -> "pd.DataFrame":
    """The rows with a result (no error)."""
    return table[table["error"].isna()]


def error_rows(table: "pd.DataFrame") -> "pd.DataFrame":
    """The rows whose image or method failed, with their message: image, method, error."""
    return table[table["error"].notna()][["image", "method", "error"]]


def filter_rows(table: "pd.DataFrame", row_filter: RowFilter) -> "pd.DataFrame":
    """The result rows that pass `row_filter` (error rows never: they are shown apart)."""
    if row_filter.correct not in CORRECT_CHOICES:
        raise UserError(f"Show {row_filter.correct!r}? Choose one of {', '.join(CORRECT_CHOICES)}.")
    rows = result_rows(table)
    keep = np.ones(len(rows), dtype=bool)
    if row_filter.classes:
        keep &= rows["class_name"].isin(list(row_filter.classes)).to_numpy()
    if row_filter.correct != "all":
        correct = rows["correct"].fillna(False).to_numpy(dtype=bool)
        keep &= correct if row_filter.correct == "correct" else ~correct
    if row_filter.methods:
        keep &= rows["method"].isin(list(row_filter.methods)).to_numpy()
    if row_filter.images:
        keep &= rows["image"].isin(list(row_filter.images)).to_numpy()
    for column, low, high in row_filter.ranges:
        values = rows[column].to_numpy(dtype=np.float64, na_value=np.nan)
        keep &= (values >= low) & (values <= high)  # NaN compares False: a row without the value drops out
    return rows[keep]


def value_range(table: "pd.DataFrame", column: str) -> tuple[float, float] | None:
    """(min, max) of a numeric column over the result rows, or None when it has no finite value (a column the
    run does not fill, e.g. box_share without boxes)."""
    values = result_rows(table)[column].to_numpy(dtype=np.float64, na_value=np.nan)
    values = values[np.isfinite(values)]
    return (float(values.min()), float(values.max())) if values.size else None


def method_units(run: Run) -> dict[str, str]:
    """method key → the unit of its maps (BITS_UNIT for the bottlenecks), from run.json."""
    return {key: str(m.get("unit", "")) for key, m in run.info.get("methods", {}).items()}


def method_names(run: Run) -> dict[str, str]:
    """method key → its display name, from run.json (the key where it names none)."""
    return {key: str(m.get("name") or key) for key, m in run.info.get("methods", {}).items()}


def with_flags(run: Run, rows: "pd.DataFrame") -> "pd.DataFrame":
    """`rows` (rows of run.table) with the FEW_BITS_COLUMN flag, judged against the whole run (not the filtered
    rows: a filter must not change which images need few bits)."""
    import pandas as pd

    flags = pd.Series(few_bits_mask(run.table, method_units(run)), index=run.table.index)
    return rows.assign(**{FEW_BITS_COLUMN: flags.reindex(rows.index, fill_value=False).to_numpy(dtype=bool)})


def methods_bits_first(run: Run) -> list[str]:
    """The run's method keys, the bottlenecks (maps in bits) first, each group in key order."""
    units = method_units(run)
    return sorted(method_names(run), key=lambda k: (units.get(k) != BITS_UNIT, k))


def highlights(run: Run, method: str | None = None) -> RunHighlights | None:
    """What stands out across the whole run (`runs.highlights.run_highlights`) in `method`'s maps (default: the
    first bottleneck method, else the first method); None for a run without methods."""
    methods = methods_bits_first(run)
    if method is None:
        method = methods[0] if methods else None
    if method is None:
        return None
    return run_highlights(run, method, method_units(run))


def highlight_rows(run: Run, images: Sequence[str], method: str) -> "pd.DataFrame":
    """The result rows of `method` for `images`, in the order given (a highlight's order: most striking first)."""
    rows = result_rows(run.table)
    rows = rows[(rows["method"] == method) & rows["image"].isin(list(images))]
    order = {image: i for i, image in enumerate(images)}
    return rows.iloc[np.argsort([order[i] for i in rows["image"]], kind="stable")]


def layer_text(run: Run) -> str:
    """The run's bottleneck layer(s) in words: their names (CoIBA's range as "CoIBA first … last"), or 'none (…)'
    for a run of methods that read the whole network (run.json's layer is then null: never shown as "None")."""
    info = run.info
    settings = [m.get("settings", {}) for m in info.get("methods", {}).values()]
    ranges = sorted({_range_text(s["layers"]) for s in settings if s.get("layers")})
    # CoIBA's settings name its first layer too (`layer`): its range says it
    layers = sorted({str(s.get("layer")) for s in settings if s.get("layer") and not s.get("layers")}
                    | ({str(info["layer"])} if info.get("layer") and not ranges else set()))
    return ", ".join(layers + ranges) if layers or ranges else "none (its methods read the whole network)"


def method_layer_text(run: Run, method: str) -> str:
    """The layer(s) `method`'s maps were made at, in words (a report's header): as the run recorded them
    (run.json's methods' `layers`: a bottleneck's layer or CoIBA's range, Grad-CAM's target layer); for a run made
    before they were recorded, a layer its settings name, or a bottleneck's the run's (`layer_text`)."""
    recorded = run.info.get("methods", {}).get(method, {})
    settings = recorded.get("settings", {})
    if "layers" in recorded:
        layers = [str(name) for name in recorded["layers"]]
    elif settings.get("layers"):
        layers = list(_range_ends(settings["layers"]))
    elif settings.get("layer") or "beta_k" in settings:
        return str(settings.get("layer") or layer_text(run))
    else:
        return "not recorded (a run made before reports named each method's layer)"
    if not layers:
        return "none (the method reads the whole network)"
    return layers[0] if len(layers) == 1 else _range_text(layers)


def _range_ends(layers) -> tuple[str, str]:
    """(first, last) of CoIBA's layers as run.json records them (a list, first to last; or "first:last")."""
    from ..coiba import parse_range

    if isinstance(layers, str) and ":" not in layers:  # a one-layer range, as CoIBA's setting once took it
        return layers, layers
    return parse_range(layers if isinstance(layers, str) else [layers[0], layers[-1]])


def _range_text(layers) -> str:
    """CoIBA's layers as run.json records them: "CoIBA block3_2 … block7_1"."""
    from ..results import range_label

    return f"CoIBA {range_label(*_range_ends(layers))}"


def run_line(run: Run) -> str:
    """The run in a few words: 'network X · layer Y' (`layer_text`)."""
    return f"network {run.info.get('network') or 'unknown'} · layer {layer_text(run)}"


# ---- the field's metrics -------------------------------------------------------------------------


@dataclass
class MetricMeans:
    """The means of the field's metric columns a run has (`metrics.yardsticks`): per method (`by_method`: method
    name, maps, one column per metric) and per class and method (`by_class`: class, method, maps, …), over the
    result rows with a value; `columns` the metric columns present, in order; `higher` whether a higher value is
    better for each; `notes` a sentence per column (what it measures, which way is better) and `protocol` the
    sentences of how they were measured (run.json)."""

    columns: list[str]
    by_method: "pd.DataFrame"
    by_class: "pd.DataFrame"
    higher: dict[str, bool]
    notes: dict[str, str]
    protocol: list[str]

    def header(self, column: str) -> str:
        """A column's name with its direction: "insertion_auc ↑" (higher is better) or "deletion_auc ↓"."""
        return f"{column} {'↑' if self.higher[column] else '↓'}"


def metric_columns(table: "pd.DataFrame") -> list[str]:
    """The metric columns with at least one value among the result rows (a run measures none by default)."""
    rows = result_rows(table)
    return [c for c in YARDSTICK_COLUMNS if c in rows and rows[c].notna().any()]


def metric_help(columns: Sequence[str]) -> dict[str, str]:
    """column → its sentence (what it measures, which way is better) for the metric columns among `columns`."""
    if not columns:
        return {}
    from ..metrics.yardsticks import COLUMN_TEXT

    return {c: COLUMN_TEXT[c] for c in columns if c in COLUMN_TEXT}


def metric_means(run: Run) -> MetricMeans | None:
    """The run's metric means per method and per class and method (`MetricMeans`); None when it measured none.
    A mean is over the rows with a value (the pointing scores only where the image has a box: `maps` counts the
    rows with any metric); pointing_hit's mean is the hit rate."""
    columns = metric_columns(run.table)
    if not columns:
        return None
    from ..metrics.yardsticks import COLUMN_TEXT, HIGHER_IS_BETTER, protocol_sentences

    rows = result_rows(run.table)
    rows = rows[rows[columns].notna().any(axis=1)]
    names = method_names(run)
    order = {key: i for i, key in enumerate(methods_bits_first(run))}

    def means(keys: list[str]) -> "pd.DataFrame":
        """Means of the columns per group of `keys`, the bottlenecks first (`methods_bits_first`), named."""
        grouped = rows[columns].astype("float64").groupby([rows[k] for k in keys], dropna=False)
        frame = grouped.mean()
        frame.insert(0, "maps", grouped.size())
        frame = frame.reset_index()
        frame = frame.iloc[np.lexsort((frame["method"].map(lambda k: order.get(k, len(order))).to_numpy(),
                                       *(frame[k].astype(str).to_numpy() for k in reversed(keys[:-1]))))]
        return frame.assign(method=frame["method"].map(lambda k: names.get(k, k))).reset_index(drop=True)

    by_method = means(["method"])
    by_class = means(["class_name", "method"]).rename(columns={"class_name": "class"})
    identity = (run.info.get("settings") or {}).get("yardsticks") or {}
    return MetricMeans(columns, by_method, by_class, {c: HIGHER_IS_BETTER[c] for c in columns},
                       {c: COLUMN_TEXT[c] for c in columns}, protocol_sentences(identity) if identity else [])


# ---- images of the run ---------------------------------------------------------------------------


def readable_image_path(run: Run, row, trust: Trust) -> Path | None:
    """The row's image file when it exists and `trust` lets the app read it, else None (the page says so)."""
    try:
        resolved = check_server_path(run.image_path(row), trust, what="image")
    except (NotTrustedError, RunFolderError):  # not allowed here, or a key that leaves the run's image folder
        return None
    return resolved if resolved.is_file() else None


def _preprocess(run: Run, height: int, width: int):
    """The crop the run's network saw, from run.json's preprocess (resize, crop) when recorded, else the short
    side resized to the map's size and centre-cropped."""
    from ..networks.spec import Preprocess

    info = run.info.get("preprocess") or {}
    crop = int(info.get("crop") or min(height, width))
    resize = int(info.get("resize") or crop)
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


# ---- the gallery ---------------------------------------------------------------------------------


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
            with_links: bool = True) -> list[GalleryCell]:
    """The overlays of `rows` (at most one gallery view): bottleneck maps on one bits scale (`page_scale`, or
    `scale`), other methods each on its own maximum (their units differ); each with its legend and (with_links)
    its Per-Sample link."""
    from ..render.overlays import overlay_image, png_bytes

    units, names = method_units(run), method_names(run)
    scale = page_scale(run, rows) if scale is None else scale
    few = with_flags(run, rows)[FEW_BITS_COLUMN]
    cells = []
    for index, row in rows.iterrows():
        heatmap = run.heatmap(row)
        crop = network_crop(run, row, trust)
        bits = units.get(row["method"]) == BITS_UNIT
        png = None
        if crop is not None:
            top = scale if bits else None
            picture = overlay_image(crop, np.abs(heatmap) if not bits else heatmap, top=top, legend=True,
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
    border share."""
    name = row["class_name"]
    parts = [str(row["image"]), name if isinstance(name, str) else f"class {row['target']}"]
    if not _missing(row["correct"]):
        parts.append("correct" if bool(row["correct"]) else f"predicted {row['predicted_name']}")
    parts.append(method_name)
    if bits and not _missing(row["total_bits"]):
        parts.append(f"{float(row['total_bits']):.1f} bits" + (" (needs very few bits)" if few_bits else ""))
    if not _missing(row["border_share"]):
        parts.append(f"border {float(row['border_share']):.0%}")
    return " · ".join(parts)


def _missing(value) -> bool:
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


# ---- the link to the Per-Sample page -------------------------------------------------------------


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
                      layer_range=(tuple(block_of(n) if branch else n for n in _range_ends(layers)) if layers
                                   else None),
                      beta_k=float(beta_k) if isinstance(beta_k, (int, float)) else None,
                      # a prompt row's target counts the run's prompts, not a class: the page takes the prompt
                      target=None if _missing(r["target"]) or _has_prompt(r) else int(r["target"]))
    return f"{PER_SAMPLE_PATH}?{urlencode(links.to_params(view), safe=':')}"


def _has_prompt(row) -> bool:
    prompt = row.get("prompt") if hasattr(row, "get") else None
    return isinstance(prompt, str) and bool(prompt)


# ---- searching the run for a text prompt ---------------------------------------------------------


#: Images a prompt search shows (the top of its ranking).
PROMPT_HITS = 12


def run_prompts(run: Run) -> list[str]:
    """The text prompts the run holds result rows for (a CLIP run's `--prompt`s), in run.json's order; [] for a run
    that explains classes."""
    rows = result_rows(run.table)
    held = {p for p in rows["prompt"].dropna().astype(str) if p} if "prompt" in rows else set()
    listed = [str(p) for p in run.info.get("prompts") or [] if str(p) in held]
    return listed + sorted(held - set(listed))


@dataclass
class PromptSearch:
    """The run's images ranked for one of its prompts: `rows` (the prompt's result rows of `method`), most bits
    first (`by` "total_bits"; for a method whose maps are not in bits, the highest similarity first: `by`
    "p_target"), ties by the higher similarity."""

    prompt: str
    method: str
    by: str
    rows: "pd.DataFrame"


def prompt_methods(run: Run, prompt: str) -> list[str]:
    """The methods with result rows for `prompt`, the bottlenecks first (`methods_bits_first`)."""
    rows = result_rows(run.table)
    have = set(rows.loc[rows["prompt"] == prompt, "method"].astype(str)) if "prompt" in rows else set()
    return [m for m in methods_bits_first(run) if m in have]


def held_prompt(run: Run, text: str) -> str | None:
    """The run's prompt that `text` names (spaces collapsed; exactly, else differing only in case), or None."""
    wanted = " ".join((text or "").split())
    prompts = run_prompts(run)
    return next((p for p in prompts if p == wanted), None) or next(
        (p for p in prompts if p.casefold() == wanted.casefold()), None)


def search_prompt(run: Run, text: str, method: str | None = None) -> PromptSearch:
    """The run's images ranked for the prompt `text` (exactly one of the run's prompts, or one that differs only in
    case) by `method`'s maps (default: the first bottleneck with rows for it): a UserError in one sentence for an
    empty prompt, for a run without prompts, and for a prompt the run does not hold (`missing_prompt_text`: how to
    add it)."""
    wanted = " ".join((text or "").split())
    if not wanted:
        raise UserError("Type a prompt to search the run for, or pick one of its prompts.")
    prompts = run_prompts(run)
    if not prompts:
        raise UserError("This run explains classes, not text prompts: searching for a prompt needs a folder run of a "
                        "CLIP model with text prompts.",
                        cli_hint="Run `python -m iba_core attribute FOLDER --model clip:DIR --prompt TEXT --out RUN`.",
                        app_hint="Start one under “Start a run on a folder of the server” with a CLIP model and its "
                        "prompts.")
    found = held_prompt(run, wanted)
    if found is None:
        raise UserError(missing_prompt_text(run, wanted))
    methods = prompt_methods(run, found)
    if method is None:
        method = methods[0] if methods else None
    if method not in methods:
        raise UserError(f"The run has no {method} map for the prompt “{found}”.")
    rows = result_rows(run.table)
    rows = rows[(rows["prompt"] == found) & (rows["method"] == method)]
    by = "total_bits" if method_units(run).get(method) == BITS_UNIT else "p_target"
    keys = [by] if by == "p_target" else [by, "p_target"]
    return PromptSearch(found, method, by, rows.sort_values(keys, ascending=False, na_position="last", kind="stable"))


#: The command line's flag of each Per-Sample setting a run.json records (`cli/attribute.py`).
BOTTLENECK_FLAGS = {"steps": "--steps", "batch": "--batch", "lr": "--lr", "sigma": "--sigma", "seed": "--seed",
                    "read_point": "--read-point", "inactive_threshold": "--inactive-threshold",
                    "precision": "--precision", "stats_samples": "--n"}
#: In the command that adds a prompt, where the run's network has no key a command takes (a model folder).
MODEL_PLACEHOLDER = "clip:MODEL_FOLDER"


def add_prompt_command(run: Run, prompt: str) -> str:
    """The command line that adds `prompt`'s rows to the run (a rerun into its folder with the run's network, layer
    and methods: only the new prompt's rows are made). A network keyed by a model folder's name is written
    MODEL_PLACEHOLDER (the folder's path is not in run.json)."""
    import shlex

    from ..networks import check_network_key

    info = run.info
    model = str(info.get("network"))
    try:
        check_network_key(model)
    except UserError:  # a model folder is keyed by its name ("folder:NAME"): its path is the user's
        model = MODEL_PLACEHOLDER
    parts = ["python", "-m", "iba_core", "attribute", str(run.source), "--model", model]
    if info.get("layer"):
        parts += ["--layer", str(info["layer"])]
    methods = info.get("methods") or {}
    if methods:
        parts += ["--methods", *methods]
    # the bottleneck's settings where they are not the command's defaults: a rerun must match run.json's
    settings = next((m.get("settings") or {} for m in methods.values() if "steps" in (m.get("settings") or {})), {})
    defaults = BottleneckSettings()
    for name, flag in BOTTLENECK_FLAGS.items():
        value, default = settings.get(name), getattr(defaults, name, None)
        if value is not None and value != default:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if (info.get("settings") or {}).get("stats_images"):
        parts += ["--stats-images", str(info["settings"]["stats_images"])]
    parts += ["--out", str(run.path), "--prompt", prompt]
    return " ".join(shlex.quote(p) for p in parts)


def missing_prompt_text(run: Run, prompt: str, command: bool = True) -> str:
    """A few sentences for a prompt the run holds no rows for: the prompts it holds, and how to add this one (the
    command line, left out with command=False where it is shown apart, or the Dataset page's folder-run form into
    the same run folder)."""
    held = run_prompts(run)
    how = f"with `{add_prompt_command(run, prompt)}`, or" if command else "with the command below, or"
    methods = ", ".join(run.info.get("methods") or {}) or "none"
    return (f"The run holds no maps for the prompt “{prompt}” (its prompts: {', '.join(held) or 'none'}). Add it "
            f"{how} with *Start a run on a folder of the server* on the Dataset page: the run's image folder "
            f"({run.source}), this run folder ({run.path}), its methods ({methods}) and the prompt; only the new "
            "prompt's maps are made."
            + (f" In the command, {MODEL_PLACEHOLDER} stands for the run's model folder." if MODEL_PLACEHOLDER in
               add_prompt_command(run, prompt) else ""))


def prompt_caption(row, rank: int, by: str) -> str:
    """A ranked thumbnail's numbers: its rank, image, total bits (a bottleneck) and the cosine similarity of the
    image with the prompt."""
    parts = [f"{rank}. {row['image']}"]
    if by == "total_bits" and not _missing(row["total_bits"]):
        parts.append(f"{float(row['total_bits']):,.1f} bits")
    if not _missing(row["p_target"]):
        parts.append(f"similarity {float(row['p_target']):.3f}")
    return " · ".join(parts)


# ---- per class: mean map and clusters -------------------------------------------------------------


@dataclass
class ClusterView:
    """One cluster of similar maps: its members (rows of the table), where their maps put their mass (`mean_map`:
    the mean of the members' maps on the thumbnail grid, in bits per pixel for the bottlenecks, else in shares of
    each map), the members' mean border share, whether that flags a border shortcut, their median total bits, and
    whether their maps hold almost no bits (`near_zero`: the median needs very few bits, as the run's flag says)."""

    cluster: int
    members: "pd.DataFrame"
    mean_map: np.ndarray  # THUMBNAIL × THUMBNAIL
    border_share: float
    flagged: bool
    median_bits: float = float("nan")
    near_zero: bool = False


@dataclass
class ClassView:
    """A class of one method: its mean map (bits per pixel for the bottlenecks), its clusters, and the clusters'
    one colour scale (`cluster_scale`, in `cluster_unit`: the largest cluster mean over every class of the run, so a
    cluster whose maps hold few bits looks dark, never stretched to full colour)."""

    method: str
    target: int
    class_name: str
    images: int
    mean_map: np.ndarray
    clusters: list[ClusterView] = field(default_factory=list)
    cluster_scale: float = 0.0
    cluster_unit: str = "share of the map"


def class_targets(run: Run, method: str) -> list[tuple[int, str]]:
    """(target, class name) of the classes with maps of `method`, in target order."""
    rows = result_rows(run.table)
    rows = rows[(rows["method"] == method) & rows["target"].notna()]
    pairs = rows.groupby("target")["class_name"].first()
    return [(int(t), str(n) if isinstance(n, str) else f"class {int(t)}") for t, n in pairs.items()]


def class_view(run: Run, method: str, target: int, cluster_scale: float | None = None) -> ClassView:
    """The class's mean map and its clusters of similar maps (`runs.map_clusters`: SpRAy), largest first, each
    cluster's mean map on one scale: `cluster_scale` (the run's, `RunHighlights.cluster_scale`), else this class's
    largest cluster mean."""
    names = dict(class_targets(run, method))
    if int(target) not in names:
        raise UserError(f"The run has no {method} map of class {target}.")
    bits = method_units(run).get(method) == BITS_UNIT
    mean = class_mean_map(run, method, int(target))
    groups = map_clusters(run, method, int(target))
    amounts = mass_thumbnails(groups.thumbnails, groups.rows, bits)
    few = with_flags(run, groups.rows)[FEW_BITS_COLUMN]
    clusters = []
    for c in range(groups.k):
        where = (groups.rows["cluster"] == c).to_numpy()
        members = groups.members(c)
        border = float(np.nanmean(members["border_share"].to_numpy(dtype=np.float64, na_value=np.nan))) \
            if members["border_share"].notna().any() else float("nan")
        median = float(members["total_bits"].median()) if bits and members["total_bits"].notna().any() \
            else float("nan")
        clusters.append(ClusterView(c, members, amounts[where].mean(axis=0).astype(np.float32), border,
                                    bool(math.isfinite(border) and border >= BORDER_FLAG), median,
                                    bool(bits and few[where].mean() > 0.5)))
    top = max((float(c.mean_map.max()) for c in clusters), default=0.0)
    # The run's scale is the largest of these same means, summed in another order and dtype: a top above it by
    # float rounding only must not give this class a scale of its own (every class is drawn on one scale).
    scale = cluster_scale if cluster_scale and top <= cluster_scale * (1 + 1e-5) else max(top, cluster_scale or 0.0)
    return ClassView(method, int(target), names[int(target)], len(groups.rows), mean, clusters,
                     scale, BITS_LABEL if bits else "share of the map")


def cluster_words(cluster: ClusterView, reference_bits: float | None) -> str:
    """A sentence on a cluster's bits: that its maps hold almost no bits (median against the run's upper quartile),
    so their picture is dark on the common scale; "" for a cluster with ordinary bits or maps not in bits."""
    if not cluster.near_zero:
        return ""
    ref = f" (the run's upper quartile: {reference_bits:,.1f})" if reference_bits else ""
    return (f"These maps hold almost no bits: a median of {cluster.median_bits:.3g} bits per image{ref}, so their "
            "picture is dark on the common scale; the network needs next to nothing from these images.")


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


def flagged_rows(table: "pd.DataFrame") -> "pd.DataFrame":
    """Result rows whose map puts at least BORDER_FLAG of its mass in the border, highest share first."""
    rows = result_rows(table)
    shares = rows["border_share"].to_numpy(dtype=np.float64, na_value=np.nan)
    return rows[shares >= BORDER_FLAG].sort_values("border_share", ascending=False)


# ---- downloads -----------------------------------------------------------------------------------


def table_csv(table: "pd.DataFrame") -> bytes:
    """The table as CSV bytes (UTF-8)."""
    return table.to_csv(index=False).encode("utf-8")


def table_parquet(table: "pd.DataFrame") -> bytes:
    """The table as Parquet bytes."""
    import io

    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    return buf.getvalue()


#: At most this many flagged images, and this many members per cluster or highlight, go into the report (its size).
REPORT_FLAGGED, REPORT_MEMBERS = 24, 12


def thumbnails_on_one_scale(run: Run, rows: "pd.DataFrame", trust: Trust) -> tuple[list[dict], float | None]:
    """The maps of `rows` over their images as small PNGs ([{image, caption, png}]) on one bits scale (the largest
    bits per pixel among them; None when no map is in bits), captions naming each image's total bits and flag."""
    units = method_units(run)
    scale = page_scale(run, rows)
    few = with_flags(run, rows)[FEW_BITS_COLUMN]
    cells = []
    for index, row in rows.iterrows():
        bits = units.get(row["method"]) == BITS_UNIT
        caption = str(row["image"])
        if bits and not _missing(row["total_bits"]):
            caption += f" · {float(row['total_bits']):.3g} bits" + (" · needs very few bits" if few[index] else "")
        cells.append({"image": str(row["image"]), "caption": caption,
                      "png": image_thumbnail(run, row, trust, top=scale if scale > 0 else None)})
    has_bits = rows["method"].map(lambda m: units.get(m) == BITS_UNIT).any() if len(rows) else False
    return cells, (scale if has_bits else None)


def report_html(run: Run, method: str, trust: Trust, found: RunHighlights | None = None) -> bytes:
    """The run's self-contained HTML report for `method` (`render.report.dataset_report_html`): first what stands
    out across the run (`highlights`, or `found` when already computed for `method`), then per class the mean map
    and the clusters (their mean maps on one scale, members as maps over the images), then the images flagged by
    their border share; every picture embedded as a PNG."""
    from ..render.report import dataset_report_html

    if found is None or found.method != method:
        found = highlights(run, method)
    units = method_units(run)
    label = map_label(units, method)
    stands_out = []
    for i, h in enumerate(found.items if found is not None else []):
        same = found.same_images_as(i)
        if same is None:
            cells, scale = thumbnails_on_one_scale(run, highlight_rows(run, h.images[:REPORT_MEMBERS], h.method),
                                                   trust)
        else:  # drawn above already
            cells, scale = [], None
        stands_out.append({"title": h.title, "detail": h.detail, "kind": h.kind, "images": named(h.images),
                           "cells": cells, "scale": scale,
                           "same_as": None if same is None else found.items[same].title})
    classes = []
    for target, _ in class_targets(run, method):
        view = class_view(run, method, target, found.cluster_scale if found is not None else None)
        clusters = []
        for c in view.clusters:
            cells, scale = thumbnails_on_one_scale(run, c.members.head(REPORT_MEMBERS), trust)
            clusters.append({
                "cluster": c.cluster, "size": len(c.members), "border_share": c.border_share, "flagged": c.flagged,
                "near_zero": cluster_words(c, found.reference_bits if found is not None else None),
                "mean_png": map_png(c.mean_map, view.cluster_unit, top=view.cluster_scale),
                "members": [(cell["caption"], cell["png"]) for cell in cells], "scale": scale,
            })
        classes.append({"name": view.class_name, "target": view.target, "images": view.images,
                        "mean_png": map_png(view.mean_map, label), "clusters": clusters})
    flagged = flagged_rows(result_rows(run.table)[lambda t: t["method"] == method]).head(REPORT_FLAGGED)
    scale = page_scale(run, flagged)
    flagged_cells = [{"image": str(r["image"]), "caption": c.caption, "png": c.png}
                     for (_, r), c in zip(flagged.iterrows(), gallery(run, flagged, trust, scale, with_links=False))]
    table = run.table
    summary = {
        # the run as a visitor may see it: relative to the allowed folder, not the server's layout (issue #40)
        "run": visitor_path(run.path, trust), "network": run.info.get("network") or "unknown",
        "layer": method_layer_text(run, method),  # the method's own (Grad-CAM's target layer), not the run's
        "method": method_names(run).get(method, method), "images": int(table["image"].nunique()),
        "rows": len(table), "errors": int(table["error"].notna().sum()), "border_flag": BORDER_FLAG,
        "scale": scale if units.get(method) == BITS_UNIT else None,
        "checked": found.checked if found is not None else "",
        # rows a damaged (e.g. cut short) part takes away: said, never silently fewer rows (issue #40, item 6)
        "missing": run.missing or "",
        # a method whose map column came out empty for every row: said, not an empty section
        "empty": empty_methods_sentence(table),
    }
    return dataset_report_html(summary, classes, flagged_cells, stands_out, metric_report(metric_means(run))
                               ).encode("utf-8")


def empty_methods_sentence(table) -> str:
    """Sentences naming the methods with no map in any row (every row an error) and the metrics a run measured that
    came out empty for every image of a method (e.g. the pointing game without boxes); "" when nothing is empty."""
    from ..metrics.yardsticks import METRIC_COLUMNS

    if len(table) == 0 or "method" not in table:
        return ""
    made = result_rows(table)
    said = []
    empty = sorted(set(table["method"].unique()) - set(made["method"].unique()))
    if empty:
        said.append(f"No map was made for {', '.join(map(str, empty))}: every one of its rows is an error (the "
                    "table lists each row's reason).")
    if "metrics" in made:
        hollow = []
        for method, rows in made.groupby("method"):
            asked = sorted(set(" ".join(rows["metrics"].fillna("").astype(str)).split()))
            for metric in asked:
                columns = [c for c in METRIC_COLUMNS.get(metric, ()) if c in rows]
                if columns and all(rows[c].isna().all() for c in columns):
                    hollow.append(f"{metric} for {method}")
        if hollow:
            said.append(f"Measured but empty for every image: {', '.join(hollow)} (its scores are left blank, not "
                        "zero).")
    return " ".join(said)


def metric_report(means: MetricMeans | None) -> dict | None:
    """The report's section on the field's metrics (`render.report.dataset_report_html`'s `metrics`): headers with
    their directions, rows of cells, a note per column and the protocol; None for a run that measured none."""
    if means is None:
        return None
    headers = [means.header(c) for c in means.columns]
    return {"method_headers": ["method", "maps", *headers],
            "by_method": means.by_method[["method", "maps", *means.columns]].values.tolist(),
            "class_headers": ["class", "method", "maps", *headers],
            "by_class": means.by_class[["class", "method", "maps", *means.columns]].values.tolist(),
            "notes": [f"{means.header(c)}: {means.notes[c]}" for c in means.columns], "protocol": means.protocol}


def label_note(table) -> str:
    """A sentence when no row of the run has a label ("" otherwise): then nothing is correct or incorrect, and each
    image explains the network's top-1 (or the run's fixed target)."""
    rows = result_rows(table)
    if len(rows) == 0 or "label" not in rows or rows["label"].notna().any():
        return ""
    return ("No image of this run has a label, so none is correct or incorrect, and each explains the network's own "
            "top-1 class (unless the run fixed one). Labels come from a label file in the folder or from class folders named by the network's "
            "class names, indices or WordNet ids; folder names the network does not know are not read as labels.")


__all__ = ["BORDER_FLAG", "FEW_BITS_COLUMN", "ClassView", "ClusterView", "FolderJob", "FolderRunBusy", "GALLERY_PAGE", "PAGE_METRICS", "metric_cost_text",
           "GPU_ROAD", "GalleryCell", "PAGE_BATCH_IMAGES", "RowFilter", "RunEstimate", "class_targets", "class_view",
           "cluster_words", "current_job", "error_rows", "filter_rows", "flagged_rows", "gallery", "highlight_rows",
           "highlights", "image_thumbnail", "job_text", "label_note", "layer_text", "map_png", "method_layer_text", "metric_columns",
           "metric_help", "metric_means", "metric_report", "MetricMeans", "open_run_folder",
           "page_scale", "per_sample_link", "report_html", "result_rows", "run_line", "start_folder_job", "table_csv",
           "table_parquet", "thumbnails_on_one_scale", "stats_images_folder", "time_one_image", "value_range", "with_flags"]
