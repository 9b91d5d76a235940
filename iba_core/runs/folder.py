"""The folder run: every image of a folder (or of a list of images) × the chosen methods, batched, resumable,
sharded across torchrun ranks.

    root, items = list_images("val/", labels=None, class_index=network.class_index)
    run_folder(network, items, [get_method("iba_10")], "runs/val", FolderSettings(), root=root)
    finish_run("runs/val")                       # writes the table, with distance_to_class_mean
    open_run("runs/val").table

The run's settings and identity are in `run_settings`, the images in `image_list`, how a chunk becomes rows in
`rows`, the metrics per map in `metric_columns`; this module is the loop. `method.prepare` runs first, so missing
statistics or checkpoints stop the run before any image. Rows go to the run folder in parts (`store.PartWriter`),
also when the run is interrupted (Ctrl-C); a rerun skips every (image, method) that has a row (error rows too,
unless `FolderSettings.retry_errors`), after moving damaged parts aside so their rows are done again
(`checks.heal`). Each image is claimed before its work (`claims.py`): two runs into one folder share its images,
each computed once. A rerun that adds metrics measures them for the rows already there first
(`_add_metrics`), as it measures again a metric that failed on a stored map (the row's `metric_errors`).

Under torchrun (RANK / WORLD_SIZE) rank r takes every WORLD_SIZE-th image (`metrics.results.shard`) and writes
its own parts; `finish_run` meets the ranks at a barrier and rank 0 writes the table.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from ..image_folders import ImageItem
from ..methods import Method
from ..methods.base import device_of
from ..progress import ProgressFn
from ..ranks import meet_ranks, shard
from .checks import heal
from .claims import Claims
from .metric_columns import Yardsticks
from .measures import NO_BOX_FILE, box_skip_reason
from .rows import (Loaded, Prompts, checked_prompts, chunk_rows, error_text, for_this_run, load_image,
                   network_target)
from .run_settings import REPLACED, FolderSettings, RunSummary, check_yardsticks, run_identity
from .store import PartWriter, done_pairs, part_names, start_run, unmeasured
from .tables import write_table


#: Seconds between two looks at images another live writer holds (its claims go when its part is written).
CLAIM_POLL_SECONDS = 1.0


def _grab(pending: list, size: int, claims: Claims, deferred: list):
    """Chunks of up to `size` (item, methods) of `pending` that this process could claim; the others (another live
    writer holds them) go to `deferred`. Claims are taken as chunks are asked for, not ahead of the work."""
    chunk = []
    for entry in pending:
        if claims.take(entry[0].key):
            chunk.append(entry)
            if len(chunk) == size:
                yield chunk
                chunk = []
        else:
            deferred.append(entry)
    if chunk:
        yield chunk


def _claimed_chunks(todo: list, size: int, claims: Claims, writer: PartWriter, left: Callable[[list], list],
                    summary: RunSummary):
    """The chunks of `todo` this process works on: each image claimed first, pairs written meanwhile by another
    process left out (`left`); images another live writer holds come last, once it lets them go. After each chunk
    the claims of the images whose rows are in a written part are released (a claim outlives the work until its
    rows are committed, so a second writer never redoes them)."""
    unwritten: list[str] = []  # claimed images whose rows wait in the writer
    pending = todo
    while pending:
        deferred: list = []
        worked = False
        for claimed in _grab(pending, size, claims, deferred):
            chunk = left(claimed)  # done by another writer between our first look and our claim
            claims.release(item.key for item, _ in claimed if all(item is not c[0] for c in chunk))
            summary.skipped += len(claimed) - len(chunk)
            if not chunk:
                continue
            worked = True
            parts_before = writer.parts
            yield chunk
            keys = [item.key for item, _ in chunk]
            if not writer.rows:  # the chunk ended with a part: every row so far is written
                claims.release(unwritten + keys)
                unwritten = []
            elif writer.parts != parts_before:  # a part was written within the chunk: the earlier chunks' rows
                claims.release(unwritten)
                unwritten = keys
            else:
                unwritten += keys
            claims.refresh()
        if deferred:  # before waiting for another writer, write what waits here and let its images go: else two
            writer.flush()  # writers could each wait for the other's claims forever
            claims.release(unwritten)
            unwritten = []
            if not worked:
                time.sleep(CLAIM_POLL_SECONDS)
        pending = left(deferred)
        summary.skipped += len(deferred) - len(pending)  # written by another process meanwhile


def _checked_methods(network, methods: Sequence[Method], settings: FolderSettings) -> list[Method]:
    """The run's methods, each once, after checking that they and the batch size can run here (UserError)."""
    if settings.batch_images < 1:
        raise UserError(f"Images per batch must be at least 1 (you gave {settings.batch_images}).")
    methods = list(dict((m.key, m) for m in methods).values())
    if not methods:
        raise UserError("Choose at least one attribution method.")
    for method in methods:
        reason = method.available_for(network)
        if reason:
            raise UserError(f"{method.name} cannot run here: {reason}")
    return methods


