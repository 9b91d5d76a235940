"""Compare page: several attribution methods on one image, side by side (paper Fig. 4 for the user's image)."""
from __future__ import annotations

import streamlit as st

from iba_core.app.checkpoints import ReadoutCheckpoint, readout_checkpoints, readout_dirs, readout_training_command
from iba_core.app.choices import (
    DEFAULT_COMPARE_METHODS,
    READOUT_METHOD,
    MethodChoices,
    compare_choices,
    compare_request,
)
from iba_core.app.error_log import error_text
from iba_core.app.maps import CachedMap, cell_pictures, map_key
from iba_core.app.state import CompareRun, Subject
from iba_core.budget import methods_cost
from iba_core.compare import compare_target_note
from iba_core.methods import display_names
from iba_core.render.comparison import grid_png, image_cell_png, limits_text
from iba_core.render.text import format_seconds
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import method_picker, resolve_target, target_picker
from pages.widgets.inputs import Inputs, input_section, subject_caption
from pages.widgets.page import map_cache, through_app
from pages.widgets.progress import (check_request, network_turn, stats_for_methods_with_progress, stoppable,
                                   stopped_note, taking_turns)
from pages.widgets.text import plain

LAST_KEY = "cmp_last"
#: The last grid's note when the network hardly predicts its class (`compare_target_note`), set with LAST_KEY.
NOTE_KEY = "cmp_target_note"
#: The toggle that puts the bits/pixel maps on one colour scale (off: each map on its own).
SHARED_SCALE_KEY = "cmp_shared_scale"
READOUT_NONE = "—"
COLUMNS = 4

through_app()
st.title("Compare methods")
st.markdown(
    "The same image and class explained by several attribution methods. **Signed** maps (gradients, LRP ε) use a "
    "diverging scale symmetric around 0 — blue negative, white 0, red positive; **unsigned** maps a sequential one "
    "(dark = low). The bottleneck maps (Per-Sample IBA, Readout) are in **bits per pixel**, an absolute unit: each "
    "has a colour bar up to its own largest value, so each map's shape reads at a glance; one switch puts them on "
    "one scale, to compare how many bits each let through. Maps already computed for this image, network and "
    "class are reused, so adding a method only computes that one."
)


def form(inputs: Inputs, names: dict[str, str], choices: MethodChoices,
         checkpoints: list[ReadoutCheckpoint]) -> tuple | None:
    """Returns (methods, target, readout checkpoint or None) when Compare was pressed."""
    with st.form("cmp_form"):
        if st.session_state.pop("_cmp_select_all", False):
            st.session_state["cmp_methods"] = list(choices.keys)
        methods = method_picker(
            "Methods", "cmp_methods", choices, names, DEFAULT_COMPARE_METHODS,
            help="The default is quick on a CPU. Integrated Gradients, SmoothGrad, Occlusion-8 and the "
            "bottlenecks take longer (seconds to a minute each); Score-CAM minutes (one pass per channel of its "
            "layer).",
        )
        c1, c2 = st.columns(2)
        with c1:
            usable = [c for c in checkpoints if not c.error]
            readout = st.selectbox(
                "Readout Bottleneck", [READOUT_NONE, *range(len(usable))], key=f"cmp_readout_{inputs.network.key}",
                index=1 if usable else 0,
                format_func=lambda i: "none" if i == READOUT_NONE else usable[i].label,
                help="A trained readout network predicts the bottleneck mask in one pass (paper §3.3). "
                "Checkpoints: the one shipped with the app, and those found in "
                + ", ".join(f"`{d}`" for d in readout_dirs()) + ". "
                + " ".join(f"**{c.label}**: {c.details}" for c in usable),
            )
        with c2:
            target = target_picker(inputs, "cmp")
        submitted = st.form_submit_button("Compare", type="primary", icon=":material/compare:", key="cmp_run_button")
    if st.button("Select all methods", key="cmp_all", icon=":material/select_all:",
                 help="All methods that can run on this network (slow on a CPU: a few minutes)."):
        st.session_state["_cmp_select_all"] = True
        st.rerun()
    chosen = None if readout == READOUT_NONE else usable[readout]
    return (methods, target, chosen) if submitted else None


