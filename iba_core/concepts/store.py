"""A concept set on disk, inside its run folder, and `open_concepts` → `ConceptSet`.

    RUN_DIR/concepts/<set>/concepts.json            what made the set (its identity) and when
    RUN_DIR/concepts/<set>/fits/<group>.npz         a group's concepts W (K × C) and the elbow curve
    RUN_DIR/concepts/<set>/parts/<group>-r<rank>.*  a rank's image × concept rows (.parquet) and concept maps
                                                     (maps/<same>.npz: member m<i> = (K, h, w) float16 of image i)
    RUN_DIR/concepts/<set>/groups/<group>.parquet   the group's concept rows: written last, it marks the group done
    RUN_DIR/concepts/<set>/concepts.parquet         every finished group's concept rows (one per group × concept)
    RUN_DIR/concepts/<set>/concept_images.parquet   every finished group's image × concept rows
    RUN_DIR/concepts/<set>/damaged/<unit>/          a damaged unit's files, moved aside by the next run (redone)

A set's name is "<layer>-k<K|auto>-<hash>", the hash over its identity (layer, K, the bits method, seed, the
activation transform, the fit's sample size, the run's network and weights): a changed K or layer is a new set,
never mixed with the old one. Groups are "class-<target>" and "all" (the whole run).

Every unit (a group's fit, a rank's part, a group's table) is its files plus `<unit>.sha256` listing their
checksums, written last: the checksum file commits the unit, and a unit whose files do not match it is damaged —
left out when reading (`ConceptSet.missing` says which), moved aside and redone by the next run (`heal`), as a
run's parts are (`runs.checks`). The two tables at the top are derived (rewritten after each group) for other
tools; the app reads the committed units.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cache import remove_stale_temps, write_atomic
from ..runs.checks import read_sums
from ..runs.store import RunFolderError, decode_map, inside, load_member, typed, versions

if TYPE_CHECKING:
    import pandas as pd

CONCEPTS, SET_FILE = "concepts", "concepts.json"
FITS, PARTS, MAPS, GROUPS, DAMAGED = "fits", "parts", "maps", "groups", "damaged"
TABLE, IMAGE_TABLE = "concepts.parquet", "concept_images.parquet"
#: Words for the concepts (a CLIP model's best prompts for each concept's top crops), when asked for.
WORDS = "words"
SET_FORMAT = 3
SUMS = ".sha256"
ALL = "all"
#: The columns of the concept table (one row per group × concept), with their pandas types.
CONCEPT_COLUMNS: dict[str, str] = {
    "target": "Int64", "class_name": "str", "group": "str", "concept": "int64", "fit_index": "int64", "k": "int64",
    "images": "int64", "images_using": "int64", "bits_share": "float64", "p_full": "float64",
    "p_without": "float64", "p_only": "float64", "p_none": "float64", "effect": "float64", "kept": "float64",
    "area": "float64", "peak_spread": "float64", "negative_share": "float64", "fit_error": "float64",
    "flagged": "bool", "flag_reasons": "str", "top_images": "str",
}
#: The columns of the image table (one row per image × concept of a group).
IMAGE_COLUMNS: dict[str, str] = {
    "image": "str", "target": "Int64", "group": "str", "fit_index": "int64", "presence": "float64",
    "bits": "float64", "total_bits": "float64", "bits_share": "float64", "uses": "bool", "area": "float64",
    "p_full": "float64", "p_without": "float64", "p_only": "float64", "p_none": "float64", "peak_x": "float64",
    "peak_y": "float64",
    "map_file": "str", "map_index": "int64", "map_scale": "float64", "grid_h": "int64", "grid_w": "int64",
    "fit": "str",  # the fit the row was measured with (`fit_id`): rows of an earlier fit of the group are left out
}


def group_name(target: int | None) -> str:
    """A group's name: "class-<target>", or "all" for the whole run."""
    return ALL if target is None else f"class-{int(target)}"