def _add_metrics(network, run_dir: Path, mine: Sequence[ImageItem], settings: FolderSettings,
                 yardsticks: Yardsticks, writer: PartWriter, summary: RunSummary,
                 progress: ProgressFn | None) -> None:
    """Measure the metrics a run folder's earlier rows lack (a rerun that adds metrics, `check_yardsticks`), for
    this rank's images: each row's image is loaded again and its map read as stored, the missing metrics measured
    as a new run measures them, and the row written again with them (a new part; the table keeps the latest row)."""
    from .tables import open_run

    run = open_run(run_dir)
    keys = {item.key: item for item in mine}
    rows = run.table[run.table["error"].isna() & run.table["image"].isin(list(keys))]
    wanted = set(yardsticks.metrics)
    lacking = [(i, [m for m in yardsticks.metrics if m not in set(str(had or "").split())])
               for i, had in zip(rows.index, rows["metrics"].to_numpy(dtype=object, na_value=None))
               if not wanted <= set(str(had or "").split())]
    device = device_of(network)
    loaded: dict[str, Loaded] = {}
    for done, (index, missing) in enumerate(lacking):
        row = run.table.loc[index]
        image, method = str(row["image"]), str(row["method"])
        if image not in loaded:
            # rows come by image: one kept
            loaded = {image: load_image(network, keys[image], [], settings.boxes, run_dir)}

        def said(metric: str) -> None:
            if progress is not None:
                progress(done, len(lacking), f"adding {metric} · {row['method_name']} · {image}")

        b = loaded[image]
        try:
            if b.error is not None:  # the image changed since (or went)
                raise UserError(b.error)
            values = run.heatmap(row)
            columns = yardsticks.columns(b.x.to(device), values, network_target(network, row), b.box, image,
                                         method, said, missing)
        except Exception as err:  # noqa: BLE001 - the row stays as it was; the next rerun tries again
            summary.errors += 1
            if len(summary.error_examples) < 3:
                said_err = error_text(err, run_dir, f"image {image} · {method}")
                summary.error_examples.append(f"{image}: the metrics could not be added ({said_err})")
            continue
        kept = {k: v for k, v in row.to_dict().items()
                if k not in ("map_file", "map_index", "map_scale", "height", "width", "rank", "finished")}
        again = {**kept, **columns, "box_skipped": b.box_skipped}
        writer.add(again, values)
        summary.measured += 1
        _count_metric_errors(again, summary)
        _count_box_skip(again, summary)
    writer.flush()


@dataclass
class _Started:
    """A run folder made ready for this run: the checked methods and settings, the run's prompts, the damaged parts
    moved aside, and whether this run adds metrics the folder's earlier rows lack."""

    methods: list[Method]
    settings: FolderSettings
    prompts: Prompts | None
    damaged: list[str]
    adding: bool