def execute(inputs: Inputs, methods: list[str], target: int | str, readout: ReadoutCheckpoint | None,
            names: dict[str, str]) -> None:
    """Fill the grid cell by cell; cached cells appear at once. The Readout, if chosen, is the last cell."""
    with shown_errors():  # previous results stay
        request = compare_request(methods, names, readout)
        keys, settings, labels = request.keys, request.settings, request.names
        target_idx = resolve_target(inputs, target)
        cache = map_cache()
        missing = cache.missing(inputs.network, inputs.image.digest, target_idx, keys, settings)
        check_request(methods_cost(missing, inputs.network, *inputs.x.shape[-2:], settings=settings),
                      "This comparison", "choose fewer methods (Score-CAM and Occlusion cost the most)")
        with stoppable("cmp_stop"):  # the statistics and the maps
            stats_for_methods_with_progress(inputs, keys)  # statistics first, with their own progress bar
            live = st.empty()
            with live.container():
                bar = st.progress(0.0, text=f"0 / {len(keys)} maps")
                rows = -(-(len(keys) + 1) // COLUMNS)
                slots = iter([c.empty() for _ in range(rows) for c in st.columns(COLUMNS)])
                next(slots).image(image_cell_png(inputs.cropped), caption="Input", width="stretch")
            failed: list[str] = []
            count = {"n": 0}

            def progress(done: int, total: int, label: str) -> None:
                bar.progress(count["n"] / max(len(keys), 1),
                             text=f"{count['n']} / {len(keys)} maps · computing {label}…")

            def on_map(key: str, entry: CachedMap, cached: bool) -> None:
                count["n"] += 1
                next(slots).image(entry.png, caption=entry.amap.name, width="stretch")

            def on_error(key: str, err: BaseException) -> None:
                failed.append(f"{labels[key]}: {error_text(err)}")  # a bug is logged, and said to be one

            with network_turn(inputs.shared) as network:
                maps = cache.maps(network, inputs.x, inputs.image.digest, target_idx, keys, settings=settings,
                                  names=labels, progress=taking_turns(inputs.shared, progress), on_map=on_map,
                                  on_error=on_error)
                note = compare_target_note(network, inputs.x, target_idx, [e.amap for e in maps.values()])
            live.empty()  # the finished grid is drawn below
        st.session_state[LAST_KEY] = CompareRun(
            Subject.of(inputs.image, inputs.network, target_idx),
            keys=[map_key(inputs.image.digest, inputs.network, target_idx, m, settings.get(m)) for m in maps],
            cropped=inputs.cropped, input_png=image_cell_png(inputs.cropped),
            readout=READOUT_METHOD in maps, readout_details=readout.details if readout is not None else "",
            failed=failed,
        )
        st.session_state[NOTE_KEY] = note


def readout_note(checkpoints: list[ReadoutCheckpoint], inputs: Inputs) -> None:
    network = inputs.network
    label = "Readout Bottleneck checkpoints" + ("" if checkpoints else " (none for this network)")
    with st.expander(label, icon=":material/inventory_2:"):
        if not checkpoints:
            st.markdown(
                f"No Readout Bottleneck checkpoint for {plain(network.spec.title)} yet: the readout must be trained for "
                "this very network. The app ships one for the offline network only and looks for trained "
                "checkpoints (`.pt` files) in " + ", ".join(f"`{d}`" for d in readout_dirs())
                + ". Training a readout needs a folder of images and runs outside the app (see the docs: "
                "docs/guide/cli/train-readout.md); put the checkpoint it writes into one of these folders. For this "
                "network:"
            )
            st.code(readout_training_command(network, inputs.shared.source), language="bash", wrap_lines=True)
        for c in checkpoints:
            st.markdown(f"- **{plain(c.label)}** — {plain(c.details)}"
                        + (f" Not usable: {plain(c.error)}" if c.error else ""))


def show(last: CompareRun) -> None:
    cache = map_cache()
    found = [(k[4], e) for k, e in ((k, cache.get(k)) for k in last.keys) if e is not None]
    entries = [e for _, e in found]
    st.divider()
    st.subheader("Maps")
    st.caption(subject_caption(last.subject))
    note = st.session_state.get(NOTE_KEY, "")
    if note:
        st.warning(f"**Hardly predicted:** {note}", icon=":material/help:")
    shared = st.toggle(
        "One colour scale for the bits maps", key=SHARED_SCALE_KEY,
        help="Off (default): each map in bits per pixel (Per-Sample IBA, Readout) runs from 0 to its own largest "
        "value, stated on its colour bar and below it, so each map's shape reads at a glance. On: they share one "
        "scale, from 0 to the largest value among them — bits are absolute, so a darker map let fewer bits "
        "through (a map with few bits may look black).",
    )
    for line in last.failed:
        st.warning(line, icon=":material/warning:")
    cols = st.columns(COLUMNS)
    cols[0].image(last.input_png, width="stretch")
    cols[0].caption(f"**Input** · the {last.cropped.width} × {last.cropped.height} crop the network sees")
    for i, ((key, entry), (png, limits)) in enumerate(zip(found, cell_pictures(entries, shared)), start=1):
        with cols[i % COLUMNS]:
            st.image(png, width="stretch")
            a = entry.amap
            whose = (" (shared)" if shared else " (its own)") if a.unit and not a.signed else ""
            st.caption(f"**{a.name}** · {format_seconds(a.seconds)} · {'signed' if a.signed else 'unsigned'} · "
                       f"scale {limits_text(a, limits)}{whose}",
                       help=(last.readout_details or None) if key == READOUT_METHOD else None)
    if not last.readout:
        with cols[(len(entries) + 1) % COLUMNS]:
            st.info("**Readout Bottleneck** — needs a trained checkpoint for this network (none chosen or found). "
                    "See *Readout Bottleneck checkpoints* above.", icon=":material/hourglass_empty:")
    about = last.subject
    png = grid_png([e.amap for e in entries], last.cropped, shared_scale=shared,
                   title=f"{about.image} · {about.model} · {about.class_name}")
    st.download_button("Download grid (PNG)", png, f"compare_{about.image.rsplit('.', 1)[0]}.png", "image/png",
                       on_click="ignore", icon=":material/download:", key="cmp_download")


names = display_names()
inputs = input_section()
if inputs is not None:
    with inputs.controls:
        checkpoints = readout_checkpoints(inputs.network.key, aliases=[inputs.shared.source])
        submitted = form(inputs, names, compare_choices(inputs.network), checkpoints)
        readout_note(checkpoints, inputs)
        if submitted is not None:
            execute(inputs, *submitted, names)
        stopped_note("cmp_stop")
last = st.session_state.get(LAST_KEY)
if last is not None:
    show(last)
