"""Evaluate page: how good are the maps for this image? Degradation, sanity check and bounding box (paper §4),
and the field's yardsticks: insertion / deletion, ROAD, the pointing game and energy pointing (issue #29)."""
from __future__ import annotations

import time

import streamlit as st

from iba_core.app.choices import (
    default_box,
    DEFAULT_EVALUATE_METHODS,
    DEFAULT_POINTS,
    default_sanity_method,
    method_choices,
    sanity_choices,
)
from iba_core.app.evaluation import (
    BoxRun,
    DegradationRun,
    SanityRun,
    YardstickRun,
    box_run,
    box_text,
    chart_colours,
    check_yardstick_settings,
    degradation_for,
    degradation_passes,
    degradation_rows,
    forward_passes,
    large_box_warning,
    MANY_PASSES,
    page_metrics,
    PAGE_CHARTED,
    pointing_box,
    pointing_rows,
    progress_text,
    sanity_levels,
    sanity_strip,
    table_columns,
    yardstick_csv,
    yardstick_rows,
    yardstick_run,
    yardsticks_cost,
    yardsticks_for,
)
from iba_core.app.inputs import box_input
from iba_core.app.state import Subject
from iba_core.budget import Cost, methods_cost
from iba_core.errors import UserError
from iba_core.methods import display_names
from iba_core.metrics import registry
from iba_core.metrics.bbox import LARGEST_BOX_SHARE, preprocess_sizes
from iba_core.metrics.common import stable_seed
from iba_core.metrics.degradation import DEGRADATION_TILES, default_tile
from iba_core.metrics.insertion_deletion import PROTOCOL_NAMES, PROTOCOLS, protocol_from
from iba_core.metrics.pointing import POINTING_TOLERANCE
from iba_core.metrics.road import ROAD_REMOVED, check_removed
from iba_core.metrics.sanity import normalise_heatmap
from iba_core.progress import ProgressFn
from iba_core.render.figures import (PRESENTATION_ZOOM, degradation_figure, insertion_deletion_figure, road_figure,
                                     ssim_figure)
from iba_core.render.sanity import sanity_strip_png, sanity_strip_width
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import method_picker, resolve_target, target_picker
from pages.widgets.inputs import Inputs, input_section, subject_caption
from pages.widgets.page import (map_cache, presentation, remember_choice, request_budget, restore_choice,
                                through_app)
from pages.widgets.progress import (check_request, network_turn, stats_for_methods_with_progress, stoppable,
                                   stopped_note, taking_turns)

DEG_KEY, SAN_KEY, BOX_KEY, YARD_KEY = "ev_degradation", "ev_sanity", "ev_bbox", "ev_yardsticks"
PLOT_CONFIG = {"displayModeBar": False}


def table(rows: list[dict], key: str) -> None:
    """A results table whose columns are wide enough for their headers and values (none clipped), each metric's
    header with its direction (↑ higher is better, ↓ lower: the metric registry's)."""
    config = {name: (st.column_config.NumberColumn(c["label"], width=c["width"], help=c["help"], format="%.4f")
                     if c["decimals"] else st.column_config.Column(c["label"], width=c["width"], help=c["help"]))
              for name, c in table_columns(rows).items()}
    st.dataframe(rows, hide_index=True, key=key, column_config=config, width="content")

through_app()
st.title("Evaluate")
st.markdown(
    "Four checks of the attribution maps for your image: three from the paper (§4) and the field's yardsticks. "
    "**Degradation:** remove tiles in the order a map ranks them — most relevant first (MoRF) or least relevant "
    "first (LeRF); a good map makes p(target) fall fast under MoRF and slowly under LeRF, so a large area between "
    "the curves is better. **Sanity check:** randomise the network's weights from the logits down; a map that "
    "explains the network should change (SSIM falls). **Bounding box:** the share of the map's top pixels that lie "
    "inside an object box you give. **The field's yardsticks:** insertion and deletion curves, ROAD, the pointing "
    "game and energy pointing, as later papers report them. Each section runs on its own button."
)


def choices(inputs: Inputs, names: dict[str, str]) -> tuple[list[str], int | str]:
    """Methods and class for every section (no form: each section has its own button). The methods get the whole
    width: in half of it only the first method's chip showed in full."""
    methods = method_picker(
        "Methods", "ev_methods", method_choices(inputs.network), names, DEFAULT_EVALUATE_METHODS,
        help="Maps are shared with the Compare page: one computed there is not computed again.", remember=True,
    )
    target = target_picker(inputs, "ev")
    return methods, target


