"""A folder run started from the Dataset page: on a background thread, a few images at a time, one per server.

    estimate = time_one_image(shared, "/data/val", ["iba_10"], trust=trust)   # before: how long it will take
    job = start_folder_job(shared, "/data/val", "/data/runs/val2", ["iba_10"], trust=trust, owner=session)
    job_text(job)                                   # "3 / 60 images · … · about 4 min left (measured on …)"

Each batch runs under the shared network's lock; between batches the run lets go of it for a moment
(`YIELD_S`), so a page of another session waiting for the network gets its turn and stays responsive. A run
belongs to the browser session that started it (`owner`): pressing *Start run* again while it goes gives back
that run (its progress, not an error); another session's press is refused politely with its progress
(`FolderRunBusy`). A page's run is for dozens of images on a CPU; `GPU_ROAD` says what to use for thousands.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..budget import Cost, check_budget
from ..errors import UserError
from ..metrics import registry as metric_registry
from ..trust import Trust, check_server_path
from .error_log import error_text

if TYPE_CHECKING:
    import torch

    from ..methods import Method
    from .state import SharedModel

#: Images per batch of the page's background run: fewer than the CLI's (BATCH_IMAGES), so the progress moves every
#: few seconds on a CPU and other pages get the network between batches; a GPU run belongs to the CLI anyway.
PAGE_BATCH_IMAGES = 2
#: Seconds the run waits between two batches with the network's lock released: a page that waits for the lock
#: (another session's attribution) is woken and takes it in that time, instead of the run taking it straight back.
YIELD_S = 0.2
#: The road for many images, said before and while a page's run goes.
GPU_ROAD = ("For thousands of images, run it from the command line on GPUs: `torchrun --nproc-per-node N -m "
            "iba_core attribute FOLDER --out RUN_DIR --methods …` (one process per GPU; the same run folder opens "
            "here).")


class FolderRunBusy(UserError):
    """Another session's folder run is going on this server; the message says how far it is."""


def duration(seconds: float) -> str:
    """A span of time as a person says it: '40 s', '7 min', '2.5 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class FolderJob:
    """A folder run on a background thread: `run_folder` a few images at a time, each batch under the shared
    network's lock (released for `YIELD_S` between batches so other pages get their turn), then the table
    (`finish_run`). The page polls `progress()` and `seconds_per_image()`; `cancel()` stops after the batch
    running. `owner` names the browser session that started it (None: nobody in particular)."""

    def __init__(self, shared: "SharedModel", source: Path, run_dir: Path, methods: list, limit: int | None,
                 batch: int, owner: str | None = None, metrics: tuple[str, ...] = (),
                 prompts: tuple[str, ...] = (), stats_images: str | None = None):
        self.shared, self.source, self.run_dir = shared, source, run_dir
        self.stats_images = stats_images  # the statistics' image folder (`FolderSettings.stats_images`)
        self.prompts = prompts  # a CLIP network's text prompts (`FolderSettings.prompts`); () explains classes
        self.methods, self.limit, self.batch, self.owner = methods, limit, batch, owner
        self.metrics = metrics  # the field's metrics per map (`metrics.yardsticks`), with their default protocol
        self.done, self.total, self.label = 0, 0, "listing the images…"
        self.error: str | None = None
        self.started, self.finished = time.time(), None
        #: (images, seconds) of the last batch done: its pace predicts the rest (the first batch also pays for
        #: one-time work such as feature statistics, so a later batch replaces it).
        self.last_batch: tuple[int, float] | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._work, name="iba-folder-run", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def progress(self) -> tuple[int, int, str]:
        """(images done, images in all, what runs now)."""
        return self.done, self.total, self.label

    def seconds_per_image(self) -> float | None:
        """Seconds per image measured on the last batch done (None before the first batch is done)."""
        if self.last_batch is None or self.last_batch[0] <= 0:
            return None
        images, seconds = self.last_batch
        return seconds / images

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; whether it has."""
        self._thread.join(timeout)
        return not self.running

    def _work(self) -> None:
        from ..runs.folder import finish_run, run_folder
        from ..runs.image_list import list_images
        from ..runs.run_settings import FolderSettings

        try:
            network = self.shared.network
            if self.prompts:  # folder labels name classes, not prompts
                root, items = list_images(self.source, limit=self.limit)
                items = [replace(item, label=None) for item in items]
            else:
                root, items = list_images(self.source, class_index=network.class_index, limit=self.limit,
                                          categories=network.categories)
            self.total = len(items)
            settings = FolderSettings(batch_images=self.batch, metrics=self.metrics, prompts=self.prompts,
                                      stats_images=self.stats_images)
            for start in range(0, len(items), self.batch):
                if self._cancel.is_set():
                    self.label = "stopped"
                    break
                if start:  # let a waiting page take the network before the next batch
                    time.sleep(YIELD_S)
                chunk = items[start:start + self.batch]

                def progress(done: int, total: int, label: str, _start=start, _n=len(chunk)) -> None:
                    self.label = f"images {_start + 1}–{_start + _n}: {label}" if _n > 1 else label

                began = time.monotonic()
                with self.shared.busy():
                    run_folder(network, chunk, self.methods, self.run_dir, settings, root=root, progress=progress,
                               check=start == 0)  # dead writers' files and damaged parts: once per job
                self.last_batch = (len(chunk), time.monotonic() - began)
                self.done = start + len(chunk)
            self.label = "writing the table…"
            finish_run(self.run_dir)
            self.label = "stopped" if self._cancel.is_set() else "finished"
        except Exception as err:  # noqa: BLE001 - told on the page in one sentence; the thread ends
            self.error = error_text(err)  # a bug is logged with its traceback, and said to be one
        finally:
            self.finished = time.time()


