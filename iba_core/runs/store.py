"""A folder run on disk: what made it (run.json), rows appended in parts, the maps, the table; `open_run`.

    RUN_DIR/run.json               the network, weights, layer, settings of the run and of each method, versions
    RUN_DIR/parts/<part>.parquet   rows appended in small chunks, each file written atomically: the commit
    RUN_DIR/maps/<part>.npz        the maps of those rows (float16 "m<i>") and their thumbnails ("thumbs")
    RUN_DIR/results.parquet        the table: every part, deduplicated, with distance_to_class_mean; written
                                   atomically when a run finishes, and again on opening when parts were added

Why parts and one map file per part (for 100,000 images): one `.npy` per (image, method) means hundreds of
thousands of small files (slow to list, copy and back up; heavy on network file systems) and an atomic write each;
Zarr or HDF5 would be a new dependency and a single file that a crash can leave half written. A part holds the
rows finished since the last part (at most `PART_ROWS` rows or `PART_SECONDS` of work), so a run of 100,000 images
writes a few thousand files, a crash loses at most one part's work, and any process (a torchrun rank, a second
run) appends without locks: its own file names, `os.replace` to commit. The map file is written before its
part's table, so a row never points at a missing map. Each map is a compressed member of its part's .npz and reads
alone (`Run.heatmap`); the thumbnails of a part are one array, so class means and clusters read a few hundred
kilobytes per part, never the maps.

Maps are float16 (half the bytes of float32; 98 kB for a 224 × 224 map before compression), stored as A / max|A|
(so small values keep their precision) with a per-row `map_scale`: for a map without negative values (bits, |A|)
the scale makes the stored map sum exactly to the original's sum, so `Run.heatmap(row)` of a bottleneck sums to
its row's total_bits (less unlocated_bits, the bits of a ViT's class token that have no place on the image).

Nothing twice: a rerun skips the (image, method) pairs that have a row; error rows too, unless it is asked to try
them again (a file fixed since); the table keeps one row per pair (a result over an error, else the latest).
"""
from __future__ import annotations

import hashlib
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
from ..errors import UserError
from ..jsonable import jsonable
from .measures import THUMBNAIL, cosine_distance, thumbnail

if TYPE_CHECKING:
    import pandas as pd

RUN_FILE = "run.json"
TABLE_FILE = "results.parquet"
PARTS, MAPS = "parts", "maps"
#: Bump when the layout of a run folder changes (an older folder is then refused, not misread).
RUN_FORMAT = 1
#: A part is written after this many rows, or this many seconds after the last part (whichever comes first).
PART_ROWS = 64
PART_SECONDS = 30.0
#: The table's columns, in order, with their pandas types (missing values: NaN / <NA>).
COLUMNS: dict[str, str] = {
    "image": "str", "method": "str", "label": "Int64", "target": "Int64", "class_name": "str",
    "predicted": "Int64", "predicted_name": "str", "p_predicted": "float64", "p_target": "float64",
    "correct": "boolean", "total_bits": "float64", "unlocated_bits": "float64", "p_without": "float64",
    "p_with": "float64", "border_share": "float64", "box_share": "float64", "concentration": "float64",
    "distance_to_class_mean": "float64", "seconds": "float64", "precision": "str", "error": "str",
    "method_name": "str", "height": "Int64", "width": "Int64", "map_file": "str", "map_index": "int64",
    "map_scale": "float64", "rank": "int64", "finished": "float64",
}
KEY = ("image", "method")
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
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RunFolderError(f"The run file {path} cannot be read ({type(err).__name__}); it may be damaged.") from None
    if not isinstance(info, dict) or info.get("format") != RUN_FORMAT:
        raise RunFolderError(f"{path} is not a run file of this version (format {RUN_FORMAT}).")
    return info