def _start(network, items: Sequence[ImageItem], methods: Sequence[Method], run_dir: Path, settings: FolderSettings,
           root: str | os.PathLike | None, check: bool) -> _Started:
    """Check the methods, prompts and metrics, record the run's identity in run.json (a folder made another way is
    refused) and heal damaged parts: all before any image."""
    methods = _checked_methods(network, methods, settings)
    settings = replace(settings, prompts=checked_prompts(network, settings))
    if root is None:
        root = Path(items[0].path).parent if items else Path(".")
    if settings.metrics:
        from ..metrics.registry import check_on_crop, crop_of
        from ..metrics.yardsticks import YardstickOptions, check_metrics

        settings = replace(settings, metrics=check_metrics(settings.metrics))
        # a setting the crop cannot take (a blur kernel wider than it, …) fails every image: refused before any
        check_on_crop(settings.metrics, settings.yardsticks or YardstickOptions(), crop_of(network))
    change = check_yardsticks(run_dir, settings)  # before the generic check: a sentence that says what to give
    if change == REPLACED:  # a metric measured another way where every try failed: its failed rows done again
        settings = replace(settings, retry_errors=True)  # (rows of an older version lost their map with it)
    info = start_run(run_dir, run_identity(network, methods, settings, root))
    # the run's prompts (its own first: the rows' targets index them), each resolved on the network once
    prompts = Prompts.of_run(network, info["prompts"]) if settings.prompts else None
    damaged = [f"{d.part} ({d.reason})" for d in heal(run_dir)] if check else []
    return _Started(methods, settings, prompts, damaged, bool(change))


class _Left:
    """What is left to do of (image, tasks) entries, by the parts written so far (read once each)."""

    def __init__(self, run_dir: Path, retry_errors: bool):
        self.run_dir, self.errors = run_dir, not retry_errors
        self.seen: set[str] = set()
        self.done: set[tuple[str, str, str]] = set()

    def __call__(self, entries: list) -> list:
        """`entries` less the tasks in parts written since the last look (by this or another process)."""
        new = [n for n in part_names(self.run_dir) if n not in self.seen]
        self.seen.update(new)
        self.done.update(done_pairs(self.run_dir, errors=self.errors, names=new))
        out = [(item, [(m, p) for m, p in pending if (item.key, m.key, p) not in self.done])
               for item, pending in entries]
        return [(item, pending) for item, pending in out if pending]


def _ready_runners(network, started: _Started, todo: list) -> dict[str, Method]:
    """Each method as this run runs it, prepared where it has work left."""
    runners = {m.key: for_this_run(m, started.settings.stats_images) for m in started.methods}
    for key in dict.fromkeys(m.key for _, pending in todo for m, _ in pending):
        runners[key].prepare(network)  # statistics, a checkpoint: a problem stops the run before any image
    return runners


def _keep(writer: PartWriter, summary: RunSummary, row: dict, values: np.ndarray | None) -> None:
    """Queue a row for the run folder and count it (an error row with an example or three)."""
    writer.add(row, values)
    summary.rows += 1
    if row.get("error"):
        summary.errors += 1
        if len(summary.error_examples) < 3:
            summary.error_examples.append(f"{row['image']}: {row['error']}")
    _count_metric_errors(row, summary)
    _count_box_skip(row, summary)


#: Bad box files named one by one on the command line; the rest are counted.
BOX_WARNINGS = 5


def _count_box_skip(row: dict, summary: RunSummary) -> None:
    """Count an image scored without a box though the run has boxes, once, by reason; a bad box file (not a
    missing one) named in a warning."""
    reason = box_skip_reason(row.get("box_skipped"))
    if reason is None or row["image"] in summary.box_images:
        return
    summary.box_images.add(row["image"])
    summary.box_skipped[reason] = summary.box_skipped.get(reason, 0) + 1
    if reason != NO_BOX_FILE and len(summary.box_warnings) < BOX_WARNINGS:
        summary.box_warnings.append(f"{row['image']} is scored without a box: {row['box_skipped']}")


def _count_metric_errors(row: dict, summary: RunSummary) -> None:
    """Count a map a metric failed on (kept, the metric's columns blank), with an example or three."""
    if row.get("metric_errors"):
        summary.metric_failures += 1
        if len(summary.error_examples) < 3:
            summary.error_examples.append(f"{row['image']} · {row['method']}: the map is kept, but "
                                          f"{row['metric_errors']} (a rerun measures it again)")