_JOB: FolderJob | None = None
_JOB_LOCK = threading.Lock()


def current_job() -> FolderJob | None:
    """The server's folder run (running or the last one), or None."""
    return _JOB


def _check_running(owner: str | None) -> FolderJob | None:
    """The running job when it is `owner`'s (their press shows its progress); raises FolderRunBusy when another
    session's run is going; None when none runs. Called under _JOB_LOCK."""
    if _JOB is None or not _JOB.running:
        return None
    if owner is not None and _JOB.owner == owner:
        return _JOB
    done, total, _ = _JOB.progress()
    far = f"{done} of {total} images" if total else "listing its images"
    # the other run's folder is not named: it is another visitor's, and a path of the server (issue #40)
    raise FolderRunBusy(f"Another folder run is going on this server ({far}); one runs at a time, so please "
                        "start yours when it has finished.")


def checked_methods(shared: "SharedModel", method_keys: Sequence[str], layer: str | None) -> list["Method"]:
    """The methods (a bottleneck method at `layer`), each checked to run on the shared network."""
    from ..methods import get_method

    if not method_keys:
        raise UserError("Choose at least one attribution method.")
    methods = []
    for key in method_keys:
        method = get_method(key)
        if "layer" in method.default_settings() and layer:  # a one-layer bottleneck (CoIBA keeps its range)
            method = get_method(key, layer=layer)
        reason = method.available_for(shared.network)
        if reason:
            raise UserError(f"{method.name} cannot run on this network: {reason}")
        methods.append(method)
    return methods


#: The metrics the page offers: the registry's per-map metrics but those that need box files (the pointing game),
#: which the page's form does not take.
PAGE_METRICS = tuple(m.name for m in metric_registry.per_map() if not m.needs_boxes)


def _checked_metrics(metrics: Sequence[str]) -> tuple[str, ...]:
    """The page's metrics, checked (`metrics.yardsticks.check_metrics`); one that needs boxes is refused in words."""
    if not metrics:
        return ()
    from ..metrics.yardsticks import check_metrics

    metrics = check_metrics(metrics)
    boxed = [metric_registry.get(m).title for m in metrics if m not in PAGE_METRICS]
    if boxed:
        raise UserError(f"{boxed[0]} needs the objects' boxes, which a run started here does not take.",
                        app_hint="Leave out pointing here; the command line's folder run takes a boxes folder "
                                 "(docs/guide/cli/attribute.md, \"A whole folder\").")
    return metrics