def _shown(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "…"


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
        if info.get("layer") is None:
            info["layer"] = identity.get("layer")
        if info == old:
            return old
        info["versions"] = versions()
    write_atomic(run_dir / RUN_FILE, lambda tmp: tmp.write_text(json.dumps(info, indent=1), encoding="utf-8"))
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
        """Write the waiting rows as one part; returns its name (None when nothing waited)."""
        if not self.rows:
            return None
        name = f"part-{time.time_ns():020d}-r{self.rank}-{secrets.token_hex(3)}"
        rows = self.rows
        if self.maps:
            arrays = {f"m{i}": m for i, m in enumerate(self.maps)}
            arrays["thumbs"] = np.stack(self.thumbs)

            def write_maps(tmp: Path) -> None:
                with open(tmp, "wb") as f:
                    np.savez_compressed(f, **arrays)

            write_atomic(self.run_dir / MAPS / f"{name}.npz", write_maps)
            rows = [dict(r, map_file=f"{MAPS}/{name}.npz" if r["map_index"] >= 0 else None) for r in rows]
        frame = as_table(rows)
        write_atomic(self.run_dir / PARTS / f"{name}.parquet", lambda tmp: frame.to_parquet(tmp, index=False))
        self.rows, self.maps, self.thumbs = [], [], []
        self.last = time.monotonic()
        self.parts += 1
        return name


def as_table(rows: Iterable[dict]) -> "pd.DataFrame":
    """Rows as a DataFrame with exactly COLUMNS, in order, with their types."""
    import pandas as pd

    frame = pd.DataFrame(list(rows))
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame[list(COLUMNS)].astype(COLUMNS)


# --------------------------------------------------------------------------------------------
# The table.


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
    folder = Path(run_dir) / PARTS
    tables = [pq.read_table(folder / f"{n}.parquet", columns=columns) for n in names]
    if not tables:
        return as_table([]) if columns is None else as_table([])[columns]
    frame = pa.concat_tables(tables, promote_options="default").to_pandas()
    return frame.reset_index(drop=True)


def done_pairs(run_dir: str | os.PathLike, errors: bool = True) -> set[tuple[str, str]]:
    """(image, method) pairs that have a row (errors=False: a row without error): a rerun skips them."""
    frame = read_parts(run_dir, columns=["image", "method", "error"])
    if not errors:
        frame = frame[frame["error"].isna()]
    return set(zip(frame["image"].astype(str), frame["method"].astype(str)))


def deduplicate(frame: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (image, method): a result over an error, else the latest row (rows oldest first)."""
    ok = frame["error"].isna().to_numpy()
    order = np.lexsort((np.arange(len(frame)), ok))  # errors first, then results; each in their order
    return frame.iloc[order].drop_duplicates(list(KEY), keep="last")


def _parts_digest(names: list[str]) -> bytes:
    return hashlib.sha256("\n".join(names).encode()).hexdigest().encode()


def read_thumbnails(run_dir: str | os.PathLike, frame: "pd.DataFrame") -> np.ndarray:
    """The thumbnails (n, s, s) of the rows of `frame` (zeros for rows without a map), one file read per part."""
    out = np.zeros((len(frame), THUMBNAIL, THUMBNAIL), dtype=np.float32)
    files = frame["map_file"].to_numpy(dtype=object)
    index = frame["map_index"].to_numpy()
    for name in {f for f in files if isinstance(f, str)}:
        where = np.flatnonzero(files == name)
        with np.load(Path(run_dir) / name, allow_pickle=False) as data:
            out[where] = data["thumbs"][index[where]]
    return out


def class_distances(run_dir: str | os.PathLike, frame: "pd.DataFrame") -> np.ndarray:
    """distance_to_class_mean of every row (measures.py): 1 − cos to the mean thumbnail of the rows with the same
    method and target; NaN for error rows and for a class with one map."""
    out = np.full(len(frame), np.nan)
    has_map = frame["map_index"].to_numpy() >= 0
    thumbs = read_thumbnails(run_dir, frame)
    groups = frame.assign(_pos=np.arange(len(frame)))[has_map].groupby(["method", "target"], dropna=True)["_pos"]
    for _, positions in groups:
        where = positions.to_numpy()
        if len(where) > 1:
            out[where] = cosine_distance(thumbs[where], thumbs[where].mean(axis=0))
    return out


def build_table(run_dir: str | os.PathLike, write: bool = True) -> "pd.DataFrame":
    """The table from every part: deduplicated, distance_to_class_mean filled in, sorted by (image, method);
    written atomically to results.parquet (with the list of parts it holds) unless write=False."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    names = part_names(run_dir)
    frame = deduplicate(read_parts(run_dir, names)).sort_values(list(KEY), kind="stable").reset_index(drop=True)
    frame["distance_to_class_mean"] = class_distances(run_dir, frame)
    if write:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), _PARTS_META: _parts_digest(names)})
        write_atomic(run_dir / TABLE_FILE, lambda tmp: pq.write_table(table, tmp))
    return frame