def remember_choices(*keys: str) -> None:
    """Keep the choices of a form's widgets for every page (its submit button's on_click: a widget in a form
    has no on_change of its own)."""
    for key in keys:
        remember_choice(key)


def reporting(bar, what: str) -> ProgressFn:
    """A progress callback that shows "<what> done / total · label" on the progress bar `bar`."""

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / max(total, 1), text=f"{what} {done} / {total} · {label}")

    return progress


def timed_reporting(bar) -> ProgressFn:
    """A progress callback that shows what is measured, the share done and the time left on `bar`."""
    started = time.monotonic()

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=progress_text(done, total, label, time.monotonic() - started))

    return progress


def check_cost(inputs: Inputs, methods: list[str], target: int, measured: Cost, what: str,
               fewer: str = "choose fewer methods") -> None:
    """Refuse a section's request above the app's budget before anything runs: the maps not cached yet and what
    the section measures on them (`measured`)."""
    if not methods:
        raise UserError("Choose at least one method.")
    missing = map_cache().missing(inputs.network, inputs.image.digest, target, methods)
    check_request(methods_cost(missing, inputs.network, *inputs.x.shape[-2:]) + measured, what, fewer)


def maps_for(inputs: Inputs, methods: list[str], target: int, bar) -> dict:
    """{key: AttributionMap}, computing the maps not in the session's cache (progress on `bar`), making way for
    other sessions between methods."""
    cache = map_cache()
    stats_for_methods_with_progress(inputs, cache.missing(inputs.network, inputs.image.digest, target, methods))
    with network_turn(inputs.shared) as network:
        entries = cache.maps(network, inputs.x, inputs.image.digest, target, methods,
                             progress=taking_turns(inputs.shared, reporting(bar, "Maps")))
    return {k: e.amap for k, e in entries.items()}


def subject(inputs: Inputs, target: int) -> Subject:
    return Subject.of(inputs.image, inputs.network, target)


# ---- degradation -------------------------------------------------------------------------------


def degradation_section(inputs: Inputs, methods: list[str], target: int | str, names: dict[str, str]) -> None:
    st.subheader("Degradation (MoRF / LeRF)")
    with st.form("ev_deg_form", border=False):
        c1, c2, c3 = st.columns([1, 1, 1])
        height, width = inputs.x.shape[-2:]
        first = DEGRADATION_TILES.index(default_tile(height, width))
        # keyed by the crop: a network with another crop starts from the tile that fits it
        tile = c1.radio("Tile size", DEGRADATION_TILES, index=first, key=f"ev_tile:{height}x{width}",
                        horizontal=True, format_func=lambda t: f"{t} × {t}",
                        help=f"The paper uses {' and '.join(f'{t} × {t}' for t in DEGRADATION_TILES)} tiles.")
        points = c2.number_input(
            "Points per curve", 2, 1000, DEFAULT_POINTS, key="ev_points",
            help="Measure after this many evenly spaced numbers of removed tiles (fewer = faster). "
            "Enter a number ≥ the number of tiles + 1 for every step, as in the paper.",
        )
        pressed = c3.form_submit_button("Compute curves", type="primary", icon=":material/show_chart:",
                                        key="ev_deg_button")
    if pressed:
        with shown_errors():  # previous results stay
            target_idx = resolve_target(inputs, target)
            per_map = degradation_passes(*inputs.x.shape[-2:], int(tile), int(points))
            check_cost(inputs, methods, target_idx, Cost.part("curves", len(methods) * per_map),
                       "These degradation curves", "choose fewer methods or points per curve")
            bar = st.progress(0.0, text="Starting…")
            with stoppable("ev_deg_stop"):
                maps = maps_for(inputs, methods, target_idx, bar)
                with network_turn(inputs.shared) as network:
                    curves = degradation_for(network, inputs.x, maps, target_idx, int(tile), int(points),
                                             taking_turns(inputs.shared, reporting(bar, "Curves")))
            bar.empty()
            st.session_state[DEG_KEY] = DegradationRun(subject(inputs, target_idx), curves, int(tile))
    stopped_note("ev_deg_stop")
    run: DegradationRun | None = st.session_state.get(DEG_KEY)
    if run is not None:
        st.caption(subject_caption(run.subject))
        st.plotly_chart(degradation_figure(run.curves, names, colours=chart_colours(list(run.curves))),
                        key="ev_deg_chart", theme=None, config=PLOT_CONFIG)
        table(degradation_rows(run.curves, names), "ev_deg_table")
        st.caption(
            f"{run.tile} × {run.tile} tiles. Curves scaled as s = (p − b)/(t₁ − b) with this image's "
            "top-1 probability t₁ and p(target) with every tile removed b. Area: LeRF − MoRF, higher is better; "
            "≈ 0 for a random ranking."
        )