def metric_cost_text(network, metrics: Sequence[str]) -> str:
    """What the chosen metrics add, in forward passes per map on this network's crop (RISE's protocol, ROAD's nine
    percentages), before *Estimate time* measures it; "" when none is chosen."""
    metrics = _checked_metrics(metrics)
    if not metrics:
        return ""
    from ..metrics.yardsticks import forward_passes

    crop, _ = metric_registry.crop_of(network) or (224, 224)
    passes = forward_passes(metrics, int(crop) * int(crop))
    return (f"The metrics add about {passes} forward passes per image and method ({', '.join(metrics)} on the "
            f"{crop} × {crop} crop, the RISE protocol); “Estimate time” measures what they cost here.")


def checked_image_folder(source: str, trust: Trust) -> Path:
    """The image folder a visitor typed, resolved under the trust rules (a folder run's, a self-test's)."""
    if not (source or "").strip():
        raise UserError("Type the image folder on the server to run on.")
    folder = check_server_path(Path(source.strip()).expanduser(), trust, what="image folder", folder=True)
    if not folder.is_dir():
        raise UserError(f"The image folder {folder} does not exist.")
    return folder


def stats_images_folder(text: str | None, trust: Trust) -> str | None:
    """The folder a run's feature statistics are to come from, typed on the page (checked against `trust`: a visitor
    names only folders under the allowed ones), or None when left empty (the network's own: its model card's
    `stats_images`, else the sample photos). Changing it needs no new network, only this field."""
    if not (text or "").strip():
        return None
    folder = check_server_path(Path(text.strip()).expanduser(), trust, what="statistics image folder", folder=True)
    if not folder.is_dir():
        raise UserError(f"The statistics image folder {folder} does not exist.")
    return str(folder)


def start_folder_job(shared: "SharedModel", source: str, run_dir: str, method_keys: Sequence[str],
                     layer: str | None = None, limit: int | None = None, *, trust: Trust,
                     batch: int | None = None, owner: str | None = None, metrics: Sequence[str] = (),
                     prompts: Sequence[str] = (), stats_images: str | None = None,
                     budget: int | None = None) -> FolderJob:
    """Start a folder run of `source` into `run_dir` with the shared network, one per server at a time, and return
    it. While `owner`'s own run goes, that run is returned (nothing new starts); while another session's goes,
    FolderRunBusy says so with its progress. Both paths are checked against `trust`, the methods before any work
    (a bottleneck method at `layer`). metrics: the field's metrics measured for every map (none by default).
    prompts: a CLIP network's text prompts, a row per image × method × prompt (`FolderSettings.prompts`).
    stats_images: the folder the bottlenecks' feature statistics come from (`stats_images_folder`; empty: the
    network's own). budget: the most network passes one batch of the run may cost (`budget`; None: no limit): a run
    takes its turns with the network batch by batch, so a batch is what one visitor's request holds it for."""
    global _JOB
    with _JOB_LOCK:  # the user's own run first: their press shows it, whatever the form holds now
        mine = _check_running(owner)
    if mine is not None:
        return mine
    folder = checked_image_folder(source, trust)
    if not (run_dir or "").strip():
        raise UserError("Type the run folder on the server to write the results to.")
    if limit is not None and limit < 1:
        raise UserError(f"The image limit must be at least 1 (you gave {limit}).")
    out = check_server_path(Path(run_dir.strip()).expanduser(), trust, what="run folder", folder=True)
    methods = checked_methods(shared, method_keys, layer)
    _check_prompts(shared.network, prompts)
    metrics = _checked_metrics(metrics)
    if metrics:  # the page's protocol against the network's crop, before the job starts (`run_folder` asks again)
        from ..metrics.yardsticks import YardstickOptions

        metric_registry.check_on_crop(metrics, YardstickOptions(), metric_registry.crop_of(shared.network))
    per_turn = batch or PAGE_BATCH_IMAGES  # the images a job runs under one hold of the network
    check_budget(image_cost(shared.network, methods, metrics, prompts).times(per_turn), budget,
                 f"One batch of {per_turn} images of this run" if per_turn > 1 else "One image of this run",
                 "choose fewer methods or metrics")
    stats_images = stats_images_folder(stats_images, trust)
    with _JOB_LOCK:
        mine = _check_running(owner)  # started meanwhile (a second press)
        if mine is not None:
            return mine
        out.mkdir(parents=True, exist_ok=True)
        _JOB = FolderJob(shared, folder, out, methods, limit, batch or PAGE_BATCH_IMAGES, owner, metrics,
                         tuple(prompts), stats_images)
        _JOB._thread.start()
        return _JOB


