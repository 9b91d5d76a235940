"""β × layer page (paper Fig. 3 for the user's image): how β and the bottleneck's depth shape the map."""
from __future__ import annotations

import time

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from iba_core.app.maps import grid_key, keep
from iba_core.app.state import GridRun, Subject
from iba_core.budget import Cost
from iba_core.app.stats_source import seconds_left
from iba_core.beta_layer import (
    DEFAULT_BETAS, LAYER_ROW_BETA, GridCell, GridKey, beta_layer_grid, cached_grid, depth_layers, grid_progress_text,
    grid_runs, grid_target_note, lost_class_warning, range_row,
)
from iba_core.methods import bottleneck_method
from iba_core.per_sample import BottleneckSettings
from iba_core.render.figures import LOST_CLASS_MARK, PRESENTATION_ZOOM, grid_figure
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import layer_picker, resolve_target, settings_row, target_picker
from pages.widgets.inputs import Inputs, input_section, subject_caption
from pages.widgets.page import bring_into_view, presentation, remember_choice, restore_choice, through_app
from pages.widgets.progress import (check_request, network_turn, range_stats_with_progress, stats_with_progress,
                                   stoppable, stopped_note, taking_turns)

GRIDS_KEY, LAST_KEY = "bl_grids", "bl_last"
PER_MAP_KEY = "bl_per_map"  # the checkbox: the β row's maps on their own colour scales too (off: one scale)
MAX_KEPT = 6  # grids kept per session (each ~2 MB of heatmaps); every session also finds them on disk
MAP_CONFIG = {"displayModeBar": False}  # the tool bar would cover the cell titles
#: The container the grid is drawn in, filling cell by cell and when finished (its CSS class: st-key-…).
GRID_BOX_KEY = "bl_grid_box"
#: Presentation mode: the expander holding the image, network and settings (its state: open or folded), and the
#: grid for which it was last folded away (it folds once per new grid, and stays as the user leaves it).
CONTROLS_KEY, FOLDED_FOR_KEY = "bl_controls", "bl_folded_for"
#: The "grid is ready" line: (the grid's key, its note). It stays while that grid is shown (normal mode: while the
#: form still holds its image and network): the browser's report of the grid's room reruns the page at once, and a
#: line shown only in the run that computed the grid flashed and was gone.
READY_KEY = "bl_ready"
#: Presentation mode, for a 1920 × 1080 projector: side of a map in CSS px (the figure's height follows). About
#: the width of a column of five across the page beside the open sidebar; with the sidebar folded the columns
#: are wider still and the maps grow to this.
PRESENTATION_CELL_PX = 300

INTRO = (
    "How the two main choices shape the heatmap, for your image (the paper's Figure 3). "
    f"**Top row:** β·k from {DEFAULT_BETAS[0]:g} to {DEFAULT_BETAS[-1]:g} at one layer — larger β lets fewer bits "
    f"through and p(target) drops. **Bottom row:** layers across the network's depth at β·k = {LAYER_ROW_BETA:g} — "
    "early layers give sharp, detailed maps, deep layers coarse ones. The top row shares one colour scale in bits "
    "per pixel (bits are absolute: a map that lets few bits through looks dark); each map of the bottom row has its "
    "own scale, 0 … its maximum given in its title, because layers of different resolution spread their bits "
    f"differently (the first layers hold many more bits per pixel). A grey hatched square that says "
    f"“{LOST_CLASS_MARK}” marks a setting where the bottleneck discarded the class: no map to read there."
)


#: The grid's room on the screen: the browser reports the grid column's width and the window's height (CSS px)
#: as the component's state "room", so the maps can be as large as the screen allows and both rows fit on it.
#: It reports a change only while no script run is going (a rerun would stop a grid being computed), and, after its
#: first report, only once the same room is measured twice in a row: a folding sidebar or a window being dragged
#: passes through widths that each would rerun the page and redraw the grid (the grid jumped, and a page scrolled to
#: it lost its place).
ROOM_KEY = "bl_room"
_ROOM_JS = """
export default function (component) {
  const { parentElement, setStateValue, data } = component;
  // What the server has (sent back as data on every run): report only a change, else every run would rerun.
  let sent = JSON.stringify(data || null);
  let seen = null;  // the last poll's measurement: a room is reported once two polls agree on it
  const report = () => {
    if (document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')) return;  // a run is going: later
    const width = Math.round(parentElement.getBoundingClientRect().width);
    if (width < 100) return;  // not laid out yet
    const room = { width: width, height: Math.round(window.innerHeight) };
    const text = JSON.stringify(room);
    const settled = text === seen || sent === "null";  // (the first report at once: the grid waits for it)
    seen = text;
    if (settled && text !== sent) { sent = text; setStateValue("room", room); }
  };
  report();
  const timer = setInterval(report, 700);
  return () => clearInterval(timer);
}
"""
_room = st.components.v2.component("iba_grid_room", js=_ROOM_JS, isolate_styles=False)
#: Height of the app's top bar and the space above the grid that stays on screen, in CSS px.
_SCREEN_TOP_PX = 80


