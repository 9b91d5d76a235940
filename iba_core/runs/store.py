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
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np

from ..cache import remove_stale_temps, write_atomic
from ..errors import UserError
from ..jsonable import jsonable
from .measures import THUMBNAIL, distance_to_class_mean, thumbnail

if TYPE_CHECKING:
    import pandas as pd

RUN_FILE = "run.json"
TABLE_FILE = "results.parquet"
TABLE_SUMS = "results.sha256"
PARTS, MAPS, DAMAGED = "parts", "maps", "damaged"
#: Beside each part: the checksums of its two files.
SUMS_SUFFIX = ".sha256"
#: Bump when the layout of a run folder changes (an older folder is then refused, not misread).
RUN_FORMAT = 1
#: A part is written after this many rows, or this many seconds after the last part (whichever comes first).
PART_ROWS = 64
PART_SECONDS = 30.0
#: The field's metric columns (`metrics.yardsticks.COLUMNS`, named here so that reading a run needs no torch): NaN
#: where the run measures none, and for the pointing scores of an image without a box.
YARDSTICK_COLUMNS = ("insertion_auc", "deletion_auc", "road_morf", "road_lerf", "road_combined", "pointing_hit",
                     "energy_pointing", "ehr")
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
    "seconds": "float64", "precision": "str", "error": "str",
    "method_name": "str", "height": "Int64", "width": "Int64", "map_file": "str", "map_index": "int64",
    "map_scale": "float64", "rank": "int64", "finished": "float64",
}
#: What a row is of: an image, a method and (a run with text prompts) a prompt; "" stands for no prompt.
KEY = ("image", "method", "prompt")
_PARTS_META = b"iba_parts"


class RunFolderError(UserError):
    """A run folder that cannot be used: not a run folder, of another format, or made with other settings."""


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
    """run.json of a run folder; None when there is none. A damaged one or another format: RunFolderError."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        text = inside(run_dir, RUN_FILE).read_text(encoding="utf-8")
    except OSError as err:
        raise RunFolderError(f"The run file {path} cannot be read ({(err.strerror or 'an error of the disk').lower()})."
                             ) from None
    except UnicodeDecodeError:  # a ValueError: bytes that are no text at all
        raise RunFolderError(f"The run file {path} is damaged: it is not text.") from None
    try:
        info = json.loads(text)
    except ValueError:  # json's JSONDecodeError: a cut-short or edited file; its name means nothing to a user
        raise RunFolderError(f"The run file {path} is damaged: it is not complete, valid JSON (cut short or "
                             "edited?).") from None
    if not isinstance(info, dict) or info.get("format") != RUN_FORMAT:
        raise RunFolderError(f"{path} is not a run file of this version (format {RUN_FORMAT}).")
    return info


def _shown(value) -> str:
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
            out.append(f"{key} {_shown(a)} (this run: {_shown(b)})")
    old_s, new_s = old.get("settings", {}), new.get("settings", {})
    for key in sorted(set(old_s) | set(new_s)):
        if old_s.get(key) != new_s.get(key):
            out.append(f"{key} {_shown(old_s.get(key))} (this run: {_shown(new_s.get(key))})")
    old_m, new_m = old.get("methods", {}), new.get("methods", {})
    for method in sorted(set(old_m) & set(new_m)):
        a, b = old_m[method].get("settings", {}), new_m[method].get("settings", {})
        for key in sorted(set(a) | set(b)):
            if key not in a and key in SETTINGS_ADDED and b.get(key) == SETTINGS_ADDED[key]:
                continue  # a setting added since, at the value the old run used
            if a.get(key) != b.get(key):
                out.append(f"{method}'s {key} {_shown(a.get(key))} (this run: {_shown(b.get(key))})")
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
    has checked that the rows made before stay valid (metrics added to a run: `folder.check_yardsticks`)."""
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
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame[list(COLUMNS)].astype(COLUMNS)


# --------------------------------------------------------------------------------------------
# Reading the parts.