def image_cost(network, methods: Sequence["Method"], metrics: Sequence[str], prompts: Sequence[str] = ()) -> Cost:
    """The network passes one image of a folder run costs: every method's map and the metrics on it, once per
    prompt (a CLIP network) or once (a class)."""
    from ..metrics.yardsticks import forward_passes

    crop, _ = metric_registry.crop_of(network) or (224, 224)
    targets = max(1, len(prompts))
    maps = Cost.of_methods(methods, network, crop, crop, repeat=targets)
    return maps + Cost.part("metrics", targets * len(methods) * forward_passes(metrics, crop * crop))


def _check_prompts(network, prompts: Sequence[str]) -> None:
    """A CLIP model explains text prompts, a classifier classes: one sentence before any work where they do not
    fit (a classifier given prompts: `check_target`'s)."""
    from ..networks.clip_models import is_clip

    if is_clip(network) and not prompts:
        raise UserError("A CLIP model explains text prompts: type at least one (one a line) for the run.")
    if prompts and not is_clip(network):
        from ..methods.base import PROMPTS_NEED_CLIP

        raise UserError(PROMPTS_NEED_CLIP)


# ---- how long it takes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEstimate:
    """One image timed with the chosen methods, before a run: `seconds` per image (of the methods timed), the
    folder's `images`, and the methods not timed because their feature statistics are still to be estimated."""

    seconds: float
    images: int
    methods: tuple[str, ...]
    untimed: tuple[str, ...] = ()
    #: For the methods whose statistics are still to be estimated: their samples, and the seconds of one forward
    #: pass timed here (the statistics take about one pass per sample, once).
    stats_samples: int = 0
    forward_seconds: float = 0.0
    #: of `seconds`, those the field's metrics took (measured on the same image, for each method timed)
    metric_seconds: float = 0.0
    metrics: tuple[str, ...] = ()
    #: Of `methods`, those timed on a stand-in prior (`_stand_in`): their statistics are still to be estimated
    stand_in: tuple[str, ...] = ()

    @property
    def stats_seconds(self) -> float:
        """About how long the statistics still to be estimated take: one forward pass per sample (0: none)."""
        return self.stats_samples * self.forward_seconds if self.stats_samples and self.forward_seconds > 0 else 0.0

    def text(self) -> str:
        """What the page says before the run: the time per image, for the folder, and what it leaves out."""
        text = (f"Estimate: one image took {self.seconds:.1f} s with {', '.join(self.methods)} here just now, so "
                f"{self.images} image{'s' if self.images != 1 else ''} take about "
                f"{duration(self.seconds * self.images)}") if self.methods else "Estimate: no method could be timed"
        if self.methods and self.metrics:
            text += (f", of which the metrics ({', '.join(self.metrics)}) take {self.metric_seconds:.1f} s per image "
                     f"(about {duration(self.metric_seconds * self.images)} in all)")
        stats = (f"about {duration(self.stats_seconds)} for {self.stats_samples} samples: one forward pass each, "
                 f"{self.forward_seconds:.2f} s here") if self.stats_seconds else ""
        if self.stand_in:
            text += (f"; first, once, the feature statistics of {', '.join(self.stand_in)} are estimated and kept"
                     + (f" ({stats})" if stats else "") + ": until they exist, "
                     + ("its" if len(self.stand_in) == 1 else "their")
                     + " pace was timed with a standard-normal prior in their place")
        if self.untimed:
            text += (f"; not timed: {', '.join(self.untimed)}, whose feature statistics are estimated first, once, "
                     f"then kept{f' ({stats})' if stats and not self.stand_in else ''}, and whose pace the first "
                     "batch measures")
        return text + ". Other work on this machine (other sessions' pages) makes it slower."


