"""Two folder runs compared image by image (issue #42): two models, two methods or two settings over the same
images, or one network over two folders whose files match by relative path (before and after an intervention).

    paired = pair_runs(open_run("runs/clean"), open_run("runs/marked"))    # each run's first bits method
    paired.table.head()                       # one row per matched image, the most changed first
    paired.difference(paired.table.iloc[0])   # its signed map B − A
    write_paired(paired, "compare/")          # paired.parquet, paired_classes.parquet, paired.json, maps, report

What is compared, and the choices made:

- **Matching**: a row's key (image, prompt): the `image` path relative to the run's folder (and a CLIP run's text
  prompt, "" otherwise). Only rows of the chosen method with a map count; an image with a row in both runs but an
  error in one is `failed`, one in a single run `only_a` / `only_b`. Nothing matched: a UserError with the counts.
- **Targets**: each run explains its own target (its label, or its network's top-1 class); a row says whether the
  two are the same (`same_target`) and the summary counts those that differ. Classes are A's.
- **Score**: "total_bits" when both methods' maps are in bits per pixel (the bottlenecks: the row's total bits);
  otherwise "positive_mass", the sum of the map's positive part (for an unsigned map, its sum). Δscore = B − A, NaN
  where the two maps are in different units (a bits map against a gradient's): such scores do not compare.
- **Difference maps**: B − A per pixel when both maps are in one unit (basis "values"); in different units each
  map is first divided by its positive mass (basis "shares": where each puts its positive evidence). Maps of two
  sizes (two crops) are refused, never resampled: a resampled map would shift mass between pixels of other places.
- **One colour scale** for all images' difference maps: the largest |B − A| over every matched image (no quantile:
  one pixel that changed a lot is what a reader should see as the top). The class means get their own one scale
  (their largest |value|), as averaging shrinks them.
- **Order**: the most changed first, by |Δscore| (NaN last), then |Δp(target)|, then the image's path.
- **Changed prediction**: the two runs' top-1 classes differ (a row without a prediction counts as unchanged).

Maps are read one pair at a time (never all in memory): `pair_runs` reads each once to measure, `write_paired`
once more to store them (float16 with a scale, as the runs store maps: `store.encode_map`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..cache import write_atomic
from ..errors import UserError
from ..jsonable import jsonable
from .highlights import BITS_UNIT, methods_bits_first
from .store import decode_map, encode_map, prompt_key, shown_value
from .tables import Run, open_run

if TYPE_CHECKING:
    import pandas as pd

PAIRED_FILE, CLASSES_FILE, SUMMARY_FILE = "paired.parquet", "paired_classes.parquet", "paired.json"
MAPS_FILE, REPORT_FILE = "paired_maps.npz", "paired_report.html"
#: The summary's (and the CLI's) list of the most changed images, and the report's pictures of them.
TOP_IMAGES = 12
#: The report's table holds at most this many rows (the Parquet file holds them all).
REPORT_ROWS = 100
ORDER = "the most changed first: by |Δscore| (missing last), then |Δp(target)|, then the image's path"
#: A run's columns each side of the table keeps, renamed with _a / _b.
SIDE_COLUMNS = ("target", "predicted", "predicted_name", "p_target", "total_bits", "height", "width")


@dataclass
class Paired:
    """Two runs compared image by image (`pair_runs`): plain data for the page, the report and the files.
    `table` one row per matched image (most changed first), `classes` one row per class of A, `scale` the one
    colour scale of every difference map; see the module's docstring for the choices."""

    run_a: Run
    run_b: Run
    method_a: str
    method_b: str
    name_a: str
    name_b: str
    unit_a: str
    unit_b: str
    score: str  # "total_bits" or "positive_mass"
    comparable: bool  # one unit on both sides: Δscore means something, the maps subtract as values
    basis: str  # "values" or "shares"
    table: "pd.DataFrame"
    classes: "pd.DataFrame"
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    failed: tuple[str, ...]
    scale: float
    class_scale: float
    order: str = ORDER
    notes: tuple[str, ...] = ()
    class_maps: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def counts(self) -> dict[str, int]:
        """matched, only_a, only_b, failed, changed (predictions), targets_differ."""
        t = self.table
        return {"matched": len(t), "only_a": len(self.only_a), "only_b": len(self.only_b),
                "failed": len(self.failed), "changed": int(t["changed"].sum()),
                "targets_differ": int((~t["same_target"]).sum())}

    def summary(self) -> dict:
        """Everything but the tables as JSON-able data (NaN → None), with the TOP_IMAGES most changed images."""
        t = self.table
        top = t.head(TOP_IMAGES)[["image", "class_name", "delta_score", "delta_p", "changed", "predicted_a",
                                  "predicted_b"]]
        return jsonable({
            "run_a": str(self.run_a.path), "run_b": str(self.run_b.path),
            "method_a": self.method_a, "method_b": self.method_b, "name_a": self.name_a, "name_b": self.name_b,
            "unit_a": self.unit_a, "unit_b": self.unit_b, "score": self.score, "comparable": self.comparable,
            "basis": self.basis, "scale": self.scale, "class_scale": self.class_scale, **self.counts,
            "mean_delta_p": _mean(t["delta_p"]), "mean_delta_score": _mean(t["delta_score"]),
            "order": self.order, "notes": list(self.notes),
            "top": [{k: (None if _missing(v) else v.item() if hasattr(v, "item") else v) for k, v in r.items()}
                    for r in top.to_dict("records")],
        })

    def _row(self, row) -> "pd.Series":
        import pandas as pd

        if isinstance(row, pd.Series):
            return row
        if isinstance(row, str):
            hits = self.table[self.table["image"] == row]
            if hits.empty:
                raise UserError(f"The image {shown_value(row)} is not among the matched images.")
            return hits.iloc[0]
        return self.table.loc[row]

    def difference(self, row) -> np.ndarray:
        """The (H, W) float32 difference map B − A of a matched image: a row of `table`, its index, or its image
        key (a CLIP run's first prompt of it)."""
        r = self._row(row)
        a, b = self.run_a.heatmap(int(r["row_a"])), self.run_b.heatmap(int(r["row_b"]))
        return _difference(a, b, self.basis).astype(np.float32)

    def class_mean(self, target: int) -> np.ndarray:
        """The mean difference map of A's class `target` (a UserError for a class with no matched image)."""
        if int(target) not in self.class_maps:
            raise UserError(f"No matched image is of class {target}.")
        return self.class_maps[int(target)]