def set_name(identity: dict) -> str:
    """The folder name of a concept set: its layer and K readable, then a hash of the whole identity."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]
    layer = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(identity.get("layer")))[:60]
    return f"{layer}-k{identity.get('k') or 'auto'}-{digest}"


def start_set(run_dir: str | os.PathLike, identity: dict) -> Path:
    """The set folder for `identity` inside the run, created with its concepts.json (kept when it exists)."""
    folder = Path(run_dir) / CONCEPTS / set_name(identity)
    if read_info(folder) is None:  # new, or damaged: rewritten (its name is its identity's hash)
        info = {**identity, "versions": versions(), "created": time.time()}
        write_atomic(folder / SET_FILE, lambda tmp: tmp.write_text(json.dumps(info, indent=1), encoding="utf-8"))
    return folder


def read_info(folder: Path) -> dict | None:
    """A set's concepts.json, or None when it is missing or damaged."""
    try:
        info = json.loads((folder / SET_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # JSON and UTF-8 errors are ValueErrors
        return None
    return info if isinstance(info, dict) else None


# --------------------------------------------------------------------------------------------
# Units: files committed by their checksum file.


def commit(folder: Path, unit: str, files: dict[str, bytes]) -> None:
    """Write `files` (relative path → bytes) atomically, then `unit`.sha256 listing them: the unit's commit."""
    for rel, data in files.items():
        write_atomic(folder / rel, lambda tmp, data=data: tmp.write_bytes(data))
    text = "".join(f"{hashlib.sha256(data).hexdigest()}  {rel}\n" for rel, data in files.items())
    write_atomic(folder / f"{unit}{SUMS}", lambda tmp: tmp.write_text(text, encoding="utf-8"))


def check_unit(folder: Path, unit: str) -> str | None:
    """Why a committed unit is damaged (a phrase), or None when every file it lists matches its checksum."""
    try:
        sums = read_sums(inside(folder, f"{unit}{SUMS}"))
        for rel, digest in sums.items():
            with open(inside(folder, rel), "rb") as f:
                if hashlib.file_digest(f, "sha256").hexdigest() != digest:
                    return f"{rel} does not match its checksum"
    except FileNotFoundError as err:
        return f"{Path(err.filename or '?').name} is missing"
    except (OSError, ValueError, UnicodeDecodeError, RunFolderError) as err:
        return f"its files cannot be read ({err})"
    return None


def units(folder: Path, kind: str, prefix: str = "") -> list[str]:
    """The committed units of a kind (FITS, PARTS, GROUPS), e.g. "parts/class-3-r0", whose names start with
    `prefix`."""
    where = folder / kind
    if not where.is_dir():
        return []
    return sorted(f"{kind}/{p.name[:-len(SUMS)]}" for p in where.glob(f"{prefix}*{SUMS}"))


def heal(folder: Path) -> list[tuple[str, str]]:
    """Remove stale temp files and move every damaged unit aside (damaged/), so the run redoes it; a group whose
    fit or part is damaged loses its table too (it is redone whole). Returns (unit, why) of the damage found."""
    for sub in (folder, folder / FITS, folder / PARTS, folder / MAPS, folder / GROUPS):
        remove_stale_temps(sub)
    found = [(u, why) for kind in (FITS, PARTS, GROUPS) for u in units(folder, kind)
             if (why := check_unit(folder, u)) is not None]
    redo = {_group_of(u) for u, _ in found}
    moved = found + [(u, "a part of its group was damaged") for u in units(folder, GROUPS)
                     if _group_of(u) in redo and u not in dict(found)]
    for unit, why in moved:
        dest = folder / DAMAGED / unit.replace("/", "-")
        dest.mkdir(parents=True, exist_ok=True)
        listed = [f"{unit}{SUMS}"]
        try:
            listed += list(read_sums(folder / f"{unit}{SUMS}"))
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        for rel in listed:
            try:
                os.replace(inside(folder, rel), dest / Path(rel).name)
            except (FileNotFoundError, RunFolderError):
                pass
        (dest / "note.txt").write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: moved here because {why}.\n",
                                       encoding="utf-8")
    return moved


def _group_of(unit: str) -> str:
    """The group a unit belongs to ("parts/class-3-r0" → "class-3")."""
    name = unit.split("/", 1)[1]
    return re.sub(r"-r\d+$", "", name) if unit.startswith(PARTS) else name


# --------------------------------------------------------------------------------------------
# Writing.


def frame_bytes(frame: "pd.DataFrame") -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def write_fit(folder: Path, group: str, components: np.ndarray, info: dict) -> None:
    """A group's fit: W and what chose it (`info`: k, curve, error, solver, negative_share, rows)."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, W=components.astype(np.float32),
                        info=np.frombuffer(json.dumps(info).encode(), dtype=np.uint8))
    commit(folder, f"{FITS}/{group}", {f"{FITS}/{group}.npz": buffer.getvalue()})


def read_fit(folder: Path, group: str) -> tuple[np.ndarray, dict] | None:
    """(W, info) of a group's committed, intact fit; None when there is none (or it is damaged)."""
    unit = f"{FITS}/{group}"
    if not (folder / f"{unit}{SUMS}").is_file() or check_unit(folder, unit) is not None:
        return None
    components = load_member(folder, f"{unit}.npz", "W")
    info = json.loads(load_member(folder, f"{unit}.npz", "info").tobytes().decode())
    return components.astype(np.float32), info


def write_part(folder: Path, group: str, rank: int, rows: list[dict], maps: list[np.ndarray]) -> None:
    """A rank's image × concept rows of a group and the images' concept maps (rows name theirs by map_index)."""
    import pandas as pd

    name = f"{group}-r{rank}"
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{f"m{i}": m for i, m in enumerate(maps)})
    rows = [dict(r, group=group, map_file=f"{MAPS}/{name}.npz") for r in rows]
    commit(folder, f"{PARTS}/{name}", {f"{MAPS}/{name}.npz": buffer.getvalue(),
                                       f"{PARTS}/{name}.parquet": frame_bytes(typed(pd.DataFrame(rows),
                                                                                    IMAGE_COLUMNS))})


