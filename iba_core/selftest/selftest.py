"""The planted-mark self-test: does a model react to a cue planted on a folder's images, and would each attribution
method's maps show it?

    mark = make_mark("patch", where="top-left", size=0.125)
    result = self_test(network, "val/", mark, [get_method("iba_10"), get_method("saliency")], "selftest/")
    result.reaction.verdict, result.ranking, result.maps      # plain data; the files: selftest.json + Parquet

What it does. Each image (or a seeded `sample` of them) is copied clean and marked (`copies`), at the network's
resize geometry, into OUT/clean and OUT/marked with the same relative paths. One network pass per copy gives the
model's reaction (`scores.reaction_of`). Each copy folder is then one folder run (`runs.run_folder`, resumable) into
OUT/run-clean and OUT/run-marked, explaining each image's own class: its label (class folders, a label file), else
the clean copy's top-1 class, the same on both copies so the maps of a pair explain one class. The class the mark
pushes toward is the class whose mean probability rises most on the marked copies; where it rises by
`scores.REACTS_P` or more and is not already every image's own class, a second pair of runs explains it on every
image (`FolderSettings(target=…)`) into OUT/run-clean-toward and OUT/run-marked-toward: there the mark adds
evidence, so that pair ranks the methods. A rerun skips the copies and the rows already made.

The files: OUT/selftest.json (`SelfTest.summary()`), OUT/selftest_images.parquet (per image: the copies' key, own
class, predictions and probabilities), OUT/selftest_maps.parquet (per image × method × target: the share of each
map's mass inside the mark's box, of the difference map's), OUT/mark.json (the request, and the class pushed toward
once known), OUT/mark_layer.png (the mark on the crop), and the paired view of each pair of runs per method
(`runs.paired`: the marked run against the clean one, image by image, with its HTML report) in
OUT/paired/<target>/<method>/. OUT may not be FOLDER or lie inside it (`check_folders`).
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..cache import write_atomic
from ..errors import UserError
from ..image_folders import ImageItem
from ..jsonable import jsonable
from ..progress import ProgressFn
from . import copies as cp
from .marks import Mark, box_region, place_mark
from .scores import (REACTS_P, MethodScore, Reaction, localisation_ratio, mass_auroc, mass_share, rank_methods,
                     reaction_of, region_weights)

if TYPE_CHECKING:
    import pandas as pd

    from ..methods import Method
    from ..runs import FolderSettings
    from ..runs.paired import Paired

RESULTS_FILE = "selftest.json"
#: The paired view's folder: OUT/paired/<target>/<method>/ (`runs.paired.write_paired`'s files, its HTML report).
PAIRED_DIR = "paired"
IMAGES_FILE = "selftest_images.parquet"
MAPS_FILE = "selftest_maps.parquet"
#: The run folders of each target: (clean copies' run, marked copies' run).
RUNS = {"own": ("run-clean", "run-marked"), "toward": ("run-clean-toward", "run-marked-toward")}


@dataclass
class SelfTest:
    """A self-test's results, as plain data for a page or a script.

    out_dir: its folder; network: the network's key; mark: the mark as asked (`Mark.identity`); box: the mark's box
    on the crop (x0, y0, x1, y1, ends exclusive) and region_share the share of the crop the measures score: the
    box's (a border's frame's pixels, its box being the whole crop; the localisation ratio's chance level is 1, its
    ceiling 1 / region_share); crop: the crop's side; sample: images used (readable), of how many, the seed (None:
    all); reaction: the model's (`scores.Reaction`, with the verdict); scores: per method and target
    (`scores.MethodScore`); ranking: method keys best first ([] when the model hardly reacts); images and maps: the
    two tables; runs: target → (clean run folder, marked run folder); new_rows: rows each run wrote in this call (0 on a rerun of a finished test); unreadable: images left out (key: why);
    paired_dirs: target → method → the paired view's folder inside out_dir (`paired` gives it as data).
    """

    out_dir: Path
    network: str
    mark: dict
    box: tuple[int, int, int, int]
    region_share: float
    crop: int
    sample: dict
    reaction: Reaction
    scores: list[MethodScore]
    ranking: list[str]
    images: "pd.DataFrame"
    maps: "pd.DataFrame"
    runs: dict[str, tuple[str, str]]
    new_rows: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    paired_dirs: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def caution(self) -> str | None:
        """The caution when the model hardly reacts (a map then has nothing to show); None when it reacts."""
        return None if self.reaction.reacts else self.reaction.verdict

    @property
    def clean_dir(self) -> Path:
        return self.out_dir / cp.CLEAN

    @property
    def marked_dir(self) -> Path:
        return self.out_dir / cp.MARKED

    def region(self) -> np.ndarray:
        """(crop, crop) bool: the crop pixels the measures score: the mark's box, or a border's frame (read from
        OUT/mark_layer.png)."""
        from PIL import Image

        frame = None
        if self.mark.get("kind") == "border":
            with Image.open(self.out_dir / cp.LAYER_FILE) as layer:
                frame = np.asarray(layer.convert("RGBA"))[..., 3] > 0
        return box_region(self.crop, self.box, frame)

    def paired(self, method: str, target: str = "own") -> "Paired":
        """The paired view of the two copy folders (`runs.paired.pair_runs`: the marked run against the clean one,
        image by image) for a method and target ("own" or "toward"); written in `paired_dirs[target][method]`."""
        from ..runs.paired import pair_runs

        if target not in self.runs:
            raise UserError(f"This self-test has no runs for the target {target!r}; it has {', '.join(self.runs)}.")
        clean, marked = self.runs[target]
        return pair_runs(self.out_dir / clean, self.out_dir / marked, method, method)

    def summary(self) -> dict:
        """Everything but the tables, as JSON data (OUT/selftest.json)."""
        return jsonable({
            "out_dir": str(self.out_dir), "network": self.network, "mark": self.mark, "box": list(self.box),
            "region_share": self.region_share, "crop": self.crop, "sample": self.sample,
            "reaction": self.reaction.as_dict(), "verdict": self.reaction.verdict, "caution": self.caution,
            "scores": [s.as_dict() for s in self.scores], "ranking": self.ranking,
            "runs": {k: list(v) for k, v in self.runs.items()}, "new_rows": self.new_rows,
            "unreadable": self.unreadable, "paired_dirs": self.paired_dirs,
        })


def _check_network(network, settings: "FolderSettings") -> None:
    """The self-test plants marks on photos and explains classes: a UserError for a CLIP model, a network of more
    than three bands, prompts or a fixed target in the settings."""
    from ..networks.clip_models import is_clip

    if is_clip(network) or settings.prompts:
        raise UserError("The self-test explains classes; a CLIP model's text prompts are not supported yet.")
    if network.preprocess.channels > 3:
        raise UserError(f"The self-test plants marks on photos; this network reads {network.preprocess.channels} "
                        "bands.")
    if settings.target is not None:
        raise UserError("The self-test chooses the classes it explains (each image's own, and the one the mark "
                        "pushes toward); leave the target out.")


#: The folders a self-test writes inside its out folder: the copies, the runs, the paired views.
OWN_FOLDERS = (cp.CLEAN, cp.MARKED, *RUNS["own"], *RUNS["toward"], PAIRED_DIR)


def check_folders(folder: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Refuse an out folder that is the image folder or lies inside it (its copies and reports would be listed as
    images, and a rerun would find other images), and an image folder inside one of the folders the test writes
    (OWN_FOLDERS); an image folder elsewhere inside the out folder is fine: the test writes nothing there."""
    source, out = Path(folder).expanduser().resolve(), Path(out_dir).expanduser().resolve()
    if out == source or source in out.parents:
        raise UserError(f"The self-test's folder {out_dir} is the image folder {folder} or inside it, where its copies "
                        "and reports would be taken for images; give a folder outside it.")
    inside = next((name for name in OWN_FOLDERS if source == out / name or out / name in source.parents), None)
    if inside is not None:
        raise UserError(f"The image folder {folder} lies in {inside}/ of the self-test's folder {out_dir}, which the "
                        "test writes itself; give images from another folder.")


