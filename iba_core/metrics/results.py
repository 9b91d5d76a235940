"""Resumable results: one JSON line per (image, method, setting), rank files, paper-style tables.

A record is a flat JSON object with at least `metric`, `image`, `method` and `setting`; together they
are its key. `ResultsWriter` appends one line per finished record and flushes it to disk at once, so
an interrupted run loses nothing it finished; `read_records` skips a line cut off mid-write, and
`done_keys` tells a restarted run what to skip.

Distributed runs (torchrun): each rank appends to its own file, `results.rank{r}.jsonl` next to
`--out`, and drops `results.rank{r}.done` when its shard is finished; `merge_results` folds the rank
files into `--out` (deduplicated by key) once all are done, and `write_table` renders
`results.table.md` next to it.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..cache import write_atomic
from ..jsonable import jsonable

KEY_FIELDS = ("metric", "image", "method", "setting")
Key = tuple[str, str, str, str]


def record_key(record: dict) -> Key:
    """The identity of a record: a rerun skips a key it finds already written."""
    return tuple(str(record.get(f, "")) for f in KEY_FIELDS)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# Reading and writing.


def iter_records(path: str | os.PathLike) -> Iterator[dict]:
    """Records of a JSONL file in order; missing file → nothing; unreadable lines are skipped.

    A run killed while writing can leave a half line at the end: it is ignored (and the record it
    belonged to is recomputed on the next run).
    """
    path = Path(path)
    if not path.is_file():
        return
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def read_records(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[dict]:
    """All records of one or several JSONL files, deduplicated by key (first occurrence wins)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    seen: set[Key] = set()
    out = []
    for path in paths:
        for record in iter_records(path):
            key = record_key(record)
            if key not in seen:
                seen.add(key)
                out.append(record)
    return out


def done_keys(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> set[Key]:
    """Keys already written to any of `paths`."""
    return {record_key(r) for r in read_records(paths)}


class ResultsWriter:
    """Appends records as JSON lines, flushed and fsynced one by one."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._fh = self.path.open("a+", encoding="utf-8")
        # A line cut off by a crash must not swallow the next record: start on a fresh line.
        self._fh.seek(0, os.SEEK_END)
        if self._fh.tell() > 0:
            self._fh.seek(self._fh.tell() - 1)
            last = self._fh.read(1)
            self._fh.seek(0, os.SEEK_END)
            if last != "\n":
                self._fh.write("\n")
        self.written = 0

    def write(self, record: dict) -> None:
        missing = [f for f in KEY_FIELDS if f not in record]
        if missing:
            raise ValueError(f"A result record needs the fields {missing}.")
        self._fh.write(json.dumps(jsonable(record), separators=(",", ":")) + "\n")
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())
        self.written += 1

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------------------------
# Files of the ranks (torchrun: `iba_core.ranks`) and merging.


def rank_path(out: str | os.PathLike, rank: int) -> Path:
    """results.jsonl → results.rank{r}.jsonl (same folder)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.rank{rank}{out.suffix or '.jsonl'}")


def done_marker(out: str | os.PathLike, rank: int) -> Path:
    out = Path(out)
    return out.with_name(f"{out.stem}.rank{rank}.done")


def table_path(out: str | os.PathLike) -> Path:
    """results.jsonl → results.table.md (same folder)."""
    out = Path(out)
    return out.with_name(f"{out.stem}.table.md")


def rank_files(out: str | os.PathLike) -> list[Path]:
    out = Path(out)
    return sorted(out.parent.glob(f"{out.stem}.rank*{out.suffix or '.jsonl'}"))


def all_ranks_done(out: str | os.PathLike, world: int) -> bool:
    return all(done_marker(out, r).is_file() for r in range(world))


def merge_results(out: str | os.PathLike) -> list[dict]:
    """Fold the rank files into `out` (deduplicated by key, atomically replaced); returns all records."""
    out = Path(out)
    records = read_records([out, *rank_files(out)])
    def write(tmp: Path) -> None:  # a unique temp name: two ranks may merge at once
        with tmp.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(jsonable(record), separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    write_atomic(out, write)
    return records


# --------------------------------------------------------------------------------------------
# Tables.


def fmt(value, digits: int = 3) -> str:
    """A table cell: fixed digits, '–' for missing or undefined values."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    return f"{float(value):.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence], digits: int = 3) -> str:
    """A GitHub-style markdown table; the first column is left-aligned, the others right-aligned."""
    cells = [[str(h) for h in header]] + [
        [str(r[0])] + [c if isinstance(c, str) else fmt(c, digits) for c in r[1:]] for r in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        return "| " + " | ".join(parts) + " |"

    rule = "|" + "|".join(["-" * (widths[0] + 1) + "-"] + ["-" * (w + 1) + ":" for w in widths[1:]]) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def format_tables(records: Sequence[dict]) -> str:
    """Paper-style tables for every metric present in `records`, as markdown with headings."""
    from . import registry  # each metric renders its own table (`Metric.format_table`)

    known = {m.name: m for m in registry.metrics()}
    parts = []
    for metric in sorted({r.get("metric", "") for r in records}):
        subset = [r for r in records if r.get("metric") == metric]
        if metric not in known or not subset:
            continue
        parts.append(known[metric].format_table(subset))
    return "\n\n".join(parts) + ("\n" if parts else "")


def write_table(records: Sequence[dict], out: str | os.PathLike) -> tuple[str, Path]:
    """Render the tables and save them next to `out` (results.table.md); returns (text, path)."""
    text = format_tables(records)
    path = table_path(out)
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))  # never half a table
    return text, path