# ---- sanity check ------------------------------------------------------------------------------


def sanity_section(inputs: Inputs, target: int | str, names: dict[str, str]) -> None:
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
        pressed = c3.form_submit_button("Run sanity check", type="primary", icon=":material/shuffle:",
                                        key="ev_san_button")
    if pressed:
        with shown_errors():
            target_idx = resolve_target(inputs, target)
            check_request(methods_cost([method], inputs.network, *inputs.x.shape[-2:], repeat=int(n_levels) + 1),
                          "This sanity check", "choose fewer randomisation steps or a faster method")
            bar = st.progress(0.0, text="Starting…")
            with stoppable("ev_san_stop"), network_turn(inputs.shared) as network:
                # each step maps a randomised copy of the network: the shared one may serve others in between
                strip = sanity_strip(network, inputs.x, target_idx, method, int(n_levels),
                                     taking_turns(inputs.shared, reporting(bar, "Step")))
            bar.empty()
            st.session_state[SAN_KEY] = SanityRun(subject(inputs, target_idx), strip)
    stopped_note("ev_san_stop")
    run: SanityRun | None = st.session_state.get(SAN_KEY)
    if run is not None:
        st.caption(subject_caption(run.subject))
        strip = run.strip
        # Shown at the width it was drawn for (not stretched to the column), so its titles keep their size.
        zoom = PRESENTATION_ZOOM if presentation() else 1.0
        st.image(sanity_strip_png(strip, normalise_heatmap, zoom=zoom), width=sanity_strip_width(strip, zoom),
                 caption=f"{strip.method}: the map after each randomisation step (each normalised to its "
                 "1st–99th percentile, as the SSIM sees it).")
        st.plotly_chart(ssim_figure(strip), key="ev_ssim_chart", theme=None, config=PLOT_CONFIG)


# ---- bounding box ------------------------------------------------------------------------------


def box_inputs(inputs: Inputs) -> tuple[str, bytes | None]:
    """The object box, typed in the crop or from a Pascal-VOC XML: one input for the bounding-box ratio and the
    pointing game (outside the sections' forms, so both read what is shown)."""
    resize, crop = preprocess_sizes(inputs.network.preprocess)  # the network's own preprocessing, as the CLI's
    c1, c2 = st.columns(2)
    # kept across pages; the widget is given no value of its own (both ways, Streamlit inserts a warning)
    restore_choice("ev_box", ", ".join(map(str, default_box(crop))))
    text = c1.text_input(f"Box x0, y0, x1, y1 (pixels of the {crop} crop)", key="ev_box",
                         on_change=remember_choice, args=("ev_box",),
                         help="Used by the bounding-box ratio and the pointing game below.")
    xml = c2.file_uploader("…or a Pascal-VOC XML for the original image", type=["xml"], key="ev_box_xml",
                           help="ImageNet's validation boxes use this format; the boxes are mapped onto the "
                           f"crop as the network's preprocessing maps the image (resize {resize}, centre-crop "
                           f"{crop}). It overrides the typed box.")
    return text, None if xml is None else xml.getvalue()


def bbox_section(inputs: Inputs, methods: list[str], target: int | str) -> tuple[str, bytes | None]:
    """The bounding-box ratio; returns the object box as given (the yardsticks' pointing game reads it too)."""
    st.subheader("Bounding box")
    preprocess = inputs.network.preprocess
    box = box_inputs(inputs)
    with st.form("ev_box_form", border=False):
        pressed = st.form_submit_button("Score maps", type="primary", icon=":material/crop_free:",
                                        key="ev_box_button")
    if pressed:
        with shown_errors():
            mask, boxes = box_input(*box, preprocess)
            target_idx = resolve_target(inputs, target)
            check_cost(inputs, methods, target_idx, Cost(), "These box scores")  # the maps; the scores cost none
            bar = st.progress(0.0, text="Starting…")
            with stoppable("ev_box_stop"):
                maps = maps_for(inputs, methods, target_idx, bar)
            bar.empty()
            st.session_state[BOX_KEY] = box_run(subject(inputs, target_idx), maps, mask, boxes, inputs.cropped)
    stopped_note("ev_box_stop")
    run: BoxRun | None = st.session_state.get(BOX_KEY)
    if run is not None:
        st.caption(subject_caption(run.subject))
        left, right = st.columns([1, 2])
        left.image(run.picture, caption="The box on the crop", width=run.picture.width)
        with right:
            table(run.rows, "ev_box_table")
            st.caption(
                f"bbox ratio: share of the map's n highest pixels inside the box, n = the box's size "
                f"({run.share:.0%} of the crop, which is also what a random map scores). Higher is better. "
                f"The paper skips boxes larger than {LARGEST_BOX_SHARE:.0%} of the crop."
            )
            warning = large_box_warning(run.share, "a random map scores about as high; the ratio says little here.")
            if warning:
                st.warning(warning, icon=":material/warning:")
    return box


