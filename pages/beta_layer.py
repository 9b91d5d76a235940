"""β × layer page (paper Fig. 3 for the user's image): how β and the bottleneck's depth shape the map."""
from __future__ import annotations

import streamlit as st

from iba_core.app.maps import grid_key, keep
from iba_core.app.state import GridRun, Subject
from iba_core.beta_layer import (
    DEFAULT_BETAS, LAYER_ROW_BETA, GridCell, GridKey, beta_layer_grid, cached_grid, depth_layers, grid_target_note,
    lost_class_warning,
)
from iba_core.per_sample import BottleneckSettings
from iba_core.render.figures import PRESENTATION_ZOOM, grid_figure
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import layer_picker, resolve_target, settings_row, target_picker
from pages.widgets.inputs import Inputs, input_section, subject_caption
from pages.widgets.page import presentation, through_app
from pages.widgets.progress import network_turn, stats_with_progress

GRIDS_KEY, LAST_KEY = "bl_grids", "bl_last"
PER_MAP_KEY = "bl_per_map"  # the checkbox: the β row's maps on their own colour scales too (off: one scale)
MAX_KEPT = 6  # grids kept per session (each ~2 MB of heatmaps); every session also finds them on disk
MAP_CONFIG = {"displayModeBar": False}  # the tool bar would cover the cell titles
LIVE_ZOOM = 0.75  # the grid filling beside the image (60 % of the page wide): a preview; the grid below is read

through_app()
st.title("β × layer")
st.markdown(
    "How the two main choices shape the heatmap, for your image (the paper's Figure 3). "
    f"**Top row:** β·k from {DEFAULT_BETAS[0]:g} to {DEFAULT_BETAS[-1]:g} at one layer — larger β lets fewer bits "
    f"through and p(target) drops. **Bottom row:** layers across the network's depth at β·k = {LAYER_ROW_BETA:g} — "
    "early layers give sharp, detailed maps, deep layers coarse ones. The top row shares one colour scale in bits "
    "per pixel (bits are absolute: a map that lets few bits through looks dark); each map of the bottom row has its "
    "own scale, 0 … its maximum given in its title, because layers of different resolution spread their bits "
    "differently (the first layers hold many more bits per pixel)."
)


def zoom() -> float:
    """How much larger the grid is drawn: PRESENTATION_ZOOM in presentation mode (the sidebar's toggle)."""
    return PRESENTATION_ZOOM if presentation() else 1.0


def compute(inputs: Inputs, key: GridKey, settings: BottleneckSettings, folder: str | None,
            n: int) -> list[GridCell]:
    """Fill the grid cell by cell, redrawing it after each one."""
    layers = list(key.layers)
    total = len(key.betas) + len(layers)
    bar = st.progress(0.0, text=f"0 / {total} cells")
    figure = st.empty()
    cells: list[GridCell] = []

    def on_cell(cell: GridCell) -> None:
        cells.append(cell)
        figure.plotly_chart(grid_figure(cells, shared_scale=not st.session_state.get(PER_MAP_KEY),
                                        zoom=LIVE_ZOOM * zoom()),
                            key=f"bl_live_{len(cells)}", theme=None, config=MAP_CONFIG)

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / total, text=f"{done} / {total} cells · last: {label}")

    with network_turn(inputs.shared) as network:
        result = beta_layer_grid(
            network, inputs.x, key.target, key.layer, betas=key.betas,
            stats_for=lambda name: stats_with_progress(inputs, name, folder, n),
            layers=layers, settings=settings, progress=progress, on_cell=on_cell,
        )
    bar.empty()
    figure.empty()
    return result