def fit_id(components: np.ndarray) -> str:
    """A fit's short identity: the hash of its concepts W."""
    return hashlib.sha256(np.ascontiguousarray(components, dtype=np.float32).tobytes()).hexdigest()[:12]


def read_group_images(folder: Path, group: str, fit: str | None = None) -> "pd.DataFrame":
    """Every intact part's rows of a group, one per (image, concept), measured with the fit `fit` (default: the
    group's committed fit): a part left by an earlier attempt with another fit or more processes is not mixed in."""
    import pandas as pd

    if fit is None:
        fitted = read_fit(folder, group)
        fit = fit_id(fitted[0]) if fitted is not None else None
    frames = [pd.read_parquet(inside(folder, f"{u}.parquet")) for u in units(folder, PARTS, f"{group}-r")
              if check_unit(folder, u) is None]
    frame = typed(pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(), IMAGE_COLUMNS)
    frame = frame[frame["fit"] == fit]
    return frame.drop_duplicates(["image", "fit_index"], keep="last").reset_index(drop=True)


def write_group(folder: Path, group: str, table: "pd.DataFrame") -> None:
    commit(folder, f"{GROUPS}/{group}", {f"{GROUPS}/{group}.parquet": frame_bytes(typed(table, CONCEPT_COLUMNS))})


def drop_group(folder: Path, group: str) -> None:
    """Uncommit a group's table (its checksum file first), before its fit is made again."""
    for rel in (f"{GROUPS}/{group}{SUMS}", f"{GROUPS}/{group}.parquet"):
        (folder / rel).unlink(missing_ok=True)


def done_groups(folder: Path) -> set[str]:
    """The groups whose table is committed and intact."""
    return {u.split("/", 1)[1] for u in units(folder, GROUPS) if check_unit(folder, u) is None}


def write_tables(folder: Path) -> None:
    """concepts.parquet and concept_images.parquet from the finished groups (for other tools); a table that holds
    exactly that already is left as it is (a rerun that finds nothing to do changes no file)."""
    cs = open_concepts(folder.parent.parent, folder.name)
    for name, frame in ((TABLE, cs.concepts), (IMAGE_TABLE, cs.images)):
        data = frame_bytes(frame)
        try:
            if (folder / name).read_bytes() == data:
                continue
        except OSError:
            pass
        write_atomic(folder / name, lambda tmp, data=data: tmp.write_bytes(data))


def write_words(folder: Path, frame: "pd.DataFrame") -> None:
    """The words of the set's concepts (`crops.words_table`), replacing earlier ones."""
    commit(folder, WORDS, {f"{WORDS}.parquet": frame_bytes(frame)})


# --------------------------------------------------------------------------------------------
# Reading.


def list_sets(run_dir: str | os.PathLike) -> list[str]:
    """The concept sets of a run, newest first."""
    root = Path(run_dir) / CONCEPTS
    if not root.is_dir():
        return []
    found = []
    for path in root.glob(f"*/{SET_FILE}"):
        try:
            created = float(json.loads(inside(root, path.relative_to(root)).read_text(encoding="utf-8"))["created"])
        except (OSError, ValueError, KeyError, TypeError, RunFolderError):
            continue
        found.append((created, path.parent.name))
    return [name for _, name in sorted(found, reverse=True)]


