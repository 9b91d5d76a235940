"""A run's table, built from its good parts (`build_table`), written with its checksum (`write_table`) and read
back while it still matches (`current_table`); `open_run` → `Run`, what the Dataset page, the report and scripts read.
"""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cache import write_atomic
from .checks import Damage, check_parts, missing_sentence, read_sums
from .measures import distance_to_class_mean
from .run_file import column_problem
from .store import COLUMNS, KEY, RUN_FILE, RunFolderError, TABLE_FILE, TABLE_SUMS, PARTS_META, load_member, parts_digest, shown_value, decode_map, deduplicate, inside, read_info, read_parts, read_thumbnails, with_columns

if TYPE_CHECKING:
    import pandas as pd


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
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), PARTS_META: parts_digest(names)})
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
            if read_sums(inside(run_dir, TABLE_SUMS)) == {TABLE_FILE: hashlib.sha256(data).hexdigest()}:
                table = pq.read_table(pa.BufferReader(data))
                if (table.schema.metadata or {}).get(PARTS_META) == parts_digest(names) \
                        and column_problem(table.schema, COLUMNS) is None:  # a column of another type: built again
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
        together); whether the app may read the file is the trust rules' call (`app.dataset_gallery`)."""
        key = str(self.row(row)["image"])
        relative = os.path.normpath(key)
        if os.path.isabs(relative) or relative == ".." or relative.startswith(".." + os.sep):
            raise RunFolderError(f"The run names an image outside its image folder ({shown_value(key)}), which is not read.")
        return self.source / relative

    def heatmap(self, row) -> np.ndarray:
        """The row's (H, W) float32 map: bits per pixel for the bottlenecks (it sums to total_bits less
        unlocated_bits), the method's own attribution otherwise. A row without a map (an error): RunFolderError."""
        r = self.row(row)
        if not int(r["map_index"]) >= 0 or not isinstance(r["map_file"], str):
            raise RunFolderError(f"The row for {r['image']} ({r['method']}) has no map: {r['error']}")
        stored = load_member(self.path, r["map_file"], f"m{int(r['map_index'])}")
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
