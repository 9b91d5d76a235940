"""The Per-Sample page's "Plant a mark" (issue #42, item 3, teaching): one click plants a mark on the current run's
crop (a patch bottom-right by default) and runs the same bottleneck on the crop without and with it; the two maps
follow side by side on one bits scale, with their difference. The logic is `iba_core.app.plant_mark`."""
from __future__ import annotations

import streamlit as st

from iba_core.app import plant_mark as pm
from iba_core.budget import Cost
from iba_core.methods import BottleneckRequest
from iba_core.render.overlays import overlay_image
from iba_core.render.paired import signed_map_png
from iba_core.selftest.marks import DEFAULT_PLACE, KINDS, make_mark
from pages.widgets.errors import shown_errors
from pages.widgets.progress import check_request, method_stats_with_progress, network_turn
from pages.widgets.text import plain

#: The last pair (`PlantedPair`) this session.
PAIR_KEY = "ps_planted"
PLACE_CHOICES = ("bottom-right", "bottom-left", "top-right", "top-left", "centre")


def plant_section(inputs, record) -> None:
    """A compact block after the run: the button (and the mark's kind and place), then the pair for this run."""
    if inputs is None or record.model_key != inputs.network.key or record.text_side is not None:
        return  # another network chosen since, or a prompt's run: nothing to plant on
    st.markdown("**Plant a mark** · does this network react to a cue, and would this map show it?")
    c1, c2, c3 = st.columns([1.2, 1, 1], vertical_alignment="bottom")
    kind = c2.selectbox("Mark", KINDS, key="ps_mark_kind", index=KINDS.index("patch"))  # the plainest cue first
    where = c3.selectbox("Where", PLACE_CHOICES, key="ps_mark_where", index=PLACE_CHOICES.index(DEFAULT_PLACE),
                         disabled=kind == "border")
    if c1.button("Plant a mark", icon=":material/approval:", key="ps_plant_button",
                 help="Runs the same bottleneck twice (without and with the mark) on this crop, for the same class."):
        with shown_errors():
            st.session_state[PAIR_KEY] = planted(inputs, record, make_mark(kind, None if kind == "border" else where))
    pair = st.session_state.get(PAIR_KEY)
    if pair is not None and pair.run_id == record.run_id:
        pair_view(record, pair)


def planted(inputs, record, mark) -> "pm.PlantedPair":
    """The pair, in one turn of the network: the run's bottleneck (its settings, layer or CoIBA range, the
    network's own statistics) on the clean and the marked crop, within the app's budget."""
    pm.check_plantable(inputs.network)
    layers = record.layers
    method = BottleneckRequest(record.result.settings, layer=record.layer,
                               layer_range=(layers[0], layers[-1]) if layers else None).method()
    per_run = method.forward_passes(inputs.network, *inputs.x.shape[-2:])
    check_request(Cost.part("bottleneck steps", 2 * per_run), "Planting a mark (two runs)", "choose fewer steps")
    method_stats_with_progress(inputs, method, record.where, None)
    with network_turn(inputs.shared) as network, st.spinner("Running the bottleneck without and with the mark…"):
        return pm.planted_pair(network, method, record.cropped, record.result.target, mark, record.run_id)


def pair_view(record, pair) -> None:
    """Without and with the mark on one bits scale, and their difference (blue: fewer bits with it, red: more)."""
    top = pair.top
    c1, c2, c3 = st.columns(3)
    c1.image(overlay_image(record.cropped, pair.clean.heatmap, opacity=0.6, top=top, legend=True),
             caption="Without the mark", width="stretch")
    c2.image(overlay_image(pair.marked_crop, pair.marked.heatmap, opacity=0.6, top=top, legend=True),
             caption="With the mark", width="stretch")
    scale = float(abs(pair.difference()).max())
    c3.image(signed_map_png(pair.difference(), scale, "with − without, bits / pixel"), caption="With − without",
             width="stretch")
    st.caption(plain(pm.pair_sentence(pair, record.class_name)) + f" Both maps on one scale: 0 – {top:.3g} bits / "
               "pixel; both runs here use the network's own feature statistics and this run's settings. One mark "
               "tells of one cue only: a network that ignores it leaves nothing for a map to show.")