def _stand_in(method: "Method") -> "Method | None":
    """A copy of a bottleneck `method` whose statistics are not on disk yet that runs without them, to time its
    pace: the same steps and noisy copies with the standard-normal prior (M2IB's) in place of the estimated one
    (the prior changes the map, not the passes it takes). None for a method that cannot (CoIBA's range)."""
    from ..methods.bottlenecks import PerSampleIBA

    if not isinstance(method, PerSampleIBA):
        return None
    stand_in = method.with_settings(prior="standard_normal")
    stand_in.needs_stats = False  # this copy only: it builds its bottleneck without estimating statistics
    return stand_in


#: Images tried for one that can be timed (a file that cannot be read is skipped, as the run skips it).
TRIED_IMAGES = 20


def _first_usable(network, items: Sequence) -> "torch.Tensor | None":
    """The first of `items` (up to TRIED_IMAGES) that loads and suits the network, preprocessed; else None."""
    pre = network.preprocess
    for item in items[:TRIED_IMAGES]:
        try:
            return pre.normalise(pre.crop(pre.load(item.path)))
        except Exception:  # noqa: BLE001 - the run gives such a file an error row; time one that works
            continue
    return None


def _stats_ready(network, method: "Method") -> bool:
    """Whether the statistics `method` reads (its layer, or each of CoIBA's, images and samples, by the one policy)
    are on disk."""
    from ..feature_stats import find_run_stats
    from .stats_source import method_stats_layers

    s = method.settings
    if s.get("stats") is not None:
        return True
    return all(find_run_stats(network, layer, images=s.get("stats_images"), n=s.get("stats_samples")) is not None
               for layer in method_stats_layers(network, method))


def time_one_image(shared: "SharedModel", source: str, method_keys: Sequence[str], layer: str | None = None,
                   limit: int | None = None, *, trust: Trust, metrics: Sequence[str] = (),
                   prompts: Sequence[str] = (), stats_images: str | None = None,
                   budget: int | None = None) -> RunEstimate:
    """Time the folder's first image with each chosen method (under the network's lock, after each method's
    one-time preparation), and the chosen metrics on each of its maps, for an estimate of the whole run before it
    starts. A method whose feature statistics are not yet on disk is timed with a stand-in prior (`_stand_in`;
    estimating them would take minutes), their cost estimated from one forward pass, or where it cannot be, left out
    and named. prompts: a CLIP model's (one map per prompt: the first one timed, times their number).
    stats_images: the run's statistics folder, as for `start_folder_job`; budget: as there (the timed image is
    refused where the run would be)."""
    from ..runs.image_list import list_images

    folder = checked_image_folder(source, trust)
    from ..runs.rows import for_this_run

    run_stats = stats_images_folder(stats_images, trust)
    methods = [for_this_run(m, run_stats) for m in checked_methods(shared, method_keys, layer)]
    metrics = _checked_metrics(metrics)
    network = shared.network
    _check_prompts(network, prompts)
    check_budget(image_cost(network, methods, metrics, prompts), budget, "One image of this run",
                 "choose fewer methods or metrics")
    _, items = list_images(folder, class_index=network.class_index, limit=limit, categories=network.categories)
    if not items:
        raise UserError(f"The image folder {folder} holds no images (jpg, png, …).")
    x = _first_usable(network, items)
    if x is None:
        raise UserError(f"None of the first {TRIED_IMAGES} images of {folder} could be read for this network, so "
                        "nothing could be timed; the run would give each an error row.")
    with shared.busy():
        scoring = None
        if metrics:
            from ..metrics.common import scoring_model

            scoring = scoring_model(network, "fp32")  # built once, as a run builds it
        target, forward = _first_forward(network, x, prompts)
        timings = _time_methods(network, methods, x, target, scoring, metrics)
    maps = max(len(prompts), 1)  # a map per prompt and method
    return RunEstimate((timings.seconds + timings.metric_seconds) * maps, len(items), tuple(timings.timed),
                       tuple(timings.untimed), timings.samples, forward, timings.metric_seconds * maps, metrics,
                       tuple(timings.stand_ins))


