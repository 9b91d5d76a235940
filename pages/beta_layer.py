"""β × layer page (paper Fig. 3 for the user's image): how β and the bottleneck's depth shape the map."""
from __future__ import annotations

import streamlit as st

from iba_core.app.maps import grid_key, keep
from iba_core.app.state import GridRun, Subject
from iba_core.beta_layer import DEFAULT_BETAS, LAYER_ROW_BETA, GridCell, beta_layer_grid, depth_layers, lost_class_warning
from iba_core.per_sample import BottleneckSettings
from iba_core.render.figures import grid_figure
from pages import _widgets as ui

GRIDS_KEY, LAST_KEY = "bl_grids", "bl_last"
PER_MAP_KEY = "bl_per_map"  # the checkbox: each map on its own colour scale (off: one scale per row)
MAX_KEPT = 6  # grids kept per session (each ~2 MB of heatmaps)
MAP_CONFIG = {"displayModeBar": False}  # the tool bar would cover the cell titles

ui.through_app()
st.title("β × layer")
st.markdown(
    "How the two main choices shape the heatmap, for your image (the paper's Figure 3). "
    f"**Top row:** β·k from {DEFAULT_BETAS[0]:g} to {DEFAULT_BETAS[-1]:g} at one layer — larger β lets fewer bits "
    f"through and p(target) drops. **Bottom row:** layers across the network's depth at β·k = {LAYER_ROW_BETA:g} — "
    "early layers give sharp, detailed maps, deep layers coarse ones. Bits are absolute: the maps of a row share "
    "one colour scale in bits per pixel, so a map that lets few bits through looks dark."
)


def compute(inputs: ui.Inputs, layer: str, target: int, settings: BottleneckSettings, folder: str | None,
            n: int) -> list[GridCell]:
    """Fill the grid cell by cell, redrawing it after each one."""
    layers = depth_layers(inputs.network.spec, include=layer)
    total = len(DEFAULT_BETAS) + len(layers)
    bar = st.progress(0.0, text=f"0 / {total} cells")
    figure = st.empty()
    cells: list[GridCell] = []

    def on_cell(cell: GridCell) -> None:
        cells.append(cell)
        figure.plotly_chart(grid_figure(cells, height=330, shared_scale=not st.session_state.get(PER_MAP_KEY)),
                            key=f"bl_live_{len(cells)}", theme=None, config=MAP_CONFIG)

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / total, text=f"{done} / {total} cells · last: {label}")

    with ui.network_turn(inputs.shared) as network:
        result = beta_layer_grid(
            network, inputs.x, target, layer,
            stats_for=lambda name: ui.stats_with_progress(inputs, name, folder, n),
            layers=layers, settings=settings, progress=progress, on_cell=on_cell,
        )
    bar.empty()
    figure.empty()
    return result


def form(inputs: ui.Inputs) -> tuple | None:
    """The settings form; returns (layer, settings, target, folder, n) when it was submitted."""
    spec = inputs.network.spec
    with st.form("bl_form"):
        c1, c2 = st.columns(2)
        with c1:
            layer = ui.layer_picker(inputs, "bl", label="Layer for the β row")
            st.caption(
                f"Layer row: {', '.join(depth_layers(spec, include=layer))} — the last layer of each stage, "
                "spread over the depth, always including the chosen layer."
            )
        with c2:
            target = ui.target_picker(inputs, "bl")
        settings, folder, n = ui.settings_row(inputs, "bl", layer)
        submitted = st.form_submit_button("Compute grid", type="primary", icon=":material/grid_view:",
                                          key="bl_run_button")
    return (layer, settings, target, folder, n) if submitted else None


def execute(inputs: ui.Inputs, layer: str, settings: BottleneckSettings, target: int | str, folder: str | None,
            n: int) -> None:
    """Compute the grid (or reuse this session's identical one) and make it the one shown."""
    try:
        settings = settings.validate()
        target_idx = ui.resolve_target(inputs, target)
        key = grid_key(inputs.image.digest, inputs.network, layer, target_idx, settings, folder, n)
        grids: dict = st.session_state.setdefault(GRIDS_KEY, {})
        if key not in grids:  # same image and settings: reuse, the result would be identical
            cells = compute(inputs, layer, target_idx, settings, folder, n)
            run = GridRun(Subject.of(inputs.image.name, inputs.network, target_idx), cells, layer, settings)
            keep(grids, key, run, MAX_KEPT)
        st.session_state[LAST_KEY] = key
        st.success("The grid is ready below.", icon=":material/check_circle:")
    except Exception as err:  # noqa: BLE001 - shown to the user; previous results stay
        ui.show_error(err)


def show(entry: GridRun) -> None:
    st.divider()
    st.subheader("Grid")
    st.caption(
        f"{ui.subject_caption(entry.subject)} · {entry.settings.steps} steps × batch {entry.settings.batch}"
    )
    per_map = st.checkbox(
        "Scale each map on its own", key=PER_MAP_KEY,
        help="Off (default): the maps of a row share one colour scale in bits per pixel (bits are absolute), so "
        "brightness compares across the row. On: each map runs from 0 to its own maximum, which shows its shape "
        "but not how many bits it let through.",
    )
    lost = lost_class_warning(entry.cells)
    if lost:
        st.warning(f"**Class lost** — {lost} (Paper §4.1: β ≥ 1000/k discards all information.)",
                   icon=":material/warning:")
    st.plotly_chart(grid_figure(entry.cells, shared_scale=not per_map), key="bl_grid", theme=None,
                    config=MAP_CONFIG)
    if per_map:
        scale = ("Each map has its own colour scale (dark = 0 bits / pixel, bright = that map's maximum, given in its "
                 "title): shapes compare, brightness does not.")
    else:
        scale = ("One colour scale per row, in bits per pixel (dark = 0, bright = the row's largest value; colour "
                 "bars on the right): brightness compares across the row.")
    st.caption(
        f"{scale} Hover for values. Titles: p = p(target) with the bottleneck, and the total bits that pass it; "
        "⚠ class lost marks a cell where the bottleneck discarded the class."
    )


inputs = ui.input_section()
if inputs is not None:
    with inputs.controls:  # the form, and the grid filling right under it, sit next to the image
        submitted = form(inputs)
        if submitted is not None:
            execute(inputs, *submitted)
last = st.session_state.get(LAST_KEY)
if last is not None and last in st.session_state.get(GRIDS_KEY, {}):
    show(st.session_state[GRIDS_KEY][last])