# ---- the field's yardsticks ----------------------------------------------------------------------


def protocol_choice(crop: int) -> tuple[str, float | None]:
    """The insertion / deletion protocol and pixels per step chosen (None: the protocol's), with the step's cost."""
    # The protocol and step lie outside the form, so the step's cost is said as it is typed; every choice here
    # is kept across pages (the form's on its button), each widget given no value of its own when restored.
    c1, c2 = st.columns([1, 2])
    restore_choice("ev_protocol", next(iter(PROTOCOLS)))
    key = c1.radio("Insertion / deletion protocol", list(PROTOCOLS), key="ev_protocol", horizontal=True,
                   format_func=lambda k: PROTOCOL_NAMES.get(k, k), on_change=remember_choice, args=("ev_protocol",),
                   help=" ".join(p.describe() for p in PROTOCOLS.values()))
    restore_choice("ev_step", None)
    step = c2.number_input(
        "Pixels per step", 1, crop * crop, None, key="ev_step", placeholder="the protocol's",
        on_change=remember_choice, args=("ev_step",),
        help="Pixels inserted or deleted between two measurements; empty: the protocol's own "
        f"({', '.join(f'{PROTOCOL_NAMES.get(k, k)}: {p.step:,}' for k, p in PROTOCOLS.items())}). More is faster and coarser.")
    passes = forward_passes(crop, PROTOCOLS[key].step if step is None else int(step))
    if passes > MANY_PASSES:
        budget = request_budget()
        c2.caption(f"{passes:,} forward passes per method for insertion and deletion (⌈{crop}·{crop} / step⌉ + 1 "
                   "a curve): a long run on a CPU; a larger step is faster."
                   + (f" This app allows {budget:,} passes a request." if budget else ""))
    return key, step


def yardsticks_form() -> tuple[list, bool, bool]:
    """The ROAD percentages and the pointing choice, and whether "Measure yardsticks" was pressed."""
    with st.form("ev_yard_form", border=False):
        # the percentages and the pointing choice each get the form's full width: in a third of it the nine chips
        # and the checkbox's sentence were cut off
        restore_choice("ev_removed", list(ROAD_REMOVED))
        removed = st.multiselect(
            "ROAD: % of pixels removed", ROAD_REMOVED, key="ev_removed", format_func=lambda p: f"{p} %",
            help="The points of ROAD's MoRF and LeRF curves (the ROAD paper's 10 … 90 %); fewer is faster.")
        c4, c5 = st.columns([3, 1], vertical_alignment="center")
        restore_choice("ev_pointing", False)
        pointing = c4.checkbox(f"Pointing game and energy pointing against the object box above "
                               f"(a hit within {POINTING_TOLERANCE} px)", key="ev_pointing",
                               help="Off until you give the object's box: the box shown above is only an example.")
        pressed = c5.form_submit_button("Measure yardsticks", type="primary", icon=":material/straighten:",
                                        key="ev_yard_button", on_click=remember_choices,
                                        args=("ev_removed", "ev_pointing"))
    return removed, pointing, pressed


