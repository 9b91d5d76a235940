"""Concept discovery started from the Dataset page (issue #41): `concepts.find_concepts` on a background thread, one
per server, with its progress, its time estimated before it starts, and Stop.

    estimate = time_one_image(shared, run, settings, trust)    # one image timed: its pace, before it starts
    job = start_concept_job(shared, run, settings, trust, owner=session)
    job.progress()                                              # (done, total, "class-0: activations …")

The job holds the shared network's lock, but at each of its progress steps lets a page of another session that
waits for it go first (`state.sharing`), so other pages stay usable. Stop ends it at its next progress step: the
groups it finished are kept (`find_concepts` resumes: they are skipped next time).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from ..render.text import count_of
from ..runs.tables import Run
from ..trust import Trust, check_server_path
from .error_log import error_text
from .folder_job import duration
from .state import sharing

if TYPE_CHECKING:
    from ..concepts import ConceptSettings
    from .state import SharedModel


class ConceptRunBusy(UserError):
    """Another session's concept discovery is going on this server."""


class ConceptsStopped(BaseException):
    """Raised from the job's progress when Stop was pressed: a BaseException, so a library step that catches and
    reports its own errors (`except Exception`) does not take a Stop for one of them and go on."""


def network_mismatch(network, run: Run) -> str:
    """One sentence when the app's `network` is not the one the run was made with, by name or weights ("" when it
    is): concepts are found in that network's layer, for the maps it made (`concepts.find_concepts` refuses too)."""
    info = run.info
    key, weights = str(getattr(network, "key", "")), str(getattr(network, "weights_id", ""))
    if str(info.get("network")) == key and str(info.get("weights", "")) == weights:
        return ""
    made = f"{info.get('network')}" + (f", weights {info['weights']}" if info.get("weights") else "")
    return (f"The network chosen in the app ({key}, weights {weights}) is not the one this run was made with "
            f"({made}): choose that one in the network menu of “Start a run” to find its concepts.")


class ConceptJob:
    """`find_concepts` on a background thread for one run folder; `progress()` for the page, `cancel()` stops at the
    next progress step, `owner` the browser session that started it."""

    def __init__(self, shared: "SharedModel", run_dir: Path, settings: "ConceptSettings", owner: str | None):
        self.shared, self.run_dir, self.settings, self.owner = shared, Path(run_dir), settings, owner
        self.done, self.total, self.label = 0, 0, "waiting for the network…"
        self.error: str | None = None
        self.started, self.finished = time.time(), None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._work, name="iba-concepts", daemon=True)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopped(self) -> bool:
        return self._cancel.is_set()

    def progress(self) -> tuple[int, int, str]:
        """(steps done, steps in all, what runs now)."""
        return self.done, self.total, self.label

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the job to end; whether it has."""
        self._thread.join(timeout)
        return not self.running

    def _report(self, done: int, total: int, label: str) -> None:
        if self._cancel.is_set():
            raise ConceptsStopped()
        self.done, self.total, self.label = done, total, label

    def _work(self) -> None:
        from ..concepts import find_concepts

        try:
            with self.shared.busy() as network:
                find_concepts(network, self.run_dir, self.settings, progress=sharing(self.shared, self._report))
            self.label = "finished"
        except ConceptsStopped:
            self.label = "stopped (the groups finished are kept)"
        except Exception as err:  # noqa: BLE001 - told on the page in one sentence; the thread ends
            self.error = error_text(err)
        finally:
            self.finished = time.time()

    def text(self) -> str:
        """The job's progress in one line: 'N / M steps · label · S s'."""
        seconds = (self.finished or time.time()) - self.started
        steps = f"{self.done} / {self.total} steps · " if self.total else ""
        return f"{steps}{self.label} · {duration(seconds)}"


_JOB: ConceptJob | None = None
_JOB_LOCK = threading.Lock()


def current_job() -> ConceptJob | None:
    """The server's concept discovery (running or the last one), or None."""
    return _JOB