def _run_pair(network, keys: Sequence[str], own: Sequence[int], methods, out_dir: Path, target: str,
              settings: "FolderSettings", progress: ProgressFn | None) -> dict[str, int]:
    """The two folder runs of a target (clean and marked copies), each resumable; rows written per run."""
    from ..runs import finish_run, run_folder

    written = {}
    for side, run_name in zip((cp.CLEAN, cp.MARKED), RUNS[target]):
        root = out_dir / side
        items = [ImageItem(key, root / key, int(label)) for key, label in zip(keys, own)]

        def told(done: int, total: int, label: str = "", _run=run_name) -> None:
            if progress is not None:
                progress(done, total, f"{_run} · {label}")

        summary = run_folder(network, items, methods, out_dir / run_name, settings, root=root, progress=told)
        finish_run(out_dir / run_name)
        written[run_name] = summary.rows
    return written


def _method_scores(out_dir: Path, target: str, keys: Sequence[str], region: np.ndarray,
                   methods: Sequence[str]) -> tuple[list, list[dict]]:
    """Per method of `methods` in a target's pair of runs: its `MethodScore` and its rows of the maps table (one per
    image with a map on both copies; a method an earlier call added to the runs is left out)."""
    from ..runs import open_run

    clean_run, marked_run = (open_run(out_dir / name) for name in RUNS[target])
    good = {name: run.table[run.table["error"].isna()].set_index(["method", "image"])
            for name, run in zip(RUNS[target], (clean_run, marked_run))}
    clean_rows, marked_rows = good[RUNS[target][0]], good[RUNS[target][1]]
    scores, rows = [], []
    for method in [m for m in dict.fromkeys(clean_rows.index.get_level_values(0)) if m in methods]:
        pairs = [k for k in keys if (method, k) in clean_rows.index and (method, k) in marked_rows.index]
        clean_maps, marked_maps, mine = [], [], []
        for key in pairs:
            c_row, m_row = clean_rows.loc[(method, key)], marked_rows.loc[(method, key)]
            c_map, m_map = clean_run.heatmap(c_row), marked_run.heatmap(m_row)
            weights = region_weights(region, c_map.shape)
            clean_maps.append(c_map)
            marked_maps.append(m_map)
            mine.append({"copy": key, "method": method, "method_name": str(c_row["method_name"]), "target": target,
                         "class": int(c_row["target"]), "class_name": str(c_row["class_name"]),
                         "p_clean": float(c_row["p_target"]), "p_marked": float(m_row["p_target"]),
                         "share_clean": mass_share(c_map, weights), "share_marked": mass_share(m_map, weights),
                         "difference_share": mass_share(m_map.astype(np.float64) - c_map, weights)})
        if not mine:
            continue
        scores.append(MethodScore(
            method=method, name=mine[0]["method_name"], target=target, images=len(mine),
            localisation_ratio=localisation_ratio(clean_maps, marked_maps, region),
            auroc=mass_auroc([r["share_clean"] for r in mine], [r["share_marked"] for r in mine]),
            share_clean=float(np.mean([r["share_clean"] for r in mine])),
            share_marked=float(np.mean([r["share_marked"] for r in mine])),
            best_ratio=float(1 / region.mean())))
        rows += mine
    return scores, rows


