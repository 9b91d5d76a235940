"""Concept discovery started from the Dataset page (issue #41): `concepts.find_concepts` on a background thread, one
per server, with its progress, its time estimated before it starts, and Stop.

    estimate = concept_estimate(shared, run, settings)          # "about 3 min for 2 classes and the whole run"
    job = start_concept_job(shared, run, settings, owner=session)
    job.progress()                                              # (done, total, "class-0: activations …")

The job holds the shared network's lock, but at each of its progress steps lets a page of another session that
waits for it go first (`state.sharing`), so other pages stay usable. Stop ends it at its next progress step: the
groups it finished are kept (`find_concepts` resumes: they are skipped next time).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UserError
from ..runs.tables import Run
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


def concept_estimate(shared: "SharedModel", run: Run, settings: "ConceptSettings") -> str:
    """The time concept discovery should take for `settings`, in a sentence (`concepts.estimate_seconds`)."""
    from ..concepts import estimate_seconds

    seconds = float(estimate_seconds(shared.network, run, settings))
    return (f"About {duration(seconds)} on this machine (estimated before it starts); other work on the server "
            "makes it slower.")


def start_concept_job(shared: "SharedModel", run: Run, settings: "ConceptSettings",
                      owner: str | None = None) -> ConceptJob:
    """Start finding the concepts of `run` (an opened run: its folder already checked against the app's trust) with
    the shared network, and return the job; while `owner`'s own job goes it is returned (nothing new starts), while
    another session's goes ConceptRunBusy says so; a network the run was not made with is refused in one sentence
    before any work."""
    global _JOB
    mismatch = network_mismatch(shared.network, run)
    if mismatch:
        raise UserError(mismatch)
    with _JOB_LOCK:
        if _JOB is not None and _JOB.running:
            if owner is not None and _JOB.owner == owner:
                return _JOB
            raise ConceptRunBusy("Another session is finding concepts on this server; one runs at a time, so "
                                 "please start yours when it has finished.")
        _JOB = ConceptJob(shared, Path(run.path), settings, owner)
        _JOB._thread.start()
        return _JOB


__all__ = ["ConceptJob", "ConceptRunBusy", "ConceptsStopped", "concept_estimate", "current_job",
           "network_mismatch", "start_concept_job"]
