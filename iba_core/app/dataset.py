"""The Dataset page's run, with no Streamlit: opening a run folder typed on the server, what stands out across it
(first, before any choice), filtering its table, the run's layers in words, the field's metric means, the notes
on empty methods and missing labels, and the table's downloads. The pictures of a run are in `app.dataset_gallery`,
the per-class views in `app.dataset_classes`, a CLIP run's prompt search in `app.prompt_search`, the HTML report in
`app.dataset_report` and a folder run in the background in `app.folder_job`.

    run = open_run_folder("/data/runs/val", trust)       # checked against the app's trust rules first
    found = highlights(run)                              # runs.highlights: few bits, flagged clusters, …
    rows = filter_rows(run.table, RowFilter(correct=False))

Images of a run are read only where the app's trust allows (`trust.check_server_path`: inside the owner's
folders, or anywhere for an app on localhost), so a run.json naming another folder cannot make the app show it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import UserError
from ..runs.highlights import BORDER_FLAG, RunHighlights, few_bits_mask, run_highlights
from ..runs.highlights import methods_bits_first as info_bits_first
from ..runs.store import YARDSTICK_COLUMNS
from ..runs.tables import Run, open_run
from ..trust import Trust, check_server_path

if TYPE_CHECKING:
    import pandas as pd

#: The flag column: a row whose decision needs very few bits (`runs.highlights.few_bits_mask`).
FEW_BITS_COLUMN = "needs_few_bits"
#: Numeric columns a user can filter by, in the order the page offers them.
MEASURES = ("total_bits", "border_share", "box_share", "concentration", "distance_to_class_mean", "p_target",
            "p_predicted", "p_with", "seconds", *YARDSTICK_COLUMNS)
CORRECT_CHOICES = ("all", "correct", "incorrect")


# ---- opening a run --------------------------------------------------------------------------------


def open_run_folder(text: str, trust: Trust) -> Run:
    """The run in the folder typed on the server, when `trust` lets the app read it (else a NotTrustedError
    saying why); an empty field or a folder that is no run: a UserError in one sentence. A run with damaged parts
    opens with the intact rows; `run.missing` says in one sentence what is left out (only read: nothing is moved)."""
    text = (text or "").strip()
    if not text:
        raise UserError("Type the path of a run folder on the server (the folder a folder run wrote its results to).")
    path = check_server_path(Path(text).expanduser(), trust, what="run folder", folder=True)
    return open_run(path)


# ---- the table ------------------------------------------------------------------------------------


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
    return info_bits_first(run.info)  # one copy: the runs' own order (`runs.highlights`)


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
        layers = list(range_ends(settings["layers"]))
    elif settings.get("layer") or "beta_k" in settings:
        return str(settings.get("layer") or layer_text(run))
    else:
        return "not recorded (a run made before reports named each method's layer)"
    if not layers:
        return "none (the method reads the whole network)"
    return layers[0] if len(layers) == 1 else _range_text(layers)


def range_ends(layers) -> tuple[str, str]:
    """(first, last) of CoIBA's layers as run.json records them (a list, first to last; or "first:last")."""
    from ..coiba import parse_range

    if isinstance(layers, str) and ":" not in layers:  # a one-layer range, as CoIBA's setting once took it
        return layers, layers
    return parse_range(layers if isinstance(layers, str) else [layers[0], layers[-1]])


def _range_text(layers) -> str:
    """CoIBA's layers as run.json records them: "CoIBA block3_2 … block7_1"."""
    from ..results import range_label

    return f"CoIBA {range_label(*range_ends(layers))}"


def run_line(run: Run) -> str:
    """The run in a few words: 'network X · layer Y' (`layer_text`)."""
    return f"network {run.info.get('network') or 'unknown'} · layer {layer_text(run)}"


# ---- the field's metrics --------------------------------------------------------------------------


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
    # beside how they were measured: what was skipped or failed, counted (the page's caption, the report's section)
    return MetricMeans(columns, by_method, by_class, {c: HIGHER_IS_BETTER[c] for c in columns},
                       {c: COLUMN_TEXT[c] for c in columns},
                       (protocol_sentences(identity) if identity else []) + metric_notes(run.table))


# ---- cells, flags and downloads -------------------------------------------------------------------


def is_missing(value) -> bool:
    """Whether a table cell holds no value (None, pandas' NA or NaN)."""
    import pandas as pd

    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def flagged_rows(table: "pd.DataFrame") -> "pd.DataFrame":
    """Result rows whose map puts at least BORDER_FLAG of its mass in the border, highest share first."""
    rows = result_rows(table)
    shares = rows["border_share"].to_numpy(dtype=np.float64, na_value=np.nan)
    return rows[shares >= BORDER_FLAG].sort_values("border_share", ascending=False)


def table_csv(table: "pd.DataFrame") -> bytes:
    """The table as CSV bytes (UTF-8)."""
    return table.to_csv(index=False).encode("utf-8")


def table_parquet(table: "pd.DataFrame") -> bytes:
    """The table as Parquet bytes."""
    import io

    buf = io.BytesIO()
    table.to_parquet(buf, index=False)
    return buf.getvalue()


def metric_notes(table: "pd.DataFrame") -> list[str]:
    """Sentences on the blank metric scores of a run's result rows, counted: the images scored without a box though
    the run has boxes, by reason (`runs.measures.BOX_SKIPS`; the first bad box files named), and the maps a metric
    failed on (the maps kept; a rerun measures it again). [] when nothing was skipped or failed."""
    from ..runs.measures import NO_BOX_FILE, box_skip_reason

    rows = result_rows(table)
    said = []
    if "box_skipped" in rows and rows["box_skipped"].notna().any():
        per_image = rows[rows["box_skipped"].notna()].drop_duplicates("image")
        reasons = per_image["box_skipped"].map(box_skip_reason)
        counts = ", ".join(f"{reason} ({count})" for reason, count in sorted(reasons.value_counts().items()))
        bad = per_image[reasons != NO_BOX_FILE]["box_skipped"].head(3).tolist()
        said.append(f"{len(per_image)} image(s) scored without a box (no pointing scores, no box share): {counts}"
                    + (f"; e.g. {'; '.join(map(str, bad))}" if bad else "") + ".")
    if "metric_errors" in rows and rows["metric_errors"].notna().any():
        failed = rows[rows["metric_errors"].notna()]
        said.append(f"A metric failed on {len(failed)} map(s), whose scores of it are blank (e.g. "
                    f"{failed['metric_errors'].iloc[0]}); a rerun of the run measures it again.")
    return said


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
    if not metric_columns(table):  # no section of the metrics to say why they are blank: said here
        said.extend(metric_notes(table))
    return " ".join(said)


def label_note(table) -> str:
    """A sentence when no row of the run has a label ("" otherwise): then nothing is correct or incorrect, and each
    image explains the network's top-1 (or the run's fixed target)."""
    rows = result_rows(table)
    if len(rows) == 0 or "label" not in rows or rows["label"].notna().any():
        return ""
    return ("No image of this run has a label, so none is correct or incorrect, and each explains the network's own "
            "top-1 class (unless the run fixed one). Labels come from a label file in the folder or from class folders named by the network's "
            "class names, indices or WordNet ids; folder names the network does not know are not read as labels.")