def _images_table(copies: cp.Copies, own: np.ndarray, p_clean: np.ndarray, p_marked: np.ndarray,
                  reaction: Reaction, network) -> "pd.DataFrame":
    """Per image: its key, its copies' key, own class, both predictions, p(own) and p(toward) on each copy."""
    import pandas as pd

    rows = np.arange(len(own))
    toward = reaction.toward
    return pd.DataFrame({
        "image": [item.key for item in copies.items], "copy": copies.keys, "own": own.astype(int),
        "own_name": [network.class_name(int(c)) for c in own],
        "predicted_clean": p_clean.argmax(1), "predicted_marked": p_marked.argmax(1),
        "changed": p_clean.argmax(1) != p_marked.argmax(1),
        "p_own_clean": p_clean[rows, own], "p_own_marked": p_marked[rows, own],
        "p_toward_clean": p_clean[:, toward], "p_toward_marked": p_marked[:, toward],
    })


def _write_paired(out_dir: Path, scores: Sequence[MethodScore]) -> dict[str, dict[str, str]]:
    """The paired view (item 1 of issue #42) of each target's two runs, per method, into OUT/paired/<target>/<method>/:
    the marked run against the clean one, image by image; {target: {method: folder}}."""
    from ..runs.paired import pair_runs, write_paired

    written: dict[str, dict[str, str]] = {}
    for score in scores:
        clean, marked = RUNS[score.target]
        folder = out_dir / PAIRED_DIR / score.target / score.method
        write_paired(pair_runs(out_dir / clean, out_dir / marked, score.method, score.method), folder)
        written.setdefault(score.target, {})[score.method] = str(folder.relative_to(out_dir))
    return written


def _write_parquet(path: Path, frame: "pd.DataFrame") -> None:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    write_atomic(path, lambda tmp: tmp.write_bytes(buffer.getvalue()))