def reported_room() -> dict | None:
    """The grid's column width and the window's height as the browser last reported them (None before it has,
    or with no browser: AppTest)."""
    try:
        measured = st.session_state[ROOM_KEY]["room"]
        return {"width": float(measured["width"]), "height": float(measured["height"])}
    except (KeyError, TypeError, ValueError):
        return None


def room() -> tuple[float, float] | None:
    """(width, height) in CSS px that the grid may take: the column's width, the window's height less the app's
    top bar (None before the browser has reported them)."""
    measured = reported_room()
    if measured is None or measured["width"] <= 0 or measured["height"] <= _SCREEN_TOP_PX:
        return None
    return measured["width"], measured["height"] - _SCREEN_TOP_PX


def zoom() -> float:
    """How much larger the grid's text is drawn: PRESENTATION_ZOOM in presentation mode (the sidebar's toggle)."""
    return PRESENTATION_ZOOM if presentation() else 1.0


def figure(cells: list[GridCell], ncols: int | None = None):
    """The grid as drawn on this page: the checkbox's scales, presentation mode's text and map size."""
    return grid_figure(cells, shared_scale=not st.session_state.get(PER_MAP_KEY), zoom=zoom(), ncols=ncols,
                       cell_px=PRESENTATION_CELL_PX if presentation() else None, room=room())


def compute(inputs: Inputs, key: GridKey, settings: BottleneckSettings, folder: str | None, n: int,
            grid_box: DeltaGenerator) -> list[GridCell]:
    """Fill the grid cell by cell where it will stay (`grid_box`, brought into view), redrawing it after each
    cell, under a progress bar: which cell of how many, its β·k and layer, and the time left."""
    layers = list(key.layers)
    total = len(key.betas) + len(layers)
    runs = grid_runs(key.betas, key.layer, layers, key.last)
    per_run = bottleneck_method(settings, layer=key.layer).forward_passes(inputs.network, *inputs.x.shape[-2:])
    check_request(Cost.part("bottleneck runs", len(runs) * per_run), f"This grid of {len(runs)} bottleneck runs",
                  "choose fewer β values or steps, or a smaller batch")
    with grid_box:
        bring_into_view(GRID_BOX_KEY)
        bar = st.progress(0.0, text=grid_progress_text(0, total, f"β·k = {key.betas[0]:g} at {key.layer}", None))
        live = st.empty()
    cells: list[GridCell] = []
    started = time.monotonic()

    def on_cell(cell: GridCell) -> None:
        cells.append(cell)
        live.plotly_chart(figure(cells, ncols=max(len(key.betas), len(layers))), key=f"bl_live_{len(cells)}",
                          theme=None, config=MAP_CONFIG)

    def progress(done: int, total: int, label: str) -> None:
        # The time left counts the distinct runs: the cell repeated in both rows takes no time.
        computed = len({(c.beta_k, c.where) for c in cells})
        left = seconds_left(computed, len(runs), time.monotonic() - started)
        bar.progress(done / total, text=grid_progress_text(done, total, label, left))

    with grid_box, stoppable("bl_stop"), network_turn(inputs.shared) as network:
        result = beta_layer_grid(
            network, inputs.x, key.target, key.layer, betas=key.betas,
            stats_for=lambda name: stats_with_progress(inputs, name, folder, n),
            layers=layers, settings=settings, progress=taking_turns(inputs.shared, progress), on_cell=on_cell,
            last=key.last,
            range_stats_for=lambda names: range_stats_with_progress(inputs, names, f"{len(names)} layers", folder, n),
        )
    bar.empty()
    live.empty()
    return result