def inside(run_dir: str | os.PathLike, relative: str | os.PathLike) -> Path:
    """The file `relative` names in the run folder, resolved (symlinks too); a RunFolderError when it lies outside
    the folder (`../../other-run/maps/….npz`, an absolute path, a link out): a run folder never makes the app read
    another folder's files."""
    base = Path(run_dir).resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise RunFolderError(f"The run folder {run_dir} names a file outside itself ({_shown(str(relative))}), "
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


def deduplicate(frame: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (image, method, prompt): a result over an error, else the latest row (rows oldest first)."""
    ok = frame["error"].isna().to_numpy()
    order = np.lexsort((np.arange(len(frame)), ok))  # errors first, then results; each in their order
    return frame.iloc[order].drop_duplicates(list(KEY), keep="last")


def _parts_digest(names: list[str]) -> bytes:
    return hashlib.sha256("\n".join(names).encode()).hexdigest().encode()


def _load_member(run_dir: str | os.PathLike, map_file: str, member: str) -> np.ndarray:
    """One array of a map file of the run (checked to lie inside it); a damaged file: RunFolderError."""
    path = inside(run_dir, map_file)
    try:
        with np.load(path, allow_pickle=False) as data:
            return data[member]
    except Exception as err:  # noqa: BLE001 - a zip, zlib or format error all mean the same to a reader
        raise RunFolderError(f"The map file {map_file} of the run {run_dir} cannot be read: it is damaged or cut "
                             "short.", cli_hint="Open the run again: a damaged part is left out.",
                             app_hint="Open the run again: a damaged part is left out.") from None


def read_thumbnails(run_dir: str | os.PathLike, frame: "pd.DataFrame") -> np.ndarray:
    """The thumbnails (n, s, s) of the rows of `frame` (zeros for rows without a map), one file read per part."""
    out = np.zeros((len(frame), THUMBNAIL, THUMBNAIL), dtype=np.float32)
    files = frame["map_file"].to_numpy(dtype=object)
    index = frame["map_index"].to_numpy()
    for name in {f for f in files if isinstance(f, str)}:
        where = np.flatnonzero(files == name)
        out[where] = _load_member(run_dir, name, "thumbs")[index[where]]
    return out


# --------------------------------------------------------------------------------------------
# Checks: damaged parts are found, left out, and moved aside by the next resume.


@dataclass(frozen=True)
class Damage:
    """A part that cannot be trusted: its name, why (one phrase), and its images when its rows could be read."""

    part: str
    reason: str
    images: tuple[str, ...] | None = None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_sums(path: Path) -> dict[str, str]:
    """relative path → sha256 of a part's checksum file (`sha256sum` lines); ValueError when malformed."""
    sums = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, rel = line.partition("  ")
        if len(digest) != 64 or not rel:
            raise ValueError(f"a malformed line in {path.name}")
        sums[rel] = digest
    if not sums:
        raise ValueError(f"{path.name} is empty")
    return sums


def check_part(run_dir: str | os.PathLike, name: str) -> Damage | None:
    """Why the part `name` is damaged, or None when it is intact: its rows' file and its maps' file against its
    checksums (a part written before checksums existed: read whole, the zip's CRC-32 per map), every file inside
    the run folder."""
    import pyarrow.parquet as pq

    rows_rel, maps_rel = f"{PARTS}/{name}.parquet", f"{MAPS}/{name}.npz"
    sums_path = Path(run_dir) / PARTS / f"{name}{SUMS_SUFFIX}"
    images = None
    try:
        rows_path = inside(run_dir, rows_rel)
        if sums_path.exists() or sums_path.is_symlink():
            sums = _read_sums(inside(run_dir, f"{PARTS}/{name}{SUMS_SUFFIX}"))
            if set(sums) - {rows_rel, maps_rel} or rows_rel not in sums:
                return Damage(name, "its checksum file names other files")
            if _sha256(rows_path) != sums[rows_rel]:
                return Damage(name, "its rows differ from their checksum")
            rows = pq.read_table(rows_path, columns=["image", "map_file"])
            images = tuple(rows.column("image").to_pylist())
            files = set(rows.column("map_file").to_pylist()) - {None}
            if files - {maps_rel}:
                return Damage(name, "its rows name another part's map file", images)
            if files and maps_rel not in sums:
                return Damage(name, "its checksums leave out its map file", images)
            if files:
                maps_path = inside(run_dir, maps_rel)
                if not maps_path.is_file():
                    return Damage(name, "its map file is missing", images)
                if _sha256(maps_path) != sums[maps_rel]:
                    return Damage(name, "its map file differs from its checksum", images)
        else:
            rows = pq.read_table(rows_path, columns=["image", "map_file"])
            images = tuple(rows.column("image").to_pylist())
            files = set(rows.column("map_file").to_pylist()) - {None}
            if files - {maps_rel}:
                return Damage(name, "its rows name another part's map file", images)
            if files:
                with zipfile.ZipFile(inside(run_dir, maps_rel)) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    return Damage(name, f"its map {bad} is damaged", images)
    except RunFolderError:
        return Damage(name, "it names a file outside the run folder", images)
    except Exception as err:  # noqa: BLE001 - any damage (a short read, garbled bytes, a 0-byte file) means the same
        return Damage(name, "its files cannot be read (damaged or cut short)", images)
    return None


def check_parts(run_dir: str | os.PathLike) -> tuple[list[str], list[Damage]]:
    """(the intact parts' names, the damaged ones), oldest first."""
    good, damaged = [], []
    for name in part_names(run_dir):
        problem = check_part(run_dir, name)
        (good if problem is None else damaged).append(problem or name)
    return good, damaged


def missing_sentence(damage: list[Damage]) -> str | None:
    """One sentence on the rows a run's damaged parts take away, or None when none is damaged."""
    if not damage:
        return None
    images = sorted({i for d in damage for i in d.images or ()})
    unknown = sum(d.images is None for d in damage)
    shown = ", ".join(images[:3]) + (" …" if len(images) > 3 else "")
    if len(damage) == 1:
        rows = f"the rows of {len(images)} image{'s' if len(images) != 1 else ''} ({shown})" if images else "its rows"
    else:
        rows = " and ".join(x for x in (
            f"the rows of {len(images)} image{'s' if len(images) != 1 else ''} ({shown})" if images else "",
            f"every row of {unknown} unreadable part{'s' if unknown != 1 else ''}" if unknown else "") if x)
    why = "; ".join(f"{d.part}: {d.reason}" for d in damage[:2]) + (" …" if len(damage) > 2 else "")
    return (f"{len(damage)} part{'s' if len(damage) != 1 else ''} of this run {'are' if len(damage) != 1 else 'is'} "
            f"damaged ({why}), so {rows} {'is' if rows.startswith('every row of 1 ') else 'are'} left out; the next "
            "resume of the run redoes them.")


def quarantine(run_dir: str | os.PathLike, damage: list[Damage]) -> None:
    """Move each damaged part's files (rows first: that uncommits it, then its checksums and maps) into
    RUN_DIR/damaged/<part>/ with note.txt saying why, so the next look at the parts redoes its rows. A writer's
    verb (`heal`); two writers moving one part at once is harmless (the second finds nothing left to move)."""
    run_dir = Path(run_dir)
    for d in damage:
        dest = run_dir / DAMAGED / d.part
        dest.mkdir(parents=True, exist_ok=True)
        for rel in (f"{PARTS}/{d.part}.parquet", f"{PARTS}/{d.part}{SUMS_SUFFIX}", f"{MAPS}/{d.part}.npz"):
            try:
                os.replace(run_dir / rel, dest / Path(rel).name)  # a symlink is moved itself, never followed
            except FileNotFoundError:
                pass
        note = (f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: moved here from the run because {d.reason}. "
                f"Its rows ({', '.join(d.images) if d.images else 'unknown'}) are done again by the run that "
                "moved it.\n")
        write_atomic(dest / "note.txt", lambda tmp: tmp.write_text(note, encoding="utf-8"))


def heal(run_dir: str | os.PathLike) -> list[Damage]:
    """Ready a run folder for writing: remove the temp files of writers that are gone (kill -9), and move its
    damaged parts aside (`quarantine`), so the run redoes exactly their rows. Returns the damage found."""
    from .claims import CLAIMS

    run_dir = Path(run_dir)
    for folder in (run_dir, run_dir / PARTS, run_dir / MAPS, run_dir / CLAIMS):
        remove_stale_temps(folder)
    _, damage = check_parts(run_dir)
    quarantine(run_dir, damage)
    return damage


# --------------------------------------------------------------------------------------------
# The table.


def _class_groups(frame: "pd.DataFrame") -> list:
    """Each row's group for distance_to_class_mean: (method, target) for a row with a map, else None."""
    import pandas as pd

    has_map = frame["map_index"].to_numpy() >= 0
    return [(m, int(t)) if ok and not pd.isna(t) else None
            for m, t, ok in zip(frame["method"].to_numpy(dtype=object), frame["target"].to_numpy(dtype=object),
                                has_map)]


def build_table(run_dir: str | os.PathLike, names: list[str] | None = None) -> "pd.DataFrame":
    """The table from the parts `names` (default: the intact parts): deduplicated, distance_to_class_mean filled
    in (measures.py), sorted by (image, method). Reads only; `write_table` saves it."""
    names = check_parts(run_dir)[0] if names is None else names
    frame = deduplicate(read_parts(run_dir, names)).sort_values(list(KEY), kind="stable").reset_index(drop=True)
    frame["distance_to_class_mean"] = distance_to_class_mean(read_thumbnails(run_dir, frame), _class_groups(frame))
    return frame


def write_table(run_dir: str | os.PathLike) -> "pd.DataFrame":
    """Build the table from the intact parts and write it atomically to results.parquet, with the list of parts it
    holds (so `open_run` knows whether it is current). The writer's verb (`finish_run`); opening never writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    names = check_parts(run_dir)[0]
    frame = build_table(run_dir, names)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _PARTS_META: _parts_digest(names)})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    data = buffer.getvalue()
    write_atomic(run_dir / TABLE_FILE, lambda tmp: tmp.write_bytes(data))
    text = f"{hashlib.sha256(data).hexdigest()}  {TABLE_FILE}\n"  # after the table: a crash between costs a rebuild
    write_atomic(run_dir / TABLE_SUMS, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return frame


def current_table(run_dir: str | os.PathLike, names: list[str] | None = None) -> "pd.DataFrame":
    """The table of the parts `names` (default: the intact parts): results.parquet when it holds exactly those,
    else built again in memory (a running run, a damaged part left out). Reading a run never writes into it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    names = check_parts(run_dir)[0] if names is None else names
    if (run_dir / TABLE_FILE).is_file():
        try:
            data = inside(run_dir, TABLE_FILE).read_bytes()  # read once: hashed, then parsed from memory
            if _read_sums(inside(run_dir, TABLE_SUMS)) == {TABLE_FILE: hashlib.sha256(data).hexdigest()}:
                table = pq.read_table(pa.BufferReader(data))
                if (table.schema.metadata or {}).get(_PARTS_META) == _parts_digest(names):
                    frame = table.to_pandas()
                    return frame if set(COLUMNS) <= set(frame) else with_columns(frame)
        except (OSError, ValueError, RunFolderError):  # damaged, pointing outside the run, or a table written
            pass  # before checksums: built again below
    return build_table(run_dir, names)


# --------------------------------------------------------------------------------------------
# A run, opened.


class Run:
    """A finished (or running) folder run: `.table` (a DataFrame, one row per (image, method)), `.info` (run.json),
    the maps of its rows, and `.damage`, the damaged parts left out of the table (`.missing` says it in a sentence)."""

    def __init__(self, path: Path, info: dict, table: "pd.DataFrame", damage: list[Damage] | None = None):
        self.path, self.info, self.table, self.damage = path, info, table, list(damage or [])

    @property
    def missing(self) -> str | None:
        """One sentence on the rows left out because their part is damaged; None when every part is intact."""
        return missing_sentence(self.damage)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, {len(self.table)} rows, network={self.info.get('network')!r})"

    @property
    def source(self) -> Path:
        """The image folder (or the folder of the image list) the rows' `image` paths are relative to."""
        return Path(self.info.get("source", "."))

    def row(self, row) -> "pd.Series":
        """A row of the table: itself (a Series) or by its index."""
        import pandas as pd

        return row if isinstance(row, pd.Series) else self.table.loc[row]

    def image_path(self, row) -> Path:
        """The image file of a row, below the run's image folder: a key that climbs out of it (`../`, an absolute
        path) is a RunFolderError. Links inside the image folder are followed (data sets are often linked
        together); whether the app may read the file is the trust rules' call (`app.dataset`)."""
        key = str(self.row(row)["image"])
        relative = os.path.normpath(key)
        if os.path.isabs(relative) or relative == ".." or relative.startswith(".." + os.sep):
            raise RunFolderError(f"The run names an image outside its image folder ({_shown(key)}), which is not read.")
        return self.source / relative

    def heatmap(self, row) -> np.ndarray:
        """The row's (H, W) float32 map: bits per pixel for the bottlenecks (it sums to total_bits less
        unlocated_bits), the method's own attribution otherwise. A row without a map (an error): RunFolderError."""
        r = self.row(row)
        if not int(r["map_index"]) >= 0 or not isinstance(r["map_file"], str):
            raise RunFolderError(f"The row for {r['image']} ({r['method']}) has no map: {r['error']}")
        stored = _load_member(self.path, r["map_file"], f"m{int(r['map_index'])}")
        return decode_map(stored, float(r["map_scale"]))

    def thumbnails(self, rows=None) -> np.ndarray:
        """Thumbnails (n, 28, 28), each the map's mass as shares summing to 1 (`measures.thumbnail`), of `rows`
        (a DataFrame of the table's rows, or index labels; default every row). Zeros for rows without a map."""
        import pandas as pd

        frame = self.table if rows is None else rows if isinstance(rows, pd.DataFrame) else self.table.loc[rows]
        return read_thumbnails(self.path, frame)


def open_run(run_dir: str | os.PathLike) -> Run:
    """The run in `run_dir` (made by `python -m iba_core attribute FOLDER --out RUN_DIR`): `.table`, `.heatmap(row)`.
    Only reads: the table is rebuilt in memory when rows were added since it was written (a running run), and a
    damaged part is left out and named in `.damage` / `.missing` (the next resume redoes its rows)."""
    path = Path(run_dir).expanduser()
    if not path.is_dir():
        raise RunFolderError(f"Run folder not found: {path}.")
    info = read_info(path)
    if info is None:
        raise RunFolderError(f"{path} is not a run folder (it has no {RUN_FILE}).",
                             cli_hint="Give the --out folder of `python -m iba_core attribute FOLDER --out RUN_DIR`.",
                             app_hint="Choose the folder a folder run wrote.")
    good, damage = check_parts(path)
    return Run(path, info, current_table(path, good), damage)