def _missing(value) -> bool:
    try:
        return value is None or bool(value != value)
    except (TypeError, ValueError):
        return False


def _mean(values) -> float | None:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else None


def _positive_mass(values: np.ndarray) -> float:
    return float(np.clip(values, 0, None).sum(dtype=np.float64))


def _difference(a: np.ndarray, b: np.ndarray, basis: str) -> np.ndarray:
    """B − A in float64: as values, or as shares of each map's positive mass (a map without any: zeros)."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    if basis == "shares":
        mass_a, mass_b = _positive_mass(a), _positive_mass(b)
        a = a / mass_a if mass_a > 0 else np.zeros_like(a)
        b = b / mass_b if mass_b > 0 else np.zeros_like(b)
    return b - a


# ---- choosing and matching --------------------------------------------------------------------------------------


def _as_run(run) -> Run:
    return run if isinstance(run, Run) else open_run(run)


def _method(run: Run, method: str | None, which: str) -> str:
    """The run's method `method`, or its first bits method (`highlights.methods_bits_first`); a one-sentence
    UserError for a method the run lacks or a run without methods."""
    methods = methods_bits_first(run.info)
    if not methods:
        raise UserError(f"Run {which} ({run.path}) names no method, so there is nothing to compare.")
    if method is None:
        return methods[0]
    if method not in methods:
        raise UserError(f"Run {which} ({run.path}) has no method {method!r}; it has {', '.join(methods)}.")
    return method


def _method_rows(run: Run, method: str) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(rows of `method` with a map, every row of `method`), with the prompt as its key holds it and the row's
    label in the run's table (`row`)."""
    table = run.table
    rows = table[table["method"] == method].assign(row=lambda t: t.index)
    rows = rows.assign(prompt=[prompt_key(v) for v in rows["prompt"]], image=rows["image"].astype(str))
    ok = rows[(rows["map_index"] >= 0) & rows["error"].isna() & rows["map_file"].notna()]
    return ok, rows


