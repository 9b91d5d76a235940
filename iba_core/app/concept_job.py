"""Concept discovery started from the Dataset page (issue #41): `concepts.find_concepts` on a background thread, one
per server, with its progress, its time estimated before it starts, and Stop.

    told = estimate(shared, run, settings, trust).text()       # its time, before it starts
    job = start_concept_job(shared, run, settings, trust, owner=session)
    job.text()                                                  # "30 / 48 image passes · measure class-1 · 12 s"

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
    from ..concepts import same_network

    info = run.info
    key, weights = str(getattr(network, "key", "")), str(getattr(network, "weights_id", ""))
    if same_network(network, info):
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
                summary = find_concepts(network, self.run_dir, self.settings,
                                        progress=sharing(self.shared, self._report))
            # the groups left out, by name only: the library's sentence names files as the server sees them
            self.label = "finished" + (f"; left out, as none of their images could be read now: "
                                       f"{', '.join(summary.failed)}" if summary.failed else "")
        except ConceptsStopped:
            self.label = "stopped (the groups finished are kept)"
        except Exception as err:  # noqa: BLE001 - told on the page in one sentence; the thread ends
            self.error = error_text(err)
        finally:
            self.finished = time.time()

    def text(self) -> str:
        """The job's progress in one line: 'N / M image passes · label · S s' (each image is read twice per group:
        for the fit, then for its maps and measures)."""
        seconds = (self.finished or time.time()) - self.started
        steps = f"{self.done} / {self.total} image passes · " if self.total else ""
        return f"{steps}{self.label} · {duration(seconds)}"


_JOB: ConceptJob | None = None
_JOB_LOCK = threading.Lock()


def current_job() -> ConceptJob | None:
    """The server's concept discovery (running or the last one), or None."""
    return _JOB


@dataclass(frozen=True)
class ConceptEstimate:
    """Concept discovery's time before it starts (`concepts.discover.estimate_seconds`: a few of the run's images
    timed through both passes and one fit, scaled to every group), with the groups and their images."""

    seconds: float
    images: int
    groups: int

    def text(self) -> str:
        """What the form says before it starts."""
        return (f"Estimate: the {count_of(self.groups, 'group')} ({self.images} images in all: an image counts in "
                f"its class and in the whole run) take about {duration(self.seconds)} here (two images and one fit "
                "timed just now, scaled to every group). Other work on this machine makes it slower.")


def estimate(shared: "SharedModel", run: Run, settings: "ConceptSettings", trust: Trust) -> ConceptEstimate:
    """How long finding `run`'s concepts with `settings` should take (`ConceptEstimate`), timed under the network's
    lock; the image folder checked against `trust` first, the run and network as `find_concepts` checks them."""
    from ..concepts.discover import estimate_seconds, plan

    check_server_path(run.source, trust, what="image folder", folder=True)
    groups = plan(shared.network, run, settings).groups  # a run of another network, a prompt run: refused
    with shared.busy() as network:
        seconds = estimate_seconds(network, run.path, settings)
    return ConceptEstimate(float(seconds), sum(len(items) for _, _, items in groups), len(groups))


def start_concept_job(shared: "SharedModel", run: Run, settings: "ConceptSettings", trust: Trust,
                      owner: str | None = None) -> ConceptJob:
    """Start finding the concepts of `run` (an opened run: its folder already checked against `trust`) with the
    shared network, and return the job; while `owner`'s own job for this run goes it is returned (nothing new
    starts), while another one goes (another session's, or `owner`'s for another run) ConceptRunBusy says so; a
    network the run was not made with, or an image folder `trust` does not let the app read (run.json names it),
    is refused in one sentence before any work."""
    global _JOB
    mismatch = network_mismatch(shared.network, run)
    if mismatch:
        raise UserError(mismatch)
    check_server_path(run.source, trust, what="image folder", folder=True)
    with _JOB_LOCK:
        if _JOB is not None and _JOB.running:
            if owner is not None and _JOB.owner == owner and _JOB.run_dir == Path(run.path):
                return _JOB
            whose = "Your concept discovery for another run" if owner is not None and _JOB.owner == owner else \
                "Another session's concept discovery"
            raise ConceptRunBusy(f"{whose} is going on this server; one runs at a time, so please start this one "
                                 "when it has finished.")
        _JOB = ConceptJob(shared, Path(run.path), settings, owner)
        _JOB._thread.start()
        return _JOB


__all__ = ["ConceptEstimate", "ConceptJob", "ConceptRunBusy", "ConceptsStopped", "current_job", "estimate",
           "network_mismatch", "start_concept_job"]
