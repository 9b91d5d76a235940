"""Evaluate page: how good are the maps for this image? Degradation, sanity check and bounding box (paper §4)."""
from __future__ import annotations

import streamlit as st

from iba_core.app.choices import (
    DEFAULT_BOX,
    DEFAULT_EVALUATE_METHODS,
    DEFAULT_POINTS,
    DEGRADATION_TILES,
    default_sanity_method,
    method_choices,
    sanity_choices,
)
from iba_core.app.evaluation import (
    bbox_rows,
    degradation_for,
    degradation_rows,
    large_box,
    sanity_levels,
    sanity_strip,
    table_columns,
)
from iba_core.app.inputs import box_input
from iba_core.methods import display_names
from iba_core.render.figures import degradation_figure, ssim_figure
from iba_core.render.overlays import draw_boxes
from iba_core.render.sanity import sanity_strip_png
from pages import _widgets as ui

DEG_KEY, SAN_KEY, BOX_KEY = "ev_degradation", "ev_sanity", "ev_bbox"
PLOT_CONFIG = {"displayModeBar": False}


def table(rows: list[dict], key: str) -> None:
    """A results table whose columns are wide enough for their headers and values (none clipped)."""
    config = {name: st.column_config.Column(name, width=c["width"], help=c["help"])
              for name, c in table_columns(rows).items()}
    st.dataframe(rows, hide_index=True, key=key, column_config=config, width="content")

ui.through_app()
st.title("Evaluate")
st.markdown(
    "Three checks of the attribution maps for your image (paper §4). **Degradation:** remove tiles in the order "
    "a map ranks them — most relevant first (MoRF) or least relevant first (LeRF); a good map makes p(target) "
    "fall fast under MoRF and slowly under LeRF, so a large area between the curves is better. **Sanity check:** "
    "randomise the network's weights from the logits down; a map that explains the network should change (SSIM "
    "falls). **Bounding box:** the share of the map's top pixels that lie inside an object box you give. "
    "Each section runs on its own button."
)


def choices(inputs: ui.Inputs, names: dict[str, str]) -> tuple[list[str], int | str]:
    """Methods and class for all three sections (no form: each section has its own button)."""
    c1, c2 = st.columns(2)
    with c1:
        methods = ui.method_picker(
            "Methods", "ev_methods", method_choices(inputs.network), names, DEFAULT_EVALUATE_METHODS,
            help="Maps are shared with the Compare page: one computed there is not computed again.",
        )
    with c2:
        target = ui.target_picker(inputs, "ev")
    return methods, target


def maps_for(inputs: ui.Inputs, methods: list[str], target: int, bar) -> dict:
    """{key: AttributionMap}, computing the maps not in the session's cache (progress on `bar`)."""
    if not methods:
        raise ValueError("Choose at least one method.")
    cache = ui.map_cache()
    ui.stats_for_methods_with_progress(inputs, cache.missing(inputs.network, inputs.image.digest, target, methods))

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / max(total, 1), text=f"Maps {done} / {total} · {label}")

    with inputs.shared.busy() as network:
        entries = cache.maps(network, inputs.x, inputs.image.digest, target, methods, progress=progress)
    return {k: e.amap for k, e in entries.items()}


def context(inputs: ui.Inputs, target: int) -> tuple:
    return (inputs.image.digest, inputs.network.key, inputs.network.weights_id, target)


def caption(entry: dict) -> None:
    st.caption(f"{entry['image']} · {entry['model']} · explaining **{entry['class_name']}** (#{entry['target']})")


def describe(inputs: ui.Inputs, target: int) -> dict:
    return dict(image=inputs.image.name, model=inputs.network.spec.title,
                class_name=inputs.network.class_name(target), target=target, context=context(inputs, target))


# ---- degradation -------------------------------------------------------------------------------


def degradation_section(inputs: ui.Inputs, methods: list[str], target: int | str, names: dict[str, str]) -> None:
    st.subheader("Degradation (MoRF / LeRF)")
    with st.form("ev_deg_form", border=False):
        c1, c2, c3 = st.columns([1, 1, 1])
        tile = c1.radio("Tile size", DEGRADATION_TILES, index=1, key="ev_tile", horizontal=True,
                        format_func=lambda t: f"{t} × {t}", help="The paper uses 8 × 8 and 14 × 14 tiles.")
        points = c2.number_input(
            "Points per curve", 2, 1000, DEFAULT_POINTS, key="ev_points",
            help="Measure after this many evenly spaced numbers of removed tiles (fewer = faster). "
            "Enter a number ≥ the number of tiles + 1 for every step, as in the paper.",
        )
        run = c3.form_submit_button("Compute curves", type="primary", icon=":material/show_chart:",
                                    key="ev_deg_button")
    if run:
        try:
            target_idx = ui.resolve_target(inputs, target)
            bar = st.progress(0.0, text="Starting…")
            maps = maps_for(inputs, methods, target_idx, bar)

            def progress(done: int, total: int, label: str) -> None:
                bar.progress(done / max(total, 1), text=f"Curves {done} / {total} · {label}")

            with inputs.shared.busy() as network:
                curves = degradation_for(network, inputs.x, maps, target_idx, int(tile), int(points), progress)
            bar.empty()
            st.session_state[DEG_KEY] = dict(curves=curves, tile=int(tile), **describe(inputs, target_idx))
        except Exception as err:  # noqa: BLE001 - shown to the user; previous results stay
            ui.show_error(err)
    entry = st.session_state.get(DEG_KEY)
    if entry is not None:
        caption(entry)
        st.plotly_chart(degradation_figure(entry["curves"], names), key="ev_deg_chart", theme=None,
                        config=PLOT_CONFIG)
        table(degradation_rows(entry["curves"], names), "ev_deg_table")
        st.caption(
            f"{entry['tile']} × {entry['tile']} tiles. Curves scaled as s = (p − b)/(t₁ − b) with this image's "
            "top-1 probability t₁ and p(target) with every tile removed b. Area: LeRF − MoRF, higher is better; "
            "≈ 0 for a random ranking."
        )