def _images(frame: "pd.DataFrame") -> set:
    return set(zip(frame["image"], frame["prompt"]))


def _keys_text(keys: set) -> tuple[str, ...]:
    """Keys as image paths (a prompt after " · " where there is one), sorted."""
    return tuple(sorted(image if not prompt else f"{image} · {prompt}" for image, prompt in keys))


def _nothing_matched(run_a: Run, run_b: Run, all_a, all_b, failed: set) -> UserError:
    n_a, n_b = all_a["image"].nunique(), all_b["image"].nunique()
    if failed:
        return UserError(f"No image has a map in both runs: the {len(failed)} image(s) they share failed in one of "
                         f"them (A has {n_a} images, B has {n_b}).")
    return UserError(f"No image of {run_b.path} matches {run_a.path} by its path: A has {n_a} images, B has {n_b}, "
                     "none in common.",
                     cli_hint="Compare runs over the same images, or over folders whose files share relative paths.",
                     app_hint="Choose a run over the same images, or over a folder whose files share their paths.")


def _matched_frame(ok_a: "pd.DataFrame", ok_b: "pd.DataFrame") -> "pd.DataFrame":
    """The matched rows side by side: A's class, label and name; each side's SIDE_COLUMNS with _a / _b and its row."""
    left = ok_a[["image", "prompt", "class_name", "label", "row", *SIDE_COLUMNS]]
    right = ok_b[["image", "prompt", "row", *SIDE_COLUMNS]]
    frame = left.merge(right, on=["image", "prompt"], suffixes=("_a", "_b"), validate="one_to_one")
    sizes = (frame["height_a"] != frame["height_b"]) | (frame["width_a"] != frame["width_b"])
    if sizes.any():
        first = frame[sizes].iloc[0]
        raise UserError(f"The maps of {int(sizes.sum())} matched image(s) differ in size ({first['image']}: "
                        f"{first['height_a']}×{first['width_a']} in A, {first['height_b']}×{first['width_b']} in B); "
                        "maps are compared pixel by pixel, so both runs need one crop size.")
    return frame


def _side_facts(run: Run, method: str) -> tuple[str, str]:
    entry = run.info.get("methods", {}).get(method, {})
    return str(entry.get("name") or method), str(entry.get("unit", ""))


# ---- measuring ---------------------------------------------------------------------------------------------------


def _measure(run_a: Run, run_b: Run, frame: "pd.DataFrame", bits: bool, basis: str) -> dict:
    """One pass over the matched pairs, one pair of maps in memory at a time: each side's score (total bits, or the
    positive mass), the difference's L1 mass and its stored scale, the largest |B − A|, and the sums per A's class."""
    n = len(frame)
    out = {"score_a": np.full(n, np.nan), "score_b": np.full(n, np.nan), "map_change": np.zeros(n),
           "map_scale": np.zeros(n), "scale": 0.0, "sums": {}, "counts": {}, "skipped": 0}
    for i, (row_a, row_b, target) in enumerate(zip(frame["row_a"], frame["row_b"], frame["target_a"])):
        a, b = run_a.heatmap(int(row_a)), run_b.heatmap(int(row_b))
        if not bits:
            out["score_a"][i], out["score_b"][i] = _positive_mass(a), _positive_mass(b)
        diff = _difference(a, b, basis)
        out["map_change"][i] = float(np.abs(diff).sum())
        out["map_scale"][i] = encode_map(diff)[1]
        out["scale"] = max(out["scale"], float(np.abs(diff).max()) if diff.size else 0.0)
        key = -1 if _missing(target) else int(target)
        if key in out["sums"] and out["sums"][key].shape != diff.shape:
            out["skipped"] += 1  # a class's maps of another size cannot be averaged with the rest
            continue
        out["sums"][key] = out["sums"].get(key, 0.0) + diff
        out["counts"][key] = out["counts"].get(key, 0) + 1
    return out