@dataclass(frozen=True)
class ConceptEstimate:
    """One image of the run timed through concept discovery's network passes, before it starts: `seconds` per image
    and group (reading the layer twice, for the fit and for the measures, and the 2K + 1 passes of the effect at the
    K given, else at the largest K the elbow may choose), the `images` of all groups together (an image is in its
    class's group and in the whole run's), and the groups."""

    seconds: float
    images: int
    groups: int
    k: int
    k_given: bool

    def text(self) -> str:
        """What the form says before it starts."""
        k = f"K = {self.k}" if self.k_given else f"K up to {self.k} (auto)"
        return (f"Estimate: one image took {self.seconds:.3g} s through the layer and the effect's "
                f"{2 * self.k + 1} passes ({k}) here just now, so the {count_of(self.groups, 'group')} "
                f"({self.images} images in all) take about {duration(self.seconds * self.images)}, plus fitting the "
                "concepts of each group (scikit-learn's NMF, not timed here). Other work on this machine makes it "
                "slower.")


def time_one_image(shared: "SharedModel", run: Run, settings: "ConceptSettings", trust: Trust) -> ConceptEstimate:
    """Time the run's first image through concept discovery's passes (`ConceptEstimate`) under the network's lock;
    the run and network checked as `find_concepts` checks them, the image folder against `trust` first."""
    import torch

    from ..concepts.discover import plan
    from ..concepts.layer_pass import LayerPass

    check_server_path(run.source, trust, what="image folder", folder=True)
    network = shared.network
    the_plan = plan(network, run, settings)  # a run of another network, a prompt run, a class it lacks: refused
    first = the_plan.groups[0][2][0]
    pre = network.preprocess
    x = pre.normalise(pre.crop(pre.load(run.image_path(first.row))))
    k = settings.k or settings.k_max
    rows = 2 * k + 1
    with shared.busy():
        lp = LayerPass(network, the_plan.layer)
        lp.read(x)  # once untimed: the first pass pays for one-time work
        began = time.perf_counter()
        read = lp.read(x)
        reading = time.perf_counter() - began
        began = time.perf_counter()
        lp.probabilities_with(x.repeat_interleave(rows, 0), read.grid.repeat_interleave(rows, 0),
                              None if read.extra is None else read.extra.repeat_interleave(rows, 0),
                              torch.full((rows,), first.target, dtype=torch.long))
        effect = time.perf_counter() - began
    images = sum(len(items) for _, _, items in the_plan.groups)
    return ConceptEstimate(2 * reading + effect, images, len(the_plan.groups), k, settings.k is not None)


def start_concept_job(shared: "SharedModel", run: Run, settings: "ConceptSettings", trust: Trust,
                      owner: str | None = None) -> ConceptJob:
    """Start finding the concepts of `run` (an opened run: its folder already checked against `trust`) with the
    shared network, and return the job; while `owner`'s own job goes it is returned (nothing new starts), while
    another session's goes ConceptRunBusy says so; a network the run was not made with, or an image folder `trust`
    does not let the app read (run.json names it), is refused in one sentence before any work."""
    global _JOB
    mismatch = network_mismatch(shared.network, run)
    if mismatch:
        raise UserError(mismatch)
    check_server_path(run.source, trust, what="image folder", folder=True)
    with _JOB_LOCK:
        if _JOB is not None and _JOB.running:
            if owner is not None and _JOB.owner == owner:
                return _JOB
            raise ConceptRunBusy("Another session is finding concepts on this server; one runs at a time, so "
                                 "please start yours when it has finished.")
        _JOB = ConceptJob(shared, Path(run.path), settings, owner)
        _JOB._thread.start()
        return _JOB


__all__ = ["ConceptEstimate", "ConceptJob", "ConceptRunBusy", "ConceptsStopped", "current_job", "network_mismatch",
           "start_concept_job", "time_one_image"]
