"""State shared across reruns and sessions: the loaded network with its lock, and the finished results the
pages keep to redraw (a Per-Sample run, a comparison, a β × layer grid; the Evaluate page's in `evaluation`)."""
from __future__ import annotations

import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

import torch
from PIL import Image

from ..networks import Network, load_network
from ..per_sample import AttributionResult
from ..progress import ProgressFn
from ..settings import torch_threads
from ..trust import Trust

if TYPE_CHECKING:
    from ..results import GridCell
    from ..per_sample import BottleneckSettings
    from .inputs import ImageInput


class TorchThreads:
    """The one owner of torch's thread count while the app computes.

    `torch.set_num_threads` is process-wide, but each network has its own lock, so two networks' runs overlap:
    if each set the count and restored what it found, the one that started second would restore the first
    one's setting and leave it for good. Here the first run in sets `settings.torch_threads()` and the last one
    out restores the count found before, under one lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._before = 0

    @contextmanager
    def held(self) -> Iterator[None]:
        """Run the block with the app's thread count (`settings.torch_threads()`)."""
        with self._lock:
            if self._running == 0:
                self._before = torch.get_num_threads()
                torch.set_num_threads(torch_threads())
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    torch.set_num_threads(self._before)


#: The process's one owner of torch's thread count (the count itself is process state: one owner, not one per
#: network).
TORCH_THREADS = TorchThreads()


@dataclass
class SharedModel:
    """A loaded network plus the lock that every computation touching it must hold.

    Streamlit serves all sessions from one process; the model's modules are shared and the
    bottleneck temporarily changes their state (eval flags, hooks), so runs must not interleave.
    RLock: a helper that takes the lock may call another that takes it too.

    Long work takes turns: at a point where it leaves the network as it found it (between methods, images, cells
    or batches of passes: no hook, no changed flag) it calls `make_way`, which lets a session that waits go first
    once the lock has been held `SHARE_AFTER_S`, then waits for its own turn again.
    """

    network: Network
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: What it was loaded from: a registered key, torchvision:NAME or a model card's path.
    source: str = ""
    # Who holds the lock, how often (its RLock depth), since when; how many threads wait, how often it was taken
    # (a handoff's sign). Changed only by the holder, or under `_counts`.
    _owner: int | None = field(default=None, init=False, repr=False)
    _depth: int = field(default=0, init=False, repr=False)
    _since: float = field(default=0.0, init=False, repr=False)
    _waiting: int = field(default=0, init=False, repr=False)
    _taken: int = field(default=0, init=False, repr=False)
    _counts: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    #: Seconds between two on_wait calls while another session holds the network.
    WAIT_POLL_S = 0.5
    #: Seconds long work holds the network before `make_way` lets a waiting session go first: short against a
    #: Per-Sample run (seconds), long against a handoff (microseconds).
    SHARE_AFTER_S = 1.0
    #: Seconds `make_way` waits for the waiting session to take the lock before it queues again itself.
    HANDOFF_S = 1.0

    @contextmanager
    def busy(self, on_wait: Callable[[float], None] | None = None,
             poll_s: float | None = None) -> Iterator[Network]:
        """Hold the lock and run torch with `settings.torch_threads()` threads (`TORCH_THREADS`: the count is
        process-wide, so one owner sets it for all networks and restores it when the last one is done).

        While another thread (another browser session) holds the lock, `on_wait(seconds waited so far)`
        is called at once and then every `poll_s` seconds (default WAIT_POLL_S), so a page can say that
        it waits instead of hanging silently; it is not called when the lock is free. An exception from
        on_wait (e.g. Streamlit stopping the run) ends the wait without taking the lock.
        """
        self.acquire(on_wait, poll_s)
        try:
            with TORCH_THREADS.held():
                yield self.network
        finally:
            if self.holds():  # not after a `make_way` whose wait was stopped
                self.release()

    def holds(self) -> bool:
        """Whether the calling thread holds the lock."""
        return self._owner == threading.get_ident()

    def acquire(self, on_wait: Callable[[float], None] | None = None, poll_s: float | None = None) -> float:
        """Take the lock (see `busy`); returns the seconds spent waiting for it."""
        if self.lock.acquire(blocking=False):
            self._took()
            return 0.0
        with self._counts:
            self._waiting += 1
        start = time.monotonic()
        try:
            if on_wait is None:
                self.lock.acquire()
            else:
                poll = self.WAIT_POLL_S if poll_s is None else poll_s
                on_wait(0.0)
                while not self.lock.acquire(timeout=poll):
                    on_wait(time.monotonic() - start)
        finally:
            with self._counts:
                self._waiting -= 1
        self._took()
        return time.monotonic() - start

    def _took(self) -> None:
        if self._depth == 0:
            self._owner, self._since = threading.get_ident(), time.monotonic()
            with self._counts:
                self._taken += 1
        self._depth += 1

    def release(self) -> None:
        """Give back one level of the lock (the caller holds it)."""
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self.lock.release()

    def make_way(self, on_wait: Callable[[float], None] | None = None) -> float:
        """At a point where the caller leaves the network as it found it: if another session waits and the
        caller has held the lock (once, not nested) for `SHARE_AFTER_S`, let that session go first and wait for
        the lock again (`on_wait` as in `busy`; if it raises, the caller no longer holds the lock). Returns the
        seconds spent waiting (0.0 when nobody waits)."""
        if not self.holds() or self._depth != 1 or self._waiting == 0:
            return 0.0
        if time.monotonic() - self._since < self.SHARE_AFTER_S:
            return 0.0
        taken = self._taken
        self.release()
        deadline = time.monotonic() + self.HANDOFF_S
        # A plain lock is not fair: without this pause the releasing thread could take it straight back.
        while self._taken == taken and self._waiting > 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.acquire(on_wait)


