"""A run folder's checks: each part's checksum and rows (`check_part`), what is damaged and why (`Damage`), the
sentence a page shows about missing rows, damaged parts set aside (`quarantine`) so the next resume does their rows
again (`heal`).
"""
from __future__ import annotations

import hashlib
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..cache import remove_stale_temps, write_atomic
from .store import COLUMNS, DAMAGED, MAPS, PARTS, SUMS_SUFFIX, RunFolderError, inside, part_names


@dataclass(frozen=True)
class Damage:
    """A part that cannot be trusted: its name, why (one phrase), and its images when its rows could be read."""

    part: str
    reason: str
    images: tuple[str, ...] | None = None


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


#: The largest checksum file read: a part's names two files (two lines of about 140 bytes), the table's one.
MAX_SUMS_BYTES = 64 * 1024


def read_sums(path: Path) -> dict[str, str]:
    """relative path → sha256 of a part's checksum file (`sha256sum` lines); ValueError when malformed or larger
    than MAX_SUMS_BYTES (refused unread)."""
    with open(path, "rb") as f:
        data = f.read(MAX_SUMS_BYTES + 1)
    if len(data) > MAX_SUMS_BYTES:
        raise ValueError(f"{path.name} is larger than a checksum file")
    sums = {}
    for line in data.decode("utf-8").splitlines():
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

    from .run_file import column_problem

    rows_rel, maps_rel = f"{PARTS}/{name}.parquet", f"{MAPS}/{name}.npz"
    sums_path = Path(run_dir) / PARTS / f"{name}{SUMS_SUFFIX}"
    images = None
    try:
        rows_path = inside(run_dir, rows_rel)
        if sums_path.exists() or sums_path.is_symlink():
            sums = read_sums(inside(run_dir, f"{PARTS}/{name}{SUMS_SUFFIX}"))
            if set(sums) - {rows_rel, maps_rel} or rows_rel not in sums:
                return Damage(name, "its checksum file names other files")
            if _sha256(rows_path) != sums[rows_rel]:
                return Damage(name, "its rows differ from their checksum")
            # types a run would not write (an edited part with its checksums redone): left out like a damaged one
            problem = column_problem(pq.read_schema(rows_path), COLUMNS)
            if problem:
                return Damage(name, problem)
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
            problem = column_problem(pq.read_schema(rows_path), COLUMNS)
            if problem:
                return Damage(name, problem)
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