def _finish_table(frame: "pd.DataFrame", measured: dict, bits: bool, comparable: bool) -> "pd.DataFrame":
    """The table's computed columns (targets, changes, scores, deltas), ordered most changed first."""
    import pandas as pd

    same = (frame["target_a"] == frame["target_b"]).fillna(False).astype(bool)
    changed = (frame["predicted_a"] != frame["predicted_b"]).fillna(False).astype(bool)
    score_a = frame["total_bits_a"].to_numpy(np.float64) if bits else measured["score_a"]
    score_b = frame["total_bits_b"].to_numpy(np.float64) if bits else measured["score_b"]
    delta_score = score_b - score_a if comparable else np.full(len(frame), np.nan)
    p_a, p_b = frame["p_target_a"].to_numpy(np.float64), frame["p_target_b"].to_numpy(np.float64)
    table = pd.DataFrame({
        "image": frame["image"], "prompt": frame["prompt"], "class_name": frame["class_name"],
        "label": frame["label"], "target_a": frame["target_a"], "target_b": frame["target_b"], "same_target": same,
        "predicted_a": frame["predicted_a"], "predicted_b": frame["predicted_b"],
        "predicted_name_a": frame["predicted_name_a"], "predicted_name_b": frame["predicted_name_b"],
        "changed": changed, "p_a": p_a, "p_b": p_b, "delta_p": p_b - p_a, "score_a": score_a, "score_b": score_b,
        "delta_score": delta_score, "map_change": measured["map_change"], "height": frame["height_a"],
        "width": frame["width_a"], "row_a": frame["row_a"].astype("int64"), "row_b": frame["row_b"].astype("int64"),
        "map_scale": measured["map_scale"]})
    big_score = np.nan_to_num(np.abs(delta_score), nan=-1.0)  # missing last
    big_p = np.nan_to_num(np.abs(table["delta_p"].to_numpy()), nan=-1.0)
    order = np.lexsort((table["image"].to_numpy(dtype=str), -big_p, -big_score))
    table = table.iloc[order].reset_index(drop=True)
    return table.assign(map_index=np.arange(len(table), dtype=np.int64))


def _class_frame(table: "pd.DataFrame", measured: dict) -> tuple["pd.DataFrame", dict[int, np.ndarray]]:
    """One row per A's class (target −1: rows without one): its images, changed predictions, mean Δp and Δscore,
    and its mean difference map (with the map's place in the .npz and its stored scale)."""
    import pandas as pd

    maps, rows = {}, []
    targets = table["target_a"].fillna(-1).astype(int)
    for i, target in enumerate(sorted(measured["sums"])):
        maps[target] = (measured["sums"][target] / measured["counts"][target]).astype(np.float32)
        members = table[targets == target]
        rows.append({"target": target, "class_name": str(members["class_name"].iloc[0]), "images": len(members),
                     "changed": int(members["changed"].sum()), "mean_delta_p": _mean(members["delta_p"]),
                     "mean_delta_score": _mean(members["delta_score"]), "map_index": i,
                     "map_scale": encode_map(maps[target])[1]})
    classes = pd.DataFrame(rows, columns=["target", "class_name", "images", "changed", "mean_delta_p",
                                          "mean_delta_score", "map_index", "map_scale"])
    return classes.astype({"mean_delta_p": "float64", "mean_delta_score": "float64"}), maps


