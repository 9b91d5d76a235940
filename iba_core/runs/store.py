"""A folder run on disk: what made it (run.json), rows appended in parts, the maps, the table; `open_run`.

    RUN_DIR/run.json               the network, weights, layer, settings of the run and of each method, versions
    RUN_DIR/parts/<part>.parquet   rows appended in small chunks, each file written atomically: the commit
    RUN_DIR/parts/<part>.sha256    the checksums of the part's two files (`sha256sum -c` reads it in RUN_DIR)
    RUN_DIR/maps/<part>.npz        the maps of those rows (float16 "m<i>") and their thumbnails ("thumbs")
    RUN_DIR/results.parquet        the table: every intact part, deduplicated, with distance_to_class_mean;
                                   written by the writer's verb `write_table` (`finish_run`), never by opening
    RUN_DIR/results.sha256         its checksum (a table that differs is built again from the parts)
    RUN_DIR/claims/                the images a writer is working on (`claims.py`): one writer per image
    RUN_DIR/damaged/<part>/        a damaged part's files, moved aside by the next resume, with note.txt

Why parts and one map file per part (for 100,000 images): one `.npy` per (image, method) means hundreds of
thousands of small files (slow to list, copy and back up; heavy on network file systems) and an atomic write each;
Zarr or HDF5 would be a new dependency and a single file that a crash can leave half written. A part holds the
rows finished since the last part (at most `PART_ROWS` rows or `PART_SECONDS` of work), so a run of 100,000 images
writes a few thousand files, a crash loses at most one part's work, and any process (a torchrun rank, a second
run) appends without locks: its own file names, `os.replace` to commit. The map file and the checksums are written
before the part's rows, so a row never points at a missing map. Each map is a compressed member of its part's .npz
and reads alone (`Run.heatmap`); the thumbnails of a part are one array, so class means and clusters read a few
hundred kilobytes per part, never the maps.

A damaged run heals: opening a run checks every part against its checksums (a part written before checksums, by
reading it whole), leaves out the damaged ones and says which rows are missing (`Run.missing`); the next resume
(`heal`, called by `run_folder`) moves them into damaged/ and so redoes exactly their rows. Every path a run folder
names (a row's map_file, its parts and maps, symlinks too) must resolve inside it (`inside`), else it is not read.

Maps are float16 (half the bytes of float32; 98 kB for a 224 × 224 map before compression), stored as A / max|A|
(so small values keep their precision) with a per-row `map_scale`: for a map without negative values (bits, |A|)
the scale makes the stored map sum exactly to the original's sum, so `Run.heatmap(row)` of a bottleneck sums to
its row's total_bits (less unlocated_bits, the bits of a ViT's class token that have no place on the image).

Nothing twice: a rerun skips the (image, method) pairs that have a row; error rows too, unless it is asked to try
them again (a file fixed since); the table keeps one row per pair (a result over an error, else the latest). A run
with text prompts (a CLIP network) has a row per (image, method, prompt): the prompt is part of each row's key
(`KEY`), and run.json lists the run's prompts (`prompts`, in the order their indices, the rows' targets, count), to
which a later run may add.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import platform
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..cache import write_atomic
from ..jsonable import jsonable
from ..metrics import registry as metric_registry
from .measures import THUMBNAIL, thumbnail
# run.json's name, format and the error of a run folder live with run.json's checks (run_file.py), which read
# nothing of this module; named here too, where the rest of the folder's layout is
from .run_file import RUN_FILE, RUN_FORMAT, RunFolderError

if TYPE_CHECKING:
    import pandas as pd

TABLE_FILE = "results.parquet"
TABLE_SUMS = "results.sha256"
PARTS, MAPS, DAMAGED = "parts", "maps", "damaged"
#: Beside each part: the checksums of its two files.
SUMS_SUFFIX = ".sha256"
#: A part is written after this many rows, or this many seconds after the last part (whichever comes first).
PART_ROWS = 64
PART_SECONDS = 30.0
#: The field's metric columns (the metric registry's per-map columns; the registry loads no torch): NaN where the
#: run measures none, and for the pointing scores of an image without a box.
YARDSTICK_COLUMNS = tuple(c.name for c in metric_registry.columns())
#: The table's columns, in order, with their pandas types (missing values: NaN / <NA>).
COLUMNS: dict[str, str] = {
    "image": "str", "method": "str", "label": "Int64", "target": "Int64", "class_name": "str",
    "prompt": "str",  # a CLIP run's text prompt (its target is the prompt's index in run.json's prompts); else empty
    "predicted": "Int64", "predicted_name": "str", "p_predicted": "float64", "p_target": "float64",
    "correct": "boolean", "total_bits": "float64", "unlocated_bits": "float64", "p_without": "float64",
    "p_with": "float64", "border_share": "float64", "box_share": "float64", "concentration": "float64",
    "distance_to_class_mean": "float64",
    **{column: "float64" for column in YARDSTICK_COLUMNS},
    "metrics": "str",  # the metrics measured for the row, space-separated ("" or missing: none)
    "metric_errors": "str",  # "metric: why; …" for a metric that failed on the row's map (its columns blank)
    "box_skipped": "str",  # why the row's image has no box scores though the run has boxes (`rows.BOX_SKIPS`)
    "seconds": "float64", "precision": "str", "error": "str",
    "method_name": "str", "height": "Int64", "width": "Int64", "map_file": "str", "map_index": "int64",
    "map_scale": "float64", "rank": "int64", "finished": "float64",
}
#: What a row is of: an image, a method and (a run with text prompts) a prompt; "" stands for no prompt.
KEY = ("image", "method", "prompt")
PARTS_META = b"iba_parts"


# --------------------------------------------------------------------------------------------
# run.json: what made the run.


def versions() -> dict[str, str]:
    """The versions that made a run (Python, torch, numpy, this package)."""
    import torch
    from importlib import metadata

    try:
        own = metadata.version("iba-explorer")
    except metadata.PackageNotFoundError:
        own = "unknown"
    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__,
            "iba_explorer": own}


def read_info(run_dir: str | os.PathLike) -> dict | None:
    """run.json of a run folder; None when there is none. A damaged one, another format, or a field a run would not
    write (`run_file.parse_run_file`: every field checked with the bounds it is written with): RunFolderError."""
    from .run_file import MAX_RUN_FILE_BYTES, parse_run_file  # the module's own name: the cap patched in tests

    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        with open(inside(run_dir, RUN_FILE), "rb") as f:
            data = f.read(MAX_RUN_FILE_BYTES + 1)  # never more: a larger file is refused unread
    except OSError as err:
        raise RunFolderError(f"The run folder's {RUN_FILE} cannot be read "
                             f"({(err.strerror or 'an error of the disk').lower()}).") from None
    return parse_run_file(data)


def shown_value(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "…"


#: Method settings added after runs were made, with the value those runs used without naming it: a run.json that
#: lacks one resumes when the new run has that value (the bottleneck family's prior, CoIBA's placement and read
#: point, issue #37).
SETTINGS_ADDED = {"prior": "estimated", "placement": "output", "read_point": "final"}


def differences(old: dict, new: dict) -> list[str]:
    """What differs between a run folder's identity and a new run's, as short phrases ("layer block3_2 (this run:
    block4_1)"). Methods only the new run has are no difference (they are added); neither is a layer the old run
    had none of (no bottleneck yet)."""
    out = []
    for key in ("network", "weights", "layer"):
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and a != b:
            out.append(f"{key} {shown_value(a)} (this run: {shown_value(b)})")
    old_s, new_s = old.get("settings", {}), new.get("settings", {})
    for key in sorted(set(old_s) | set(new_s)):
        if old_s.get(key) != new_s.get(key):
            out.append(f"{key} {shown_value(old_s.get(key))} (this run: {shown_value(new_s.get(key))})")
    old_m, new_m = old.get("methods", {}), new.get("methods", {})
    for method in sorted(set(old_m) & set(new_m)):
        a, b = old_m[method].get("settings", {}), new_m[method].get("settings", {})
        for key in sorted(set(a) | set(b)):
            if key not in a and key in SETTINGS_ADDED and b.get(key) == SETTINGS_ADDED[key]:
                continue  # a setting added since, at the value the old run used
            if a.get(key) != b.get(key):
                out.append(f"{method}'s {key} {shown_value(a.get(key))} (this run: {shown_value(b.get(key))})")
    return out


def start_run(run_dir: str | os.PathLike, identity: dict) -> dict:
    """Create run.json, or check the folder's against `identity` (RunFolderError with what differs) and add new
    methods to it. identity: network, weights, layer, settings, methods ({key: {name, unit, settings}}), source."""
    run_dir = Path(run_dir)
    identity = jsonable(identity)
    old = read_info(run_dir)
    if old is None:
        if (run_dir / PARTS).is_dir() and any((run_dir / PARTS).glob("*.parquet")):
            raise RunFolderError(f"The folder {run_dir} holds results but no {RUN_FILE}, so what made them is unknown.",
                                 cli_hint="Give another --out folder.", app_hint="Choose another run folder.")
        info = {"format": RUN_FORMAT, **identity, "versions": versions(), "created": time.time()}
    else:
        diffs = differences(old, identity)
        if diffs:
            raise RunFolderError(
                f"The run folder {run_dir} was made with other settings: {'; '.join(diffs[:4])}"
                f"{' …' if len(diffs) > 4 else ''}.",
                cli_hint="Give another --out folder, or the settings its run.json lists to resume it.",
                app_hint="Choose another run folder, or the settings its run.json lists to resume it.")
        info = {**old, "methods": {**old.get("methods", {}), **identity.get("methods", {})},
                "source": identity.get("source", old.get("source"))}  # the images may have moved
        if identity.get("prompts") or old.get("prompts"):  # new prompts are added after the run's own
            info["prompts"] = merged_prompts(old.get("prompts"), identity.get("prompts"))
        if info.get("layer") is None:
            info["layer"] = identity.get("layer")
        if info == old:
            return old
        info["versions"] = versions()
    write_atomic(run_dir / RUN_FILE, lambda tmp: tmp.write_text(json.dumps(info, indent=1), encoding="utf-8"))
    return info


def merged_prompts(old: Iterable[str] | None, new: Iterable[str] | None) -> list[str]:
    """A run's prompts after a run that gives `new`: its own (`old`, in their order: the rows' targets are their
    indices) then the new ones it lacks."""
    return list(dict.fromkeys([*(old or ()), *(new or ())]))


def record_settings(run_dir: str | os.PathLike, **settings) -> dict:
    """Write `settings` into run.json's settings (atomically): a run that adds to what the folder records, once it
    has checked that the rows made before stay valid (metrics added to a run: `run_settings.check_yardsticks`)."""
    info = read_info(run_dir)
    if info is None:
        raise RunFolderError(f"{Path(run_dir) / RUN_FILE} is missing.")
    info = {**info, "settings": {**info.get("settings", {}), **jsonable(settings)}, "versions": versions()}
    write_atomic(Path(run_dir) / RUN_FILE, lambda tmp: tmp.write_text(json.dumps(info, indent=1), encoding="utf-8"))
    return info


# --------------------------------------------------------------------------------------------
# Maps: float16 with a scale.


def encode_map(values: np.ndarray) -> tuple[np.ndarray, float]:
    """(float16 map, scale) with map · scale ≈ values; for a map without negative values the sums agree exactly
    (up to float64 rounding of the product)."""
    v = np.asarray(values, dtype=np.float64)
    peak = float(np.abs(v).max()) if v.size else 0.0
    if not peak > 0 or not math.isfinite(peak):
        return np.zeros(v.shape, dtype=np.float16), 0.0
    stored = (v / peak).astype(np.float16)
    scale = peak
    if v.min() >= 0:
        total = float(stored.astype(np.float64).sum())
        if total > 0:
            scale = float(v.sum()) / total
    return stored, scale


def decode_map(stored: np.ndarray, scale: float) -> np.ndarray:
    """The (H, W) float32 map from its float16 form and scale."""
    return (stored.astype(np.float64) * scale).astype(np.float32)


class PartWriter:
    """Collects finished rows with their maps and writes them as one part (maps first, then the rows), when
    `rows` rows are waiting or `seconds` passed since the last part, and on `flush`."""

    def __init__(self, run_dir: str | os.PathLike, rank: int = 0, rows: int = PART_ROWS,
                 seconds: float = PART_SECONDS):
        self.run_dir, self.rank, self.max_rows, self.max_seconds = Path(run_dir), rank, rows, seconds
        self.rows: list[dict] = []
        self.maps: list[np.ndarray] = []
        self.thumbs: list[np.ndarray] = []
        self.last = time.monotonic()
        self.parts = 0

    def add(self, row: dict, values: np.ndarray | None = None) -> None:
        """Queue one row (its map, if any, is stored with it); writes a part when one is due."""
        row = dict(row, rank=self.rank, finished=time.time())
        if values is not None:
            stored, scale = encode_map(values)
            row.update(map_index=len(self.maps), map_scale=scale, height=values.shape[0], width=values.shape[1])
            self.maps.append(stored)
            self.thumbs.append(thumbnail(values))
        else:
            row.update(map_index=-1, map_scale=float("nan"))
        self.rows.append(row)
        if len(self.rows) >= self.max_rows or time.monotonic() - self.last >= self.max_seconds:
            self.flush()

    def flush(self) -> str | None:
        """Write the waiting rows as one part; returns its name (None when nothing waited). The maps and the
        checksums of both files go first; the rows' file, written last, commits the part."""
        if not self.rows:
            return None
        name = f"part-{time.time_ns():020d}-r{self.rank}-{secrets.token_hex(3)}"
        rows = self.rows
        sums = {}
        if self.maps:
            arrays = {f"m{i}": m for i, m in enumerate(self.maps)}
            arrays["thumbs"] = np.stack(self.thumbs)
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **arrays)
            maps = buffer.getvalue()
            sums[f"{MAPS}/{name}.npz"] = hashlib.sha256(maps).hexdigest()
            write_atomic(self.run_dir / MAPS / f"{name}.npz", lambda tmp: tmp.write_bytes(maps))
            rows = [dict(r, map_file=f"{MAPS}/{name}.npz" if r["map_index"] >= 0 else None) for r in rows]
        buffer = io.BytesIO()
        as_table(rows).to_parquet(buffer, index=False)
        table = buffer.getvalue()
        sums[f"{PARTS}/{name}.parquet"] = hashlib.sha256(table).hexdigest()
        text = "".join(f"{digest}  {rel}\n" for rel, digest in sums.items())
        write_atomic(self.run_dir / PARTS / f"{name}{SUMS_SUFFIX}", lambda tmp: tmp.write_text(text, encoding="utf-8"))
        write_atomic(self.run_dir / PARTS / f"{name}.parquet", lambda tmp: tmp.write_bytes(table))
        self.rows, self.maps, self.thumbs = [], [], []
        self.last = time.monotonic()
        self.parts += 1
        return name