def measure_yardsticks(inputs: Inputs, methods: list[str], target: int | str, box: tuple[str, bytes | None],
                       key: str, step: float | None, removed: list, pointing: bool) -> None:
    """Measure the yardsticks of every chosen method and keep the run in the session (errors shown, not raised)."""
    with shown_errors():  # previous results stay
        protocol = protocol_from(key, step=None if step is None else int(step))
        points = check_removed(sorted(removed))
        mask, boxes = pointing_box(*box, inputs.network.preprocess) if pointing else (None, None)
        target_idx = resolve_target(inputs, target)
        pixels = int(inputs.x.shape[-2]) * int(inputs.x.shape[-1])
        check_yardstick_settings(inputs.network, protocol, points, pointing)
        check_cost(inputs, methods, target_idx, yardsticks_cost(len(methods), pixels, protocol, points, pointing),
                   "These yardsticks", "choose fewer methods or a larger pixels-per-step")
        bar = st.progress(0.0, text="Starting…")
        with stoppable("ev_yard_stop"):
            maps = maps_for(inputs, methods, target_idx, bar)
            with network_turn(inputs.shared) as network:
                results = yardsticks_for(network, inputs.x, maps, target_idx, protocol, removed=points,
                                         mask=mask, seed=stable_seed(inputs.image.digest),
                                         progress=taking_turns(inputs.shared, timed_reporting(bar)))
        bar.empty()
        st.session_state[YARD_KEY] = yardstick_run(subject(inputs, target_idx), results, protocol,
                                                   POINTING_TOLERANCE, mask, boxes, inputs.cropped)


def pointing_results(run: YardstickRun, names: dict[str, str]) -> None:
    """The picture of the box and the maps' maxima beside the pointing table, with what the scores mean."""
    left, right = st.columns([1, 2])
    left.image(run.picture, width=run.picture.width,
               caption=f"The box and each map's maximum (its method's colour), circled at {run.tolerance} px")
    with right:
        table(pointing_rows(run, names), "ev_point_table")
        st.caption(
            f"Scored against the box {box_text(run.boxes or [])} (pixels of the crop). "
            f"Pointing: a hit when the map's maximum lies within {run.tolerance} px of a box; energy: the "
            f"share of the map's positive mass inside the boxes ({run.box_share:.0%} of the crop, what a "
            "map spread evenly scores); EHR: InputIBA's effective heat ratio."
        )
        warning = large_box_warning(run.box_share or 0.0,
                                    "a random map hits often; the pointing game says little here.")
        if warning:
            st.warning(warning, icon=":material/warning:")


def yardstick_results(run: YardstickRun, names: dict[str, str]) -> None:
    """A yardstick run's curves, table, pointing scores and CSV download."""
    st.caption(subject_caption(run.subject))
    st.caption(run.protocol.describe())
    colours = chart_colours(list(run.methods))  # one colour per method, whichever others are chosen
    st.plotly_chart(insertion_deletion_figure({k: r.pixels for k, r in run.methods.items()}, names,
                                              colours=colours), key="ev_id_chart", theme=None, config=PLOT_CONFIG)
    st.plotly_chart(road_figure({k: r.road for k, r in run.methods.items()}, names, colours=colours),
                    key="ev_road_chart", theme=None, config=PLOT_CONFIG)
    table(yardstick_rows(run, names), "ev_yard_table")
    st.caption(
        "Insertion: pixels in the map's order put back into the blurred image; deletion: taken away; areas by "
        "the trapezoid on [0, 1]. ROAD: the pixels removed replaced by noisy linear imputation (at "
        f"{', '.join(f'{v:g}' for v in run.removed)} %), MoRF and LeRF the means of their curves. "
        + " ".join(c.help for m in page_metrics(False) if m.name not in PAGE_CHARTED for c in m.columns)
    )
    if run.picture is not None:
        pointing_results(run, names)
    st.download_button("Numbers (CSV)", yardstick_csv(run, names), "yardsticks.csv", "text/csv",
                       on_click="ignore", icon=":material/download:", key="ev_yard_csv")


def yardsticks_section(inputs: Inputs, methods: list[str], target: int | str, names: dict[str, str],
                       box: tuple[str, bytes | None]) -> None:
    """The field's yardsticks: the protocol and form, a measurement when asked, and the last run's results."""
    st.subheader(f"The field's yardsticks ({', '.join(m.title for m in registry.per_map())})")
    key, step = protocol_choice(preprocess_sizes(inputs.network.preprocess)[1])
    removed, pointing, pressed = yardsticks_form()
    if pressed:
        measure_yardsticks(inputs, methods, target, box, key, step, removed, pointing)
    stopped_note("ev_yard_stop")
    run: YardstickRun | None = st.session_state.get(YARD_KEY)
    if run is not None:
        yardstick_results(run, names)


names = display_names()
inputs = input_section()
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
    box = bbox_section(inputs, methods, target)
    st.divider()
    yardsticks_section(inputs, methods, target, names, box)