def _work(network, todo: list, started: _Started, runners: dict[str, Method], run_dir: Path,
          yardsticks: Yardsticks | None, writer: PartWriter, left: _Left, summary: RunSummary,
          progress: ProgressFn | None) -> None:
    """Make and write the rows of `todo`, chunk by claimed chunk."""
    settings = started.settings
    device = device_of(network)
    claims = Claims(run_dir)
    finished = 0

    def told(label: str) -> None:  # progress within a chunk: the images finished before it
        if progress is not None:
            progress(finished, len(todo), label)

    try:
        for chunk in _claimed_chunks(todo, settings.batch_images, claims, writer, left, summary):
            for row, values in chunk_rows(network, chunk, started.methods, runners, settings, device, told, run_dir,
                                          yardsticks, started.prompts):
                _keep(writer, summary, row, values)
            finished += len(chunk)
            if progress is not None:
                progress(finished, len(todo), chunk[-1][0].key)
    finally:  # also on Ctrl-C: what is finished is kept, then the claims go
        try:
            writer.flush()
        finally:
            claims.release_all()
        summary.parts = writer.parts


def run_folder(
    network,
    items: Sequence[ImageItem],
    methods: Sequence[Method],
    run_dir: str | os.PathLike,
    settings: FolderSettings | None = None,
    *,
    root: str | os.PathLike | None = None,
    rank: int = 0,
    world: int = 1,
    progress: ProgressFn | None = None,
    check: bool = True,
) -> RunSummary:
    """Attribute this rank's share of `items` with every method not done yet, appending rows to `run_dir`.

    root: the folder the items' keys are relative to (recorded in run.json; default: the first item's folder).
    A run folder made with another network, weights, layer or settings is refused (`store.RunFolderError`)
    before any work. check: first remove dead writers' temp files and move damaged parts aside (`checks.heal`), so
    their rows are done again (a caller running one folder in many small calls checks on the first).
    Each image is claimed before its work (`claims.Claims`): a second process writing into the same folder takes
    only the images nobody holds, and waits for the rest to be written by their holder (or redoes them if it died).
    progress(done, total, label) counts this rank's images with work left.
    """
    run_dir = Path(run_dir)
    started = _start(network, items, methods, run_dir, settings or FolderSettings(), root, check)
    settings = started.settings
    left = _Left(run_dir, settings.retry_errors)
    mine = shard(list(items), rank, world)
    tasks = [(m, p) for m in started.methods for p in settings.prompts or ("",)]
    todo = left([(item, tasks) for item in mine])
    summary = RunSummary(images=len(mine), skipped=len(mine) - len(todo), damaged=started.damaged)
    runners = _ready_runners(network, started, todo)
    # rows made before without some of the metrics: just added to the run, or left by an interrupted rerun
    adding = bool(settings.metrics) and (started.adding
                                         or unmeasured(run_dir, settings.metrics, (i.key for i in mine)) > 0)
    yardsticks = Yardsticks(network, settings, run_dir) if settings.metrics and (todo or adding) else None
    writer = PartWriter(run_dir, rank, settings.part_rows, settings.part_seconds)
    if adding and yardsticks is not None:
        try:
            _add_metrics(network, run_dir, mine, settings, yardsticks, writer, summary, progress)
        finally:
            writer.flush()
    _work(network, todo, started, runners, run_dir, yardsticks, writer, left, summary, progress)
    return summary


def finish_run(run_dir: str | os.PathLike, rank: int = 0, world: int = 1):
    """After this rank's share: meet the other ranks (torchrun) and write the table (results.parquet) on rank 0;
    returns the table, or None on the other ranks. Without a rendezvous every rank writes it when done (the last
    one holds every part; `open_run` rebuilds a table that misses parts)."""
    met = meet_ranks(world)
    if met and rank != 0:
        print(f"rank {rank}: shard finished; rank 0 writes the table", file=sys.stderr)
        return None
    return write_table(run_dir)


__all__ = ["finish_run", "run_folder"]