def sharing(shared: SharedModel, progress: ProgressFn | None,
            on_wait: Callable[[float], None] | None = None) -> ProgressFn:
    """`progress` that first makes way (`SharedModel.make_way`) for a session waiting for `shared`: for long work
    whose progress calls come where the network is as it found it (between methods, images, grid cells, batches
    of a metric's passes; never inside a bottleneck's steps, whose hooks stay on the network)."""

    def report(done: int, total: int, label: str) -> None:
        try:
            shared.make_way(on_wait)
        except Exception:
            # A caller that catches errors (MapCache.maps skips a failing method) must not go on without the
            # network: take it back first. A stop (Streamlit's BaseException) ends the request instead.
            if not shared.holds():
                shared.acquire()
            raise
        if progress is not None:
            progress(done, total, label)

    return report


def load_shared(key: str, trust: Trust | None = None) -> SharedModel:
    """Load a network (a registered key, torchvision:NAME or a model card's path) with its own weights on the
    CPU (or GPU if present); never unpickles (no trust_pickle); a card only as `trust` allows (default: the
    app's owner's, `Trust.for_app()`). Raises the library's errors (missing weights, a card or weights file
    that does not fit, code not allowed, …) with their messages."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    trust = trust if trust is not None else Trust.for_app()
    return SharedModel(load_network(key, weights="pretrained", device=device, trust=trust), source=str(key))


#: A CoIBA run's method, as its JSON report names it (the Per-Sample Bottleneck's: `render.report.METHOD`).
COIBA_METHOD = "CoIBA, one mask shared by bottlenecks at several layers (Hong et al., CVPR 2025)"
#: An M2IB run's (the Per-Sample Bottleneck with a standard-normal prior, as M2IB's authors run it).
M2IB_METHOD = "M2IB, the Per-Sample Bottleneck with a standard-normal prior (Wang et al., NeurIPS 2023)"


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
    #: The photo as uploaded (for the full-resolution overlay) and where the network's crop lies in it
    #: (left, top, right, bottom; `iba_core.render.overlays.centre_crop_box`).
    original: Image.Image | None = None
    crop_box: tuple[int, int, int, int] | None = None
    #: Seconds for the feature statistics (≈0 when cached) and spent waiting for another session's run;
    #: the optimisation's own time is result.seconds.
    stats_seconds: float = 0.0
    wait_seconds: float = 0.0
    #: The network's title (a model card's network is not in the registry).
    model_title: str = ""
    #: The image's content digest (`inputs.ImageInput.digest`): two uploads may share a file name, not this.
    image_digest: str = ""
    #: Tells runs apart (e.g. widgets that belong to one run, such as its replay slider).
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    #: CoIBA's layers, first to last (`layer` is then the first, where the map and its information lie); () for
    #: the one-layer Per-Sample Bottleneck.
    layers: tuple[str, ...] = ()
    #: A CLIP prompt's words with their bits (M2IB's text side, `text_side.TokenBits`); None for a class.
    text_side: object | None = None

    @property
    def where(self) -> str:
        """Where the bottleneck sat, for captions: "layer block3_2", or "CoIBA at 9 layers, block3_2 … block7_1"."""
        if not self.layers:
            return f"layer {self.layer}"
        from ..results import range_label

        return f"CoIBA at {len(self.layers)} layers, {range_label(self.layers[0], self.layers[-1])}"

    @property
    def file_stem(self) -> str:
        """Stem of the download files: iba_<image>_<network>_<layer> (a card's "card:name" as card_name); M2IB's
        m2ib_…; CoIBA's: coiba_<image>_<network>_<first>-<last>."""
        where = f"{self.layers[0]}-{self.layers[-1]}" if self.layers else self.layer
        kind = "coiba" if self.layers else "m2ib" if self.result.settings.prior == "standard_normal" else "iba"
        stem = f"{kind}_{self.image_name.rsplit('.', 1)[0]}_{self.model_key}_{where}"
        return re.sub(r"[^\w.+-]", "_", stem)

    def report(self) -> dict:
        """The run's JSON report (`iba_core.render.report.run_report`); a CoIBA run's names its method and layers."""
        from ..render.report import run_report

        r = self.result
        report = run_report(r.settings, r, self.model_key, self.layer, self.image_name, self.class_name,
                            stats_description=self.stats_description, stats_seconds=self.stats_seconds)
        if self.layers:
            from ..coiba import block_of

            report["method"] = COIBA_METHOD
            report["layers"] = list(self.layers)
            # the placement that ran ("auto" resolved): the authors' branch inputs, or whole layer outputs
            report["settings"]["placement"] = "branch" if block_of(self.layers[0]) != self.layers[0] else "output"
        elif r.settings.prior == "standard_normal":
            report["method"] = M2IB_METHOD
        if self.text_side is not None:  # a CLIP prompt's words with their bits (M2IB's text side)
            report["text_side"] = self.text_side.summary()
        return report


@dataclass(frozen=True)
class Subject:
    """What a kept result explains: the image (its name to show, its content digest to tell images apart), the
    network and the class."""

    image: str
    model: str  # the network's title
    class_name: str
    target: int
    image_digest: str = ""  # `inputs.ImageInput.digest` ('' unknown: then the name tells images apart)

    @classmethod
    def of(cls, image: "ImageInput", network, target: int) -> "Subject":
        """The subject of a result for `image` (its name and digest) and `network` (a Network: its title and
        class names)."""
        return cls(image.name, network.spec.title, network.class_name(target), int(target), image.digest)

    @property
    def caption(self) -> str:
        """'photo.jpg · ResNet-50 · explaining **tabby** (#281)' (Markdown)."""
        return f"{self.image} · {self.model} · explaining **{self.class_name}** (#{self.target})"


@dataclass
class CompareRun:
    """The Compare page's last grid: which cached maps it shows (`maps.map_key`s) and for what."""

    subject: Subject
    keys: list[tuple]
    cropped: Image.Image
    input_png: bytes
    #: Whether a Readout Bottleneck map is among the maps, and its checkpoint's details (a tooltip).
    readout: bool = False
    readout_details: str = ""
    #: One "method: reason" line per map that could not be computed.
    failed: list[str] = field(default_factory=list)


@dataclass
class GridRun:
    """A finished β × layer grid of the session and for what it was computed."""

    subject: Subject
    cells: "list[GridCell]"
    layer: str  # the β row's layer
    settings: "BottleneckSettings"
    head: str = "softmax"  # the network's (`heads.py`): what p(target) means in the grid's note