def as_table(rows: Iterable[dict]) -> "pd.DataFrame":
    """Rows as a DataFrame with exactly COLUMNS, in order, with their types."""
    import pandas as pd

    return with_columns(pd.DataFrame(list(rows)))


def with_columns(frame: "pd.DataFrame") -> "pd.DataFrame":
    """`frame` with exactly COLUMNS, in order, with their types: a column a part or table written before it
    existed (the metric columns) is added empty."""
    return typed(frame, COLUMNS)


def typed(frame: "pd.DataFrame", columns: dict[str, str]) -> "pd.DataFrame":
    """`frame` with exactly `columns` (name → pandas type), in order, with their types; a missing column empty."""
    for column in columns:
        if column not in frame:
            frame[column] = None
    return frame[list(columns)].astype(columns)


# --------------------------------------------------------------------------------------------
# Reading the parts.


def inside(run_dir: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """The file `relative` names in the run folder, resolved (symlinks too); a RunFolderError when it lies outside
    the folder (`../../other-run/maps/….npz`, an absolute path, a link out): a run folder never makes the app read
    another folder's files."""
    base = Path(run_dir).resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        # the file as the run names it, not the server's path to the run (a visitor reads this sentence)
        raise RunFolderError(f"The run folder names a file outside itself ({shown_value(str(relative))}), "
                             "which is not read.")
    return target


def part_names(run_dir: str | os.PathLike) -> list[str]:
    """The names of the run's parts, oldest first."""
    folder = Path(run_dir) / PARTS
    return sorted(p.stem for p in folder.glob("part-*.parquet")) if folder.is_dir() else []


def read_parts(run_dir: str | os.PathLike, names: list[str] | None = None,
               columns: list[str] | None = None) -> "pd.DataFrame":
    """Every part's rows, oldest part first (all of COLUMNS unless `columns`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = part_names(run_dir) if names is None else names
    tables = [pq.read_table(inside(run_dir, f"{PARTS}/{n}.parquet"), columns=columns) for n in names]
    if not tables:
        return as_table([]) if columns is None else as_table([])[columns]
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    if columns is None and not set(COLUMNS) <= set(frame):
        frame = with_columns(frame)  # parts written before a column existed
    return frame.reset_index(drop=True)


def prompt_key(value) -> str:
    """A row's prompt as its key holds it: the text, or "" for a row without one (None, NaN, a part written before
    the column existed)."""
    return value if isinstance(value, str) else ""


def _key_frame(run_dir: str | os.PathLike, name: str, extra: tuple[str, ...] = ()) -> "pd.DataFrame":
    """A part's key columns (image, method, prompt) and `extra` (those it has), reading only them; the prompt as
    `prompt_key` gives it."""
    import pyarrow.parquet as pq

    path = inside(run_dir, f"{PARTS}/{name}.parquet")
    names = pq.read_schema(path).names
    frame = pq.read_table(path, columns=[c for c in (*KEY, *extra) if c in names]).to_pandas()
    frame["prompt"] = [prompt_key(v) for v in frame["prompt"]] if "prompt" in frame else ""
    return frame


def done_pairs(run_dir: str | os.PathLike, errors: bool = True,
               names: list[str] | None = None) -> set[tuple[str, str, str]]:
    """(image, method, prompt) keys that have a row in the parts `names` (default: every part; errors=False: a row
    without error): a rerun skips them. The prompt is "" for a row without one. A part that cannot be read counts
    for nothing (its rows are done again)."""
    pairs: set[tuple[str, str, str]] = set()
    for name in part_names(run_dir) if names is None else names:
        try:
            frame = _key_frame(run_dir, name, ("error",))
        except Exception:  # noqa: BLE001 - damaged (or moved aside meanwhile): `heal` deals with it
            continue
        if not errors:
            frame = frame[frame["error"].isna()]
        pairs.update(zip(frame["image"].astype(str), frame["method"].astype(str), frame["prompt"]))
    return pairs


def unmeasured(run_dir: str | os.PathLike, metrics: Iterable[str], images: Iterable[str] | None = None) -> int:
    """How many result rows (of `images`; default all) lack one of `metrics` in their `metrics` column, reading only
    the columns needed, the latest row of each key (image, method, prompt) counting (a part written before the
    column existed: none measured). A part that cannot be read counts for nothing (`heal` deals with it)."""
    wanted, keep = set(metrics), None if images is None else set(images)
    latest: dict[tuple[str, str, str], bool] = {}
    for name in part_names(run_dir):
        try:
            frame = _key_frame(run_dir, name, ("error", "metrics"))
        except Exception:  # noqa: BLE001 - damaged (or moved aside meanwhile)
            continue
        had = frame["metrics"] if "metrics" in frame else [None] * len(frame)
        for image, method, prompt, error, measured in zip(frame["image"], frame["method"], frame["prompt"],
                                                          frame["error"], had):
            if error is None or error != error:  # a result row (None or NaN: no error)
                if keep is None or image in keep:
                    latest[(image, method, prompt)] = not wanted <= set(str(measured or "").split())
    return sum(latest.values())


def measured_metrics(run_dir: str | os.PathLike) -> set[str]:
    """The metrics with at least one result in the run: named in the `metrics` column of a row without error (a
    metric that failed on a map is not named there). A part that cannot be read counts for nothing."""
    found: set[str] = set()
    for name in part_names(run_dir):
        try:
            frame = _key_frame(run_dir, name, ("error", "metrics"))
        except Exception:  # noqa: BLE001 - damaged (or moved aside meanwhile): `heal` deals with it
            continue
        if "metrics" in frame:
            for error, measured in zip(frame["error"], frame["metrics"]):
                if error is None or error != error:  # a result row (None or NaN: no error)
                    found.update(str(measured or "").split())
    return found


def deduplicate(frame: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (image, method, prompt): a result over an error, else the latest row (rows oldest first)."""
    ok = frame["error"].isna().to_numpy()
    order = np.lexsort((np.arange(len(frame)), ok))  # errors first, then results; each in their order
    return frame.iloc[order].drop_duplicates(list(KEY), keep="last")