def _notes(table: "pd.DataFrame", comparable: bool, names: tuple[str, str], skipped: int) -> tuple[str, ...]:
    notes = []
    differ = int((~table["same_target"]).sum())
    if differ:
        notes.append(f"The two runs explain different classes for {differ} of {len(table)} images (each run its own "
                     "target): p(target) and the maps compare different questions there.")
    if not comparable:
        notes.append(f"{names[0]} and {names[1]} give maps in different units: their scores are not compared, and "
                     "each map is divided by its positive mass before the difference (shares of the map).")
    if skipped:
        notes.append(f"{skipped} map(s) of another size than the rest of their class are left out of its mean.")
    return tuple(notes)


def pair_runs(run_a, run_b, method_a: str | None = None, method_b: str | None = None) -> Paired:
    """Compare `run_b` with `run_a` image by image (both `Run`s, or run folders): the rows of `method_a` in A and
    `method_b` in B (default: each run's first bits method) matched by (image, prompt). Reads every matched map
    once. UserErrors (one sentence): a method missing, nothing matched (with the counts), maps of two sizes."""
    run_a, run_b = _as_run(run_a), _as_run(run_b)
    method_a, method_b = _method(run_a, method_a, "A"), _method(run_b, method_b, "B")
    (ok_a, all_a), (ok_b, all_b) = _method_rows(run_a, method_a), _method_rows(run_b, method_b)
    keys_a, keys_b, matched = _images(all_a), _images(all_b), _images(ok_a) & _images(ok_b)
    failed = (keys_a & keys_b) - matched
    if not matched:
        raise _nothing_matched(run_a, run_b, all_a, all_b, failed)
    (name_a, unit_a), (name_b, unit_b) = _side_facts(run_a, method_a), _side_facts(run_b, method_b)
    comparable = unit_a == unit_b
    bits = comparable and unit_a == BITS_UNIT
    basis = "values" if comparable else "shares"
    frame = _matched_frame(ok_a, ok_b)
    measured = _measure(run_a, run_b, frame, bits, basis)
    table = _finish_table(frame, measured, bits, comparable)
    classes, maps = _class_frame(table, measured)
    class_scale = max((float(np.abs(m).max()) for m in maps.values() if m.size), default=0.0)
    return Paired(run_a, run_b, method_a, method_b, name_a, name_b, unit_a, unit_b,
                  "total_bits" if bits else "positive_mass", comparable, basis, table, classes,
                  _keys_text(keys_a - keys_b), _keys_text(keys_b - keys_a), _keys_text(failed),
                  measured["scale"], class_scale, class_maps=maps,
                  notes=_notes(table, comparable, (name_a, name_b), measured["skipped"]))


# ---- files -------------------------------------------------------------------------------------------------------


def _parquet(path: Path, frame: "pd.DataFrame") -> None:
    write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def _write_maps(paired: Paired, path: Path) -> None:
    """The difference maps as one .npz: "d<i>" per table row (its map_index), "c<i>" per class, float16 as the
    runs store maps (`store.encode_map`; decode with the row's map_scale). Written member by member (one map in
    memory at a time), through a temp file."""
    import zipfile

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for _, row in paired.table.iterrows():
                _member(archive, f"d{int(row['map_index'])}", encode_map(paired.difference(row))[0])
            for _, row in paired.classes.iterrows():
                _member(archive, f"c{int(row['map_index'])}", encode_map(paired.class_maps[int(row['target'])])[0])

    write_atomic(path, write)


def _member(archive, name: str, array: np.ndarray) -> None:
    with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)