#: The second row's axis (outside the form, so its caption follows the choice): the paper's layers, or CoIBA's
#: layer ranges (issue #30).
AXIS_KEY = "bl_axis"
AXIS_NAMES = {"layer": "Layers (a Per-Sample Bottleneck each)", "range": "Layer ranges (CoIBA)"}


def axis_choice() -> str:
    """"layer" or "range": what the grid's second row varies (kept for the session)."""
    restore_choice(AXIS_KEY, "layer")
    return st.radio(
        "Bottom row", list(AXIS_NAMES), format_func=AXIS_NAMES.get, key=AXIS_KEY, horizontal=True,
        on_change=remember_choice, args=(AXIS_KEY,),
        help="Layers: the paper's Figure 3, one bottleneck at each layer. Layer ranges: CoIBA (Hong et al., CVPR "
        "2025), one mask shared by bottlenecks at every layer of a range; each cell's range starts at one of the "
        "layers and ends at the same last layer, so the row shows what spanning more of the network does.")


def row_caption(inputs: Inputs, layer: str, axis: str) -> str:
    """Which cells the second row will hold, in words."""
    if axis == "range":
        firsts, last = range_row(inputs.network, layer)
        return (f"Range row (CoIBA, β·k = {LAYER_ROW_BETA:g}, no mask smoothing as its authors): from each of "
                f"{', '.join(firsts)} to {last}; each cell's bits are counted at its first layer.")
    return (f"Layer row: {', '.join(depth_layers(inputs.network.spec, include=layer))} — the last layer of each "
            "stage, spread over the depth, always including the chosen layer.")


def form(inputs: Inputs) -> tuple | None:
    """The settings form; returns (layer, settings, target, folder, n, axis) when it was submitted."""
    axis = axis_choice()
    with st.form("bl_form"):
        c1, c2 = st.columns(2)
        with c1:
            layer = layer_picker(inputs, "bl", label="Layer for the β row")
            with shown_errors():  # e.g. a network CoIBA cannot span: said where the row is described
                st.caption(row_caption(inputs, layer, axis))
        with c2:
            target = target_picker(inputs, "bl")
        settings, folder, n = settings_row(inputs, "bl", layer)
        submitted = st.form_submit_button("Compute grid", type="primary", icon=":material/grid_view:",
                                          key="bl_run_button")
    return (layer, settings, target, folder, n, axis) if submitted else None


def execute(inputs: Inputs, layer: str, settings: BottleneckSettings, target: int | str, folder: str | None,
            n: int, axis: str, grid_box: DeltaGenerator) -> str | None:
    """Compute the grid (or reuse an identical one: this session's, or any session's from the disk cache) and
    make it the one shown; returns the line that says it is ready (None when it failed: the error is shown)."""
    with shown_errors():  # previous results stay
        settings = settings.validate()
        target_idx = resolve_target(inputs, target)
        key = grid_key(inputs.image.digest, inputs.network, layer, target_idx, settings, folder, n, axis=axis)
        grids: dict = st.session_state.setdefault(GRIDS_KEY, {})
        cached = key in grids
        if not cached:  # same image and settings: reuse, the result would be identical
            cells, cached = cached_grid(key, lambda: compute(inputs, key, settings, folder, n, grid_box))
            run = GridRun(Subject.of(inputs.image, inputs.network, target_idx), cells, layer, settings,
                          inputs.network.head)
            keep(grids, key, run, MAX_KEPT)
        st.session_state[LAST_KEY] = key
        return ("computed before for the same image, network and settings" if cached else "")
    return None


def ready_line(where: str, note: str) -> str:
    """"The grid is ready below (computed before …)." — where: "below", "above" or ""."""
    return f"The grid is ready{' ' + where if where else ''}" + (f" ({note})." if note else ".")


def ready_note(inputs: Inputs | None = None) -> str | None:
    """The note of the "grid is ready" line while the grid it was made for is the one shown (and, with `inputs`,
    while they still hold that grid's image and network); None when no line belongs on the page."""
    made = st.session_state.get(READY_KEY)
    if not made or made[0] != st.session_state.get(LAST_KEY):
        return None
    key, note = made
    if inputs is not None and (key.image != inputs.image.digest or key.network != inputs.network.key):
        return None
    return note


def fold_controls(last: GridKey | None) -> None:
    """Presentation mode: the controls start open while there is no grid, and fold away once for each new grid
    (the grid is what the room looks at); a user who opens them again keeps them open."""
    if last is None:
        st.session_state.setdefault(CONTROLS_KEY, True)
    elif st.session_state.get(FOLDED_FOR_KEY) != last:
        st.session_state[CONTROLS_KEY] = False
        st.session_state[FOLDED_FOR_KEY] = last


