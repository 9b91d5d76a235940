"""State shared across reruns and sessions: the loaded network with its lock, and a finished Per-Sample run."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from PIL import Image

from ..networks import Network, load_network
from ..per_sample import AttributionResult
from ..settings import torch_threads


@dataclass
class SharedModel:
    """A loaded network plus the lock that every computation touching it must hold.

    Streamlit serves all sessions from one process; the model's modules are shared and the
    bottleneck temporarily changes their state (eval flags, hooks), so runs must not interleave.
    RLock: a helper that takes the lock may call another that takes it too.
    """

    loaded: Network
    lock: threading.RLock = field(default_factory=threading.RLock)

    @contextmanager
    def busy(self) -> Iterator[Network]:
        """Hold the lock and run torch with `settings.torch_threads()` threads; the count is restored after."""
        with self.lock:
            before = torch.get_num_threads()
            torch.set_num_threads(torch_threads())
            try:
                yield self.loaded
            finally:
                torch.set_num_threads(before)


def load_shared(key: str) -> SharedModel:
    """Load a registered network on the CPU (or GPU if present); raises WeightsUnavailableError."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return SharedModel(load_network(key, weights="pretrained", device=device))


@dataclass
class RunRecord:
    """One finished Per-Sample run, kept so that reruns can redraw it (and its downloads)."""

    image_name: str
    model_key: str
    layer: str
    class_name: str
    cropped: Image.Image
    result: AttributionResult
    stats_description: str

    @property
    def file_stem(self) -> str:
        """Stem of the download files: iba_<image>_<network>_<layer>."""
        return f"iba_{self.image_name.rsplit('.', 1)[0]}_{self.model_key}_{self.layer}"

    def report(self) -> dict:
        """The run's JSON report (`iba_core.render.report.run_report`)."""
        from ..render.report import run_report

        r = self.result
        return run_report(r.settings, r, self.model_key, self.layer, self.image_name, self.class_name,
                          stats_description=self.stats_description)