def parts_digest(names: list[str]) -> bytes:
    return hashlib.sha256("\n".join(names).encode()).hexdigest().encode()


def load_member(run_dir: str | os.PathLike, map_file: str, member: str) -> np.ndarray:
    """One array of a map file of the run (checked to lie inside it, and to unpack to at most
    `run_file.max_member_bytes`, so a file edited into a zip bomb is refused unread); a damaged file:
    RunFolderError. The sentences name the file as the run does (relative to it), not the server's path."""
    from .run_file import max_member_bytes

    path = inside(run_dir, map_file)
    hint = "Open the run again: a damaged part is left out."
    try:
        with np.load(path, allow_pickle=False) as data:
            size = data.zip.getinfo(f"{member}.npy").file_size  # the zip's own record: never read past it
            if size <= max_member_bytes():
                return data[member]
    except Exception as err:  # noqa: BLE001 - a zip, zlib or format error all mean the same to a reader
        raise RunFolderError(f"The map file {shown_value(map_file)} of the run cannot be read: it is damaged or cut "
                             "short.", cli_hint=hint, app_hint=hint) from None
    raise RunFolderError(f"The map file {shown_value(map_file)} of the run holds an array of {size / 2**20:,.0f} MiB, "
                         f"more than a run writes ({max_member_bytes() / 2**20:,.0f} MiB at most), so it is not read.",
                         cli_hint=hint, app_hint=hint)


def read_thumbnails(run_dir: str | os.PathLike, frame: "pd.DataFrame") -> np.ndarray:
    """The thumbnails (n, s, s) of the rows of `frame` (zeros for rows without a map), one file read per part."""
    out = np.zeros((len(frame), THUMBNAIL, THUMBNAIL), dtype=np.float32)
    files = frame["map_file"].to_numpy(dtype=object)
    index = frame["map_index"].to_numpy()
    for name in {f for f in files if isinstance(f, str)}:
        where = np.flatnonzero(files == name)
        out[where] = load_member(run_dir, name, "thumbs")[index[where]]
    return out