def show(entry: GridRun) -> None:
    """The grid; in presentation mode the grid first, what explains it under it."""
    big = presentation()
    if not big:
        st.divider()
        st.subheader("Grid")
    st.caption(f"{subject_caption(entry.subject)} · {entry.settings.steps} steps × batch {entry.settings.batch}")
    head = st.container()  # normal mode: the scale's checkbox and the notes, above the grid
    st.plotly_chart(figure(entry.cells), key="bl_grid", theme=None, config=MAP_CONFIG)
    with st.container() if big else head:
        ready = ready_note() if big else None
        if ready is not None:
            st.success(ready_line("", ready), icon=":material/check_circle:")
        per_map = st.checkbox(
            "Scale each map on its own", key=PER_MAP_KEY,
            help="Off (default): the top row's maps share one colour scale in bits per pixel (bits are absolute), "
            "so brightness compares across the row. On: they too run from 0 to their own maximum, which shows each "
            "map's shape but not how many bits it let through. The bottom row's maps always have their own scales.",
        )
        note = grid_target_note(entry.cells, entry.head)
        if note:
            st.warning(f"**Explaining a class the network hardly predicts** — {note}", icon=":material/help:")
        lost = lost_class_warning(entry.cells)
        if lost:
            st.warning(f"**Class lost** — {lost} (Paper §4.1: β ≥ 1000/k discards all information.)",
                       icon=":material/warning:")
    if any(c.last for c in entry.cells):
        st.caption("Bottom row: CoIBA, one mask shared by the bottlenecks at every layer of each cell's range (its "
                   "title), each layer adding noise with its own statistics; the map and the bits are its first "
                   "layer's. CoIBA's cells use no mask smoothing (its authors' setting).")
    if per_map:
        scale = ("Each map has its own linear colour scale (dark = 0 bits / pixel, bright = that map's maximum, "
                 "given in its title): shapes compare, brightness does not.")
    else:
        scale = ("Top row: one linear colour scale in bits per pixel (dark = 0, bright = the row's largest value; "
                 "colour bar on the right), so brightness compares across β. Bottom row: each map on its own linear "
                 "scale, 0 … its maximum (in its title), so shapes compare across layers, brightness does not.")
    st.caption(
        f"{scale} Hover for values. Titles: p = p(target) with the bottleneck, and the total bits that pass it; "
        f"a grey hatched “{LOST_CLASS_MARK}” square marks a setting where the bottleneck discarded the class (its "
        "map, drained of the class, is not shown)."
    )


through_app()
st.title("β × layer")
grids = st.session_state.get(GRIDS_KEY, {})
last = st.session_state.get(LAST_KEY)
last = last if last in grids else None
if presentation():
    # For a room: the grid first on screen and as large as the screen allows; the controls under it, in an
    # expander that folds away once a grid exists; the explanation at the end.
    grid_box = st.container(key=GRID_BOX_KEY)
    fold_controls(last)
    controls = st.expander("Image, network and settings", key=CONTROLS_KEY, on_change="rerun",
                           icon=":material/tune:")
    intro = st.container()
else:
    intro = st.container()
    controls = st.container()
    grid_box = st.container(key=GRID_BOX_KEY)
with intro:
    st.markdown(INTRO)
with controls:
    inputs = input_section()
    if inputs is not None:
        with inputs.controls:
            submitted = form(inputs)
            stopped_note("bl_stop")
            done = execute(inputs, *submitted, grid_box) if submitted is not None else None
            if submitted is not None:  # a failed run leaves no "ready" line beside its error
                st.session_state[READY_KEY] = None if done is None else (st.session_state[LAST_KEY], done)
            if done is not None and presentation():
                st.rerun()  # fold the controls now: the room sees the grid, at the top
            note = None if presentation() else ready_note(inputs)
            if note is not None:
                st.success(ready_line("below", note), icon=":material/check_circle:")
last = st.session_state.get(LAST_KEY)
if last is not None and last in st.session_state.get(GRIDS_KEY, {}):
    with grid_box:
        show(st.session_state[GRIDS_KEY][last])
        # Measures the grid's column, once there is a grid to fit (its reruns would disturb the controls before).
        _room(key=ROOM_KEY, data=reported_room(), on_room_change=lambda: None)