def current_table(run_dir: str | os.PathLike) -> "pd.DataFrame":
    """results.parquet when it holds every part, else the table built again (and saved, where the folder can be
    written)."""
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    path = run_dir / TABLE_FILE
    if path.is_file():
        try:
            meta = pq.read_schema(path).metadata or {}
            if meta.get(_PARTS_META) == _parts_digest(part_names(run_dir)):
                return pq.read_table(path).to_pandas()
        except (OSError, ValueError):  # damaged: built again below
            pass
    try:
        return build_table(run_dir)
    except PermissionError:  # a folder of someone else's run: read, not written
        return build_table(run_dir, write=False)


# --------------------------------------------------------------------------------------------
# A run, opened.


class Run:
    """A finished (or running) folder run: `.table` (a DataFrame, one row per (image, method)), `.info` (run.json)
    and the maps of its rows."""

    def __init__(self, path: Path, info: dict, table: "pd.DataFrame"):
        self.path, self.info, self.table = path, info, table

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
        """The image file of a row."""
        return self.source / str(self.row(row)["image"])

    def heatmap(self, row) -> np.ndarray:
        """The row's (H, W) float32 map: bits per pixel for the bottlenecks (it sums to total_bits less
        unlocated_bits), the method's own attribution otherwise. A row without a map (an error): RunFolderError."""
        r = self.row(row)
        if not int(r["map_index"]) >= 0 or not isinstance(r["map_file"], str):
            raise RunFolderError(f"The row for {r['image']} ({r['method']}) has no map: {r['error']}")
        with np.load(self.path / r["map_file"], allow_pickle=False) as data:
            stored = data[f"m{int(r['map_index'])}"]
        return decode_map(stored, float(r["map_scale"]))

    def thumbnails(self, rows=None) -> np.ndarray:
        """Thumbnails (n, 28, 28), each the map's mass as shares summing to 1 (`measures.thumbnail`), of `rows`
        (a DataFrame of the table's rows, or index labels; default every row). Zeros for rows without a map."""
        import pandas as pd

        frame = self.table if rows is None else rows if isinstance(rows, pd.DataFrame) else self.table.loc[rows]
        return read_thumbnails(self.path, frame)


def open_run(run_dir: str | os.PathLike) -> Run:
    """The run in `run_dir` (made by `python -m iba_core attribute FOLDER --out RUN_DIR`): `.table`, `.heatmap(row)`.
    The table is rebuilt from the parts when rows were added since it was last written (a running run)."""
    path = Path(run_dir).expanduser()
    if not path.is_dir():
        raise RunFolderError(f"Run folder not found: {path}.")
    info = read_info(path)
    if info is None:
        raise RunFolderError(f"{path} is not a run folder (it has no {RUN_FILE}).",
                             cli_hint="Give the --out folder of `python -m iba_core attribute FOLDER --out RUN_DIR`.",
                             app_hint="Choose the folder a folder run wrote.")
    return Run(path, info, current_table(path))