# ---- sanity check ------------------------------------------------------------------------------


def sanity_section(inputs: ui.Inputs, target: int | str, names: dict[str, str]) -> None:
    st.subheader("Sanity check (cascading randomisation)")
    levels = sanity_levels(inputs.network)
    fast = sanity_choices(inputs.network)
    with st.form("ev_san_form", border=False):
        c1, c2, c3 = st.columns([1, 1, 1])
        method = c1.selectbox("Method", fast.keys, index=default_sanity_method(fast), key="ev_san_method",
                              format_func=lambda k: names[k],
                              help="The map is recomputed after each randomisation step; fast methods only.")
        n_levels = c2.slider("Randomisation steps", 1, len(levels), min(4, len(levels)), key="ev_san_levels",
                             help=f"Cascade from the logits down: {', '.join(levels)}.")
        run = c3.form_submit_button("Run sanity check", type="primary", icon=":material/shuffle:",
                                    key="ev_san_button")
    if run:
        try:
            target_idx = ui.resolve_target(inputs, target)
            bar = st.progress(0.0, text="Starting…")

            def progress(done: int, total: int, label: str) -> None:
                bar.progress(done / max(total, 1), text=f"Step {done} / {total} · {label}")

            with inputs.shared.busy() as network:
                strip = sanity_strip(network, inputs.x, target_idx, method, int(n_levels), progress)
            bar.empty()
            st.session_state[SAN_KEY] = dict(strip=strip, **describe(inputs, target_idx))
        except Exception as err:  # noqa: BLE001
            ui.show_error(err)
    entry = st.session_state.get(SAN_KEY)
    if entry is not None:
        caption(entry)
        strip = entry["strip"]
        st.image(sanity_strip_png(strip), width="stretch",
                 caption=f"{strip.method}: the map after each randomisation step (each normalised to its "
                 "1st–99th percentile, as the SSIM sees it).")
        st.plotly_chart(ssim_figure(strip), key="ev_ssim_chart", theme=None, config=PLOT_CONFIG)


# ---- bounding box ------------------------------------------------------------------------------


def bbox_section(inputs: ui.Inputs, methods: list[str], target: int | str) -> None:
    st.subheader("Bounding box")
    with st.form("ev_box_form", border=False):
        c1, c2, c3 = st.columns([1, 1, 1])
        text = c1.text_input("Box x0, y0, x1, y1 (pixels of the 224 crop)", ", ".join(map(str, DEFAULT_BOX)),
                             key="ev_box")
        xml = c2.file_uploader("…or a Pascal-VOC XML for the original image", type=["xml"], key="ev_box_xml",
                               help="ImageNet's validation boxes use this format; the boxes are mapped onto the "
                               "crop (resize 256, centre-crop 224). It overrides the typed box.")
        run = c3.form_submit_button("Score maps", type="primary", icon=":material/crop_free:", key="ev_box_button")
    if run:
        try:
            mask, boxes = box_input(text, None if xml is None else xml.getvalue())
            target_idx = ui.resolve_target(inputs, target)
            bar = st.progress(0.0, text="Starting…")
            maps = maps_for(inputs, methods, target_idx, bar)
            bar.empty()
            st.session_state[BOX_KEY] = dict(rows=bbox_rows(maps, mask), share=float(mask.mean()),
                                             large=large_box(mask), picture=draw_boxes(inputs.cropped, boxes),
                                             **describe(inputs, target_idx))
        except Exception as err:  # noqa: BLE001
            ui.show_error(err)
    entry = st.session_state.get(BOX_KEY)
    if entry is not None:
        caption(entry)
        left, right = st.columns([1, 2])
        left.image(entry["picture"], caption="The box on the crop", width=224)
        with right:
            table(entry["rows"], "ev_box_table")
            st.caption(
                f"bbox ratio: share of the map's n highest pixels inside the box, n = the box's size "
                f"({entry['share']:.0%} of the crop, which is also what a random map scores). Higher is better. "
                "The paper skips boxes larger than 33 % of the crop."
            )
            if entry["large"]:
                st.warning("The box covers more than 33 % of the crop; the ratio says little.",
                           icon=":material/warning:")


names = display_names()
inputs = ui.input_section()
if inputs is not None:
    with inputs.controls:
        methods, target = choices(inputs, names)
        st.caption("The results below are for the image, network and class they name; they stay until you "
                   "recompute a section.")
    st.divider()
    degradation_section(inputs, methods, target, names)
    st.divider()
    sanity_section(inputs, target, names)
    st.divider()
    bbox_section(inputs, methods, target)