def _write(result: SelfTest) -> None:
    """The results into OUT: selftest.json, selftest_images.parquet, selftest_maps.parquet (atomically)."""
    _write_parquet(result.out_dir / IMAGES_FILE, result.images)
    _write_parquet(result.out_dir / MAPS_FILE, result.maps)
    text = json.dumps(result.summary(), indent=1)
    write_atomic(result.out_dir / RESULTS_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def self_test(network, folder: str | os.PathLike, mark: Mark, methods: Sequence["Method"],
              out_dir: str | os.PathLike, sample: int | None = None, progress: ProgressFn | None = None, *,
              settings: "FolderSettings | None" = None) -> SelfTest:
    """Plant `mark` on the images of `folder` (all, or a seeded `sample` of N), run `methods` on the clean and the
    marked copies (one resumable folder run each, for each image's own class and, where the mark adds evidence, for
    the class it pushes toward), and measure the model's reaction and whether each method's maps show the mark.
    settings: the runs' other settings (statistics images, batch size); their target is the test's to choose.
    Results are written into `out_dir` and returned (`SelfTest`)."""
    import pandas as pd

    from ..runs import FolderSettings, list_images

    settings = settings or FolderSettings()
    _check_network(network, settings)
    check_folders(folder, out_dir)
    out_dir = Path(out_dir).expanduser()
    _, found = list_images(folder, class_index=network.class_index, categories=network.categories)
    items, said = cp.sampled(found, sample)
    placed = place_mark(mark, int(network.preprocess.crop_size))
    cp.check_identity(out_dir, cp.identity(network, mark, items, said))
    cp.save_layer(out_dir, placed)
    copies = cp.make_copies(network, items, placed, out_dir, progress)
    said = {**said, "images": len(copies.items)}  # the images used: the unreadable ones are left out
    p_clean = cp.probabilities(network, out_dir / cp.CLEAN, copies.keys)
    p_marked = cp.probabilities(network, out_dir / cp.MARKED, copies.keys)
    own = np.array([item.label if item.label is not None and 0 <= item.label < p_clean.shape[1] else int(p.argmax())
                    for item, p in zip(copies.items, p_clean)])
    names = [network.class_name(c) for c in range(p_clean.shape[1])]
    reaction = reaction_of(p_clean, p_marked, own, names)
    pushes = reaction.reacts and reaction.toward_rise >= REACTS_P and bool((own != reaction.toward).any())
    if pushes:  # before any run: a toward pair made for another class cannot be resumed
        cp.check_toward(out_dir, reaction.toward, reaction.toward_name)
    new_rows = _run_pair(network, copies.keys, own, methods, out_dir, "own", settings, progress)
    targets = ["own"]
    if pushes:
        toward = replace(settings, target=reaction.toward)
        new_rows.update(_run_pair(network, copies.keys, own, methods, out_dir, "toward", toward, progress))
        targets.append("toward")
    scores, map_rows = [], []
    for target in targets:
        found_scores, rows = _method_scores(out_dir, target, copies.keys, placed.scored, [m.key for m in methods])
        scores += found_scores
        map_rows += rows
    ranking = rank_methods(scores, reaction.reacts)
    images = _images_table(copies, own, p_clean, p_marked, reaction, network)
    maps = pd.DataFrame(map_rows, columns=MAP_COLUMNS)
    maps.insert(0, "image", maps["copy"].map(dict(zip(copies.keys, images["image"]))))
    result = SelfTest(out_dir, network.key, mark.identity(), placed.box, placed.scored_share, placed.crop, said,
                      reaction, scores, ranking, images, maps, {t: RUNS[t] for t in targets}, new_rows,
                      copies.unreadable, _write_paired(out_dir, scores))
    _write(result)
    return result


#: The maps table's columns after "image": the copies' key, the method, the target ("own" or "toward") and its class,
#: p(class) on each copy, the share of each map's positive mass inside the mark, and of the difference map's.
MAP_COLUMNS = ["copy", "method", "method_name", "target", "class", "class_name", "p_clean", "p_marked", "share_clean",
               "share_marked", "difference_share"]


def open_self_test(out_dir: str | os.PathLike) -> SelfTest:
    """A finished self-test read back from its folder (selftest.json and the two tables); a UserError in one
    sentence for a folder without one."""
    import pandas as pd

    out_dir = Path(out_dir).expanduser()
    try:
        data = json.loads((out_dir / RESULTS_FILE).read_text(encoding="utf-8"))
        images, maps = pd.read_parquet(out_dir / IMAGES_FILE), pd.read_parquet(out_dir / MAPS_FILE)
    except (OSError, ValueError) as err:
        raise UserError(f"{out_dir} holds no finished self-test ({type(err).__name__}: {err}).") from None
    nan = float("nan")
    reaction = Reaction(**{k: (nan if v is None else v) for k, v in data["reaction"].items()})
    scores = [MethodScore(**{k: (nan if v is None and k != "rank" else v) for k, v in s.items()})
              for s in data["scores"]]
    return SelfTest(out_dir, data["network"], data["mark"], tuple(data["box"]), data["region_share"], data["crop"],
                    data["sample"], reaction, scores, data["ranking"], images, maps,
                    {k: tuple(v) for k, v in data["runs"].items()}, data["new_rows"], data["unreadable"],
                    data.get("paired_dirs", {}))


__all__ = ["IMAGES_FILE", "MAPS_FILE", "MAP_COLUMNS", "OWN_FOLDERS", "PAIRED_DIR", "RESULTS_FILE", "RUNS", "SelfTest",
           "check_folders", "open_self_test", "self_test"]