def check_paired_out(out_dir: str | os.PathLike) -> None:
    """Refuse in one sentence an output folder that is a run folder (it holds run.json): the comparison's files would
    mix with that run's."""
    from .run_file import RUN_FILE

    if (Path(out_dir).expanduser() / RUN_FILE).is_file():
        raise UserError(f"The folder {out_dir} is a run folder (it holds {RUN_FILE}); give the comparison a folder of "
                        "its own, e.g. beside the runs.")


def write_paired(paired: Paired, out_dir: str | os.PathLike, report: bool = True) -> dict[str, Path]:
    """Write the comparison into `out_dir` (created; every file atomically; a run folder refused, `check_paired_out`):
    the table (PAIRED_FILE), the classes (CLASSES_FILE), the summary (SUMMARY_FILE, `Paired.summary`), the
    difference maps (MAPS_FILE) and, with `report`, the HTML report (REPORT_FILE). Returns {"table", "classes",
    "summary", "maps"[, "report"]: path}."""
    check_paired_out(out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"table": out / PAIRED_FILE, "classes": out / CLASSES_FILE, "summary": out / SUMMARY_FILE,
             "maps": out / MAPS_FILE}
    _parquet(files["table"], paired.table)
    _parquet(files["classes"], paired.classes)
    _write_maps(paired, files["maps"])
    text = json.dumps(paired.summary(), indent=1)
    write_atomic(files["summary"], lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if report:
        files["report"] = out / REPORT_FILE
        data = report_html(paired)
        write_atomic(files["report"], lambda tmp: tmp.write_bytes(data))
    return files


def read_maps(path: str | os.PathLike, frame: "pd.DataFrame", prefix: str = "d") -> list[np.ndarray]:
    """The maps of `frame`'s rows (a written table's or classes' rows) from a MAPS_FILE, decoded."""
    with np.load(path, allow_pickle=False) as data:
        return [decode_map(data[f"{prefix}{int(i)}"], float(s)) for i, s in zip(frame["map_index"], frame["map_scale"])]


# ---- the report --------------------------------------------------------------------------------------------------


def _delta_text(value, unit: str) -> str:
    return "" if _missing(value) else f"Δ{unit} {float(value):+.3g}"


def _caption(paired: Paired, row) -> str:
    parts = [str(row["image"]), _delta_text(row["delta_score"], "bits" if paired.score == "total_bits" else "score"),
             _delta_text(row["delta_p"], "p")]
    if row["changed"]:
        parts.append(f"prediction {row['predicted_name_a']} → {row['predicted_name_b']}")
    return " · ".join(p for p in parts if p)


def report_html(paired: Paired) -> bytes:
    """The comparison as one self-contained HTML page (`render.paired.paired_report_html`): the counts and notes,
    the most changed images' difference maps on one scale, the table, per class the counts and mean map."""
    from ..render.paired import paired_report_html, signed_map_png

    label = f"B − A, {paired.unit_a if paired.basis == 'values' else 'share of the map'}"
    top = paired.table.head(TOP_IMAGES)
    cells = [{"image": str(r["image"]), "caption": _caption(paired, r),
              "png": signed_map_png(paired.difference(r), paired.scale, label)} for _, r in top.iterrows()]
    classes = [{"name": str(c["class_name"]), "target": int(c["target"]), "images": int(c["images"]),
                "changed": int(c["changed"]), "mean_delta_p": c["mean_delta_p"],
                "mean_delta_score": c["mean_delta_score"],
                "png": signed_map_png(paired.class_maps[int(c["target"])], paired.class_scale, label)}
               for _, c in paired.classes.iterrows()]
    columns = ["image", "class_name", "changed", "predicted_name_a", "predicted_name_b", "p_a", "p_b", "delta_p",
               "score_a", "score_b", "delta_score"]
    shown = paired.table.head(REPORT_ROWS)[columns]
    rows = shown.assign(changed=np.where(shown["changed"], "yes", "no")).values.tolist()
    return paired_report_html(paired.summary(), cells, classes, columns, rows).encode("utf-8")