def form(inputs: Inputs) -> tuple | None:
    """The settings form; returns (layer, settings, target, folder, n) when it was submitted."""
    spec = inputs.network.spec
    with st.form("bl_form"):
        c1, c2 = st.columns(2)
        with c1:
            layer = layer_picker(inputs, "bl", label="Layer for the β row")
            st.caption(
                f"Layer row: {', '.join(depth_layers(spec, include=layer))} — the last layer of each stage, "
                "spread over the depth, always including the chosen layer."
            )
        with c2:
            target = target_picker(inputs, "bl")
        settings, folder, n = settings_row(inputs, "bl", layer)
        submitted = st.form_submit_button("Compute grid", type="primary", icon=":material/grid_view:",
                                          key="bl_run_button")
    return (layer, settings, target, folder, n) if submitted else None


def execute(inputs: Inputs, layer: str, settings: BottleneckSettings, target: int | str, folder: str | None,
            n: int) -> None:
    """Compute the grid (or reuse an identical one: this session's, or any session's from the disk cache) and
    make it the one shown."""
    with shown_errors():  # previous results stay
        settings = settings.validate()
        target_idx = resolve_target(inputs, target)
        key = grid_key(inputs.image.digest, inputs.network, layer, target_idx, settings, folder, n)
        grids: dict = st.session_state.setdefault(GRIDS_KEY, {})
        cached = key in grids
        if not cached:  # same image and settings: reuse, the result would be identical
            cells, cached = cached_grid(key, lambda: compute(inputs, key, settings, folder, n))
            run = GridRun(Subject.of(inputs.image, inputs.network, target_idx), cells, layer, settings,
                          inputs.network.head)
            keep(grids, key, run, MAX_KEPT)
        st.session_state[LAST_KEY] = key
        st.success("The grid is ready below" + (" (computed before for the same image, network and settings)."
                                                 if cached else "."), icon=":material/check_circle:")


def show(entry: GridRun) -> None:
    st.divider()
    st.subheader("Grid")
    st.caption(
        f"{subject_caption(entry.subject)} · {entry.settings.steps} steps × batch {entry.settings.batch}"
    )
    per_map = st.checkbox(
        "Scale each map on its own", key=PER_MAP_KEY,
        help="Off (default): the top row's maps share one colour scale in bits per pixel (bits are absolute), so "
        "brightness compares across the row. On: they too run from 0 to their own maximum, which shows each "
        "map's shape but not how many bits it let through. The bottom row's maps always have their own scales.",
    )
    note = grid_target_note(entry.cells, entry.head)
    if note:
        st.warning(f"**Explaining a class the network hardly predicts** — {note}", icon=":material/help:")
    lost = lost_class_warning(entry.cells)
    if lost:
        st.warning(f"**Class lost** — {lost} (Paper §4.1: β ≥ 1000/k discards all information.)",
                   icon=":material/warning:")
    st.plotly_chart(grid_figure(entry.cells, shared_scale=not per_map, zoom=zoom()), key="bl_grid", theme=None,
                    config=MAP_CONFIG)
    if per_map:
        scale = ("Each map has its own linear colour scale (dark = 0 bits / pixel, bright = that map's maximum, "
                 "given in its title): shapes compare, brightness does not.")
    else:
        scale = ("Top row: one linear colour scale in bits per pixel (dark = 0, bright = the row's largest value; "
                 "colour bar on the right), so brightness compares across β. Bottom row: each map on its own linear "
                 "scale, 0 … its maximum (in its title), so shapes compare across layers, brightness does not.")
    st.caption(
        f"{scale} Hover for values. Titles: p = p(target) with the bottleneck, and the total bits that pass it; "
        "⚠ class lost marks a cell where the bottleneck discarded the class."
    )


inputs = input_section()
if inputs is not None:
    with inputs.controls:  # the form, and the grid filling right under it, sit next to the image
        submitted = form(inputs)
        if submitted is not None:
            execute(inputs, *submitted)
last = st.session_state.get(LAST_KEY)
if last is not None and last in st.session_state.get(GRIDS_KEY, {}):
    show(st.session_state[GRIDS_KEY][last])
