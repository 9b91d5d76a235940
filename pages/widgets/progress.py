"""Progress while a page waits: for the shared network, and for feature statistics being estimated."""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol, TypeVar

import streamlit as st

from iba_core.app.state import SharedModel, sharing
from iba_core.budget import FEWER, Cost, check_budget
from iba_core.app.stats_source import (choose_method_stats, choose_range_stats, choose_stats, stats_for_methods,
                                       stats_progress_text)
from iba_core.networks import Network
from iba_core.progress import ProgressFn
from iba_core.trust import check_server_path
from iba_core.feature_stats import FeatureStats

from pages.widgets.page import app_trust, request_budget


class Inputs(Protocol):
    """What the progress helpers read of a page's inputs (`inputs.Inputs`): the shared network and the network.
    Named here, not imported, so `inputs.py` (which shows progress) and this module form no import circle."""

    shared: SharedModel

    @property
    def network(self) -> Network: ...


T = TypeVar("T")

# ---- waiting for the network -------------------------------------------------------------------

#: Shown while another session's run holds the shared network (updated every WAIT_POLL_S seconds).
WAIT_MESSAGE = "Waiting for another run to finish ({seconds:.0f} s)…"


@contextmanager
def network_turn(shared: SharedModel, timing: dict | None = None) -> Iterator[Network]:
    """`shared.busy()`, saying "Waiting for another run to finish (N s)" while another session holds
    the network (the message updates while it waits, and disappears once the turn comes).

    timing, if given, gets the seconds waited added to timing["wait"].
    """
    holder = st.empty()

    def on_wait(seconds: float) -> None:
        holder.info(WAIT_MESSAGE.format(seconds=seconds), icon=":material/hourglass_top:")

    start = time.monotonic()
    with shared.busy(on_wait=on_wait) as network:
        holder.empty()
        if timing is not None:
            timing["wait"] = timing.get("wait", 0.0) + time.monotonic() - start
        yield network


#: Shown while a long request has let another session's run go first (`SharedModel.make_way`).
MADE_WAY_MESSAGE = "Paused while another visitor's run goes first ({seconds:.0f} s)…"


def taking_turns(shared: SharedModel, progress: ProgressFn | None) -> ProgressFn:
    """`progress` for long work that takes turns with other sessions (`state.sharing`): at each of its steps it
    lets a waiting session's run go first, saying so while it waits for the network again. Only for progress
    called where the network is as it was found (between methods, cells, batches of a metric's passes)."""
    holder = st.empty()

    def on_wait(seconds: float) -> None:
        holder.info(MADE_WAY_MESSAGE.format(seconds=seconds), icon=":material/hourglass_top:")

    def report(done: int, total: int, label: str) -> None:
        holder.empty()
        if progress is not None:
            progress(done, total, label)

    return sharing(shared, report, on_wait)


@contextmanager
def stoppable(key: str) -> Iterator[None]:
    """A Stop button while the block runs a request: pressing it reruns the page, which ends the request at its
    next step (Streamlit stops a running page when a widget changes) and gives the network back; the previous
    results stay, and `stopped_note(key)` says so on the rerun. The button goes when the block ends."""
    slot = st.empty()
    slot.button("Stop", key=key, icon=":material/stop_circle:", on_click=_mark_stopped, args=(key,),
                help="Stops this request at its next step; the results shown before it stay.")
    try:
        yield
    except Exception:  # a refusal or an error: the button goes with the request (a stop is no Exception)
        slot.empty()
        raise
    slot.empty()


def _mark_stopped(key: str) -> None:
    st.session_state[f"_stopped_{key}"] = True


def stopped_note(key: str) -> None:
    """Say once, after a Stop (`stoppable(key)`), that the request was stopped and what is shown."""
    if st.session_state.pop(f"_stopped_{key}", False):
        st.info("Stopped: nothing of that request is shown (anything below is from before it); the maps it finished "
                "are kept and come back at once when you ask again.", icon=":material/stop_circle:")


def check_request(cost: Cost, what: str, fewer: str = FEWER) -> None:
    """Refuse a request above this app's budget (`budget.check_budget`; `fewer`: how to bring it within) before
    anything runs."""
    check_budget(cost, request_budget(), what, fewer)


# ---- statistics with a progress bar ------------------------------------------------------------


def stats_with_progress(inputs: Inputs, layer: str, folder: str | None, n: int,
                        timing: dict | None = None) -> FeatureStats:
    """Statistics for `layer`, showing a progress bar while they are estimated (cached afterwards).

    timing, if given, gets timing["stats"] (seconds, without waiting for another session) and the
    seconds waited added to timing["wait"].
    """
    return _with_stats_bar(inputs, layer, folder, timing, lambda progress: choose_stats(
        inputs.network, layer, folder=folder, n=n, progress=progress))


def range_stats_with_progress(inputs: Inputs, layers: list[str], label: str, folder: str | None, n: int,
                              timing: dict | None = None) -> dict[str, FeatureStats]:
    """Statistics for every layer of CoIBA's range (the missing ones in one pass: `choose_range_stats`), with
    the bar `stats_with_progress` shows, naming the range by `label`; timing as there."""
    return _with_stats_bar(inputs, label, folder, timing, lambda progress: choose_range_stats(
        inputs.network, layers, folder=folder, n=n, progress=progress))


def method_stats_with_progress(inputs: Inputs, method, label: str, folder: str | None,
                               timing: dict | None = None) -> dict[str, FeatureStats]:
    """A bottleneck method's statistics (`stats_source.choose_method_stats`: every layer it reads, the missing ones
    in one pass), with the bar `stats_with_progress` shows, naming the layer or range by `label`; timing as
    there. The method keeps them and builds its bottleneck from them."""
    return _with_stats_bar(inputs, label, folder, timing, lambda progress: choose_method_stats(
        inputs.network, method, progress=progress))


def _with_stats_bar(inputs: Inputs, label: str, folder: str | None, timing: dict | None,
                    compute: Callable[[Callable[..., None]], T]) -> T:
    """compute(progress) in the network's turn, under a bar that names `label` (a layer or a range) and the time
    left; a typed folder is checked against what the app allows first."""
    if folder:  # a visitor's path on the server: only inside the owner's folders (checked before any scan)
        check_server_path(Path(folder).expanduser(), app_trust(), what="image folder")
    holder = st.empty()
    started = time.perf_counter()

    def progress(done: int, total: int, _label: str = "") -> None:
        text = stats_progress_text(label, done, total, time.perf_counter() - started)
        holder.progress(min(done / max(total, 1), 1.0), text=text)

    with network_turn(inputs.shared, timing):
        start = time.perf_counter()
        stats = compute(progress)
        if timing is not None:
            timing["stats"] = time.perf_counter() - start
    holder.empty()
    return stats


def stats_for_methods_with_progress(inputs: Inputs, methods: list[str]) -> None:
    """Estimate the statistics that `methods` read (if any needs them, and they are not cached), with a bar;
    the methods then read them from the cache (a model card's from its image folder)."""
    holder = st.empty()
    layer = inputs.network.spec.default_layer
    started = time.perf_counter()

    def progress(done: int, total: int, label: str = "") -> None:
        text = stats_progress_text(layer, done, total, time.perf_counter() - started)
        holder.progress(min(done / max(total, 1), 1.0), text=text)

    with network_turn(inputs.shared) as network:
        stats_for_methods(network, methods, progress=progress)
    holder.empty()