def _first_forward(network, x: "torch.Tensor", prompts: Sequence[str]) -> tuple[int, float]:
    """The target the image is timed for (the first prompt's, else the network's top-1) and the seconds of one
    forward pass (what the statistics still to be estimated cost per sample)."""
    import torch

    target = None
    if prompts:  # the first prompt's map (its index, added to the network if new: before its outputs exist)
        from ..methods.base import check_target
        from ..methods.targets import PromptTarget

        target = check_target(network, PromptTarget(prompts[0])).index
    device = next(network.model.parameters()).device
    with torch.no_grad():
        began = time.perf_counter()
        outputs = network.model(x.to(device))
        forward = time.perf_counter() - began
    return (int(outputs.argmax()) if target is None else target), forward


@dataclass
class _Timings:
    """What timing one image gave: the methods timed (those on a stand-in prior named too) and left out, the
    seconds of their maps and of the metrics on them, and the most statistics samples a method still needs."""

    timed: list[str] = field(default_factory=list)
    untimed: list[str] = field(default_factory=list)
    stand_ins: list[str] = field(default_factory=list)
    seconds: float = 0.0
    metric_seconds: float = 0.0
    samples: int = 0


def _time_methods(network, methods: Sequence["Method"], x: "torch.Tensor", target: int, scoring,
                  metrics: Sequence[str]) -> _Timings:
    """Time each method's map of `x` (and the metrics on it, with a `scoring` model); a method whose statistics are
    not on disk yet on its stand-in prior, or left out where it has none. Runs under the network's lock."""
    from ..feature_stats import run_stats_source

    timings = _Timings()
    device = next(network.model.parameters()).device
    for method in methods:
        name, timed_as = method.name, method
        if method.needs_stats and not _stats_ready(network, method):
            st = method.settings
            timings.samples = max(timings.samples,
                                  run_stats_source(network, st.get("stats_images"), st.get("stats_samples"))[1])
            timed_as = _stand_in(method)  # estimating its statistics here would take minutes
            if timed_as is None:
                timings.untimed.append(name)
                continue
            timings.stand_ins.append(name)
        timed_as.prepare(network)  # one-time work (a readout, patterns) is not the pace of the run
        began = time.perf_counter()
        made = timed_as.attribute_batch(network, x, [target])
        timings.seconds += time.perf_counter() - began
        timings.timed.append(name)
        if scoring is not None:
            from ..heads import head_of
            from ..metrics.yardsticks import yardstick_columns

            began = time.perf_counter()
            yardstick_columns(scoring, x.to(device), made[0].values, target, metrics, head=head_of(network))
            timings.metric_seconds += time.perf_counter() - began
    return timings


def job_text(job: FolderJob) -> str:
    """The job's progress as one line: 'N / M images · label · S s', with the time left at the pace of the last
    batch once one is done."""
    done, total, label = job.progress()
    seconds = (job.finished or time.time()) - job.started
    pace = job.seconds_per_image()
    left = ""
    if pace is not None and 0 < done < total and not job.finished:
        left = f" · about {duration(pace * (total - done))} left ({pace:.1f} s per image, measured on the last batch)"
    return f"{done} / {total} images · {label} · {duration(seconds)}{left}"


__all__ = ["FolderJob", "FolderRunBusy", "GPU_ROAD", "PAGE_BATCH_IMAGES", "PAGE_METRICS", "RunEstimate", "YIELD_S",
           "current_job", "duration", "job_text", "metric_cost_text", "start_folder_job", "time_one_image"]