@dataclass
class ConceptSet:
    """A run's concepts: `.concepts` (one row per group × concept, ordered), `.images` (image × concept rows with the
    concept's number), `.info` (concepts.json), the concept maps, and the damaged units left out."""

    path: Path
    info: dict
    concepts: "pd.DataFrame"
    images: "pd.DataFrame"
    damage: list[tuple[str, str]] = field(default_factory=list)

    @property
    def missing(self) -> str | None:
        """One sentence on the damaged units left out (the next `concepts` run redoes them); None when intact."""
        if not self.damage:
            return None
        groups = sorted({_group_of(u) for u, _ in self.damage})
        return (f"{len(self.damage)} file group{'s' if len(self.damage) != 1 else ''} of this concept set "
                f"{'are' if len(self.damage) != 1 else 'is'} damaged ({self.damage[0][0]}: {self.damage[0][1]}), so "
                f"the concepts of {', '.join(groups[:4])}{' …' if len(groups) > 4 else ''} are left out; the next "
                "concepts run redoes them.")

    @cached_property
    def words(self) -> "pd.DataFrame | None":
        """Words for the concepts (group, concept, word, score, rank), or None when none were found (or the file
        is damaged); read once."""
        import pandas as pd

        if not (self.path / f"{WORDS}{SUMS}").is_file() or check_unit(self.path, WORDS) is not None:
            return None
        return pd.read_parquet(inside(self.path, f"{WORDS}.parquet"))

    def words_of(self, target: int | None, concept: int) -> list[tuple[str, float]]:
        """A concept's words, best first, with their scores ([] without words)."""
        words = self.words
        if words is None:
            return []
        rows = words[(words["group"] == group_name(target)) & (words["concept"] == concept)].sort_values("rank")
        return [(str(w), float(s)) for w, s in zip(rows["word"], rows["score"])]

    def group(self, target: int | None) -> "pd.DataFrame":
        """The concept rows of a class (None: the whole run), in their order."""
        return self.concepts[self.concepts["group"] == group_name(target)]

    def image_rows(self, target: int | None, concept: int) -> "pd.DataFrame":
        """The image rows of a concept, its top image first."""
        rows = self.images[(self.images["group"] == group_name(target)) & (self.images["concept"] == concept)]
        return rows.sort_values("rank", kind="stable")

    @property
    def flagged(self) -> "pd.DataFrame":
        """The concepts flagged as shortcut candidates."""
        return self.concepts[self.concepts["flagged"]]

    def concept_map(self, row, size: tuple[int, int] | None = None) -> np.ndarray:
        """An image × concept row's concept map (the concept's activation mass per location, ≥ 0), on its grid, or
        upsampled (bilinear) to `size` (H, W) of the crop."""
        stored = load_member(self.path, str(row["map_file"]), f"m{int(row['map_index'])}")
        values = decode_map(stored[int(row["fit_index"])], float(row["map_scale"]))
        if size is None or tuple(size) == values.shape:
            return values
        import torch

        big = torch.nn.functional.interpolate(torch.from_numpy(values)[None, None], size=tuple(size), mode="bilinear",
                                              align_corners=False)[0, 0]
        return big.clamp_min(0).numpy()


def open_concepts(run_dir: str | os.PathLike, name: str | None = None) -> ConceptSet:
    """The concept set `name` of a run (default: the newest); RunFolderError when it has none. Only reads: damaged
    units are left out and named in `.damage` / `.missing`."""
    import pandas as pd

    sets = list_sets(run_dir)
    if name is None:
        if not sets:
            raise RunFolderError(f"The run {Path(run_dir).name} has no concepts yet.",
                                 cli_hint="Find them: python -m iba_core concepts RUN_DIR.",
                                 app_hint="Find them with “Find concepts” below.")
        name = sets[0]
    folder = inside(Path(run_dir) / CONCEPTS, name)
    if not (folder / SET_FILE).is_file():
        raise RunFolderError(f"The run has no concept set {name!r}; it has {', '.join(sets) or 'none'}.")
    info = read_info(folder)
    if info is None:
        raise RunFolderError(f"The concept set {name} is damaged: its {SET_FILE} cannot be read. The next concepts "
                             "run with the same settings rewrites it.")
    damage = [(u, why) for kind in (FITS, PARTS, GROUPS) for u in units(folder, kind)
              if (why := check_unit(folder, u)) is not None]
    bad = {_group_of(u) for u, _ in damage}
    done = sorted(done_groups(folder) - bad)
    tables = [pd.read_parquet(inside(folder, f"{GROUPS}/{g}.parquet")) for g in done]
    concepts = typed(pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(), CONCEPT_COLUMNS)
    images = [read_group_images(folder, g) for g in done]
    frame = typed(pd.concat(images, ignore_index=True) if images else pd.DataFrame(), IMAGE_COLUMNS)
    numbers = concepts.set_index(["group", "fit_index"])["concept"]
    frame.insert(4, "concept", [int(numbers.get((g, f), -1)) for g, f in zip(frame["group"], frame["fit_index"])])
    # an image's rank among a concept's images, by presence (1: the concept's top image in its group)
    frame["rank"] = frame.groupby(["group", "concept"])["presence"].rank(ascending=False, method="first").astype(
        "int64") if len(frame) else pd.Series(dtype="int64")
    return ConceptSet(folder, info, concepts, frame, damage)
