"""Per-Sample Bottleneck page: fit the bottleneck for one image and show where the bits come from."""
from __future__ import annotations

import json
from dataclasses import replace

import streamlit as st

from iba_core.app.choices import DEFAULT_THRESHOLD, THRESHOLD_CHOICES
from iba_core.app.state import RunRecord
from iba_core.networks import get_spec
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck, StepInfo
from iba_core.render import figures
from iba_core.render.overlays import not_needed_fraction, not_needed_outline, overlay_image, png_bytes
from iba_core.render.report import heatmap_npy_bytes
from iba_core.render.text import format_probability
from pages import _widgets as ui

RESULT_KEY = "ps_run"
LIVE_HEIGHT = 260  # px; the live charts sit next to the image, under the form
#: Maps are read, not explored: no Plotly tool bar over their titles.
MAP_CONFIG = {"displayModeBar": False}

ui.through_app()
st.title("Per-Sample Bottleneck")
st.markdown(
    "The bottleneck adds noise to a layer's feature map and learns, for this one image, how much of each "
    "feature may pass while the network still recognises the class. The result is measured in **bits**: "
    "how much information each image region gives the network. Regions with ~0 bits are provably "
    "not needed for the prediction made through the bottleneck."
)


# ---- run ---------------------------------------------------------------------------------------


def form(inputs: ui.Inputs) -> tuple | None:
    """The settings form; returns (layer, settings, target, folder, n) when Run was pressed."""
    with st.form("ps_form"):
        c1, c2 = st.columns(2)
        with c1:
            layer = ui.layer_picker(inputs, "ps")
            beta_k = ui.beta_picker("ps")
        with c2:
            target = ui.target_picker(inputs, "ps")
        settings, folder, n = ui.settings_row(inputs, "ps", layer)
        submitted = st.form_submit_button("Run", type="primary", icon=":material/play_arrow:", key="ps_run_button")
    return (layer, replace(settings, beta_k=float(beta_k)), target, folder, n) if submitted else None


def run_live(inputs: ui.Inputs, layer: str, settings: BottleneckSettings, target: int,
             folder: str | None, n: int) -> RunRecord:
    """Statistics, then T optimisation steps with a live heatmap, λ map and loss curves."""
    live = st.empty()
    with live.container(border=True):
        stats = ui.stats_with_progress(inputs, layer, folder, n)
        bar = st.progress(0.0, text=f"**Step 0 / {settings.steps}** · starting…")
        c1, c2 = st.columns(2, gap="small")
        heat, lam, curves = c1.empty(), c2.empty(), st.empty()
        history: list[StepInfo] = []

        def on_step(info: StepInfo) -> None:
            history.append(info)
            bar.progress(info.step / info.steps, text=(
                f"**Step {info.step} / {info.steps}** · p(target) = {info.p_target:.2f} · "
                f"L_CE = {info.ce:.3f} · β·L_I = {info.beta_info:.3f} nats"
            ))
            # Distinct keys: each step puts a new chart element into the same placeholder.
            # A 2× pooled map is a quarter of the data to send each step; the final map is full size.
            heat.plotly_chart(figures.heatmap_figure(info.bits_per_pixel, "Bits per pixel", height=LIVE_HEIGHT,
                                                   downsample=2),
                              key=f"ps_live_heat_{info.step}", theme=None, config=MAP_CONFIG)
            lam.plotly_chart(figures.lambda_figure(info.lambda_mean, "λ (mean over channels)", height=LIVE_HEIGHT),
                             key=f"ps_live_lambda_{info.step}", theme=None, config=MAP_CONFIG)
            curves.plotly_chart(figures.curves_figure(history, "Losses and p(target)", height=220),
                                key=f"ps_live_curves_{info.step}", theme=None, config=MAP_CONFIG)

        with inputs.shared.busy() as loaded:
            iba = PerSampleBottleneck.for_network(loaded, layer, stats, settings)
            result = iba.attribute(inputs.x, target=target, callback=on_step)
    live.empty()  # the result section below shows the final state
    return RunRecord(
        image_name=inputs.image.name, model_key=inputs.loaded.key, layer=layer,
        class_name=inputs.loaded.categories[result.target], cropped=inputs.cropped, result=result,
        stats_description=stats.describe(),
    )


def execute(inputs: ui.Inputs, layer: str, settings: BottleneckSettings, target: int | str,
            folder: str | None, n: int) -> None:
    """The live run; its record replaces the previous one only if it succeeds."""
    try:
        record = run_live(inputs, layer, settings.validate(), ui.resolve_target(inputs, target), folder, n)
    except Exception as err:  # noqa: BLE001 - shown to the user; previous results stay
        ui.show_error(err)
        return
    st.session_state[RESULT_KEY] = record
    r = record.result
    st.success(
        f"Done in {r.seconds:.1f} s: {r.total_bits:,.0f} bits, p(target) "
        f"{format_probability(r.p_without)} → {format_probability(r.p_with)}. The full result is below.",
        icon=":material/check_circle:",
    )


# ---- result ------------------------------------------------------------------------------------


def results(record: RunRecord) -> None:
    """Numbers, maps, the "not needed" view and downloads for the last finished run."""
    r, s = record.result, record.result.settings
    st.divider()
    st.subheader("Result", anchor="result")
    st.caption(
        f"{record.image_name} · {get_spec(record.model_key).title} · layer {record.layer} · "
        f"explaining **{record.class_name}** (#{r.target}) · β·k = {s.beta_k:g} · "
        f"{len(r.history)} steps × batch {s.batch}"
    )
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Information used", f"{r.total_bits:,.0f} bits",
              help="The sum of the heatmap: bits that pass the bottleneck for this image.")
    m2.metric("p(target) without bottleneck", format_probability(r.p_without))
    m3.metric("p(target) with bottleneck", format_probability(r.p_with),
              delta=f"{100 * (r.p_with - r.p_without):+.1f} pp", delta_color="off",
              help="Mean over a fresh batch of noisy copies, with the fitted bottleneck in place.")
    m4.metric("Time", f"{r.seconds:.1f} s", help="Optimisation including the live view.")

    # Three views of the same 224 × 224 map side by side: label on top, picture, then its control.
    overlay_col, heat_col, needed_col = st.columns([1, 1.3, 1], gap="medium")
    with overlay_col:
        st.markdown("**Bits over the image**")
        overlay_slot = st.empty()
        opacity = st.slider("Overlay opacity", 0.0, 1.0, 0.6, 0.05, key="ps_opacity")
        overlay_slot.image(overlay_image(record.cropped, r.heatmap, opacity=opacity), width="stretch")
        st.caption("Inferno colours: dark = 0 bits, bright = the map's maximum.")
    with heat_col:
        st.markdown("**Bits per pixel**")
        st.plotly_chart(figures.heatmap_figure(r.heatmap, "", height=300), key="ps_heatmap", theme=None,
                        config=MAP_CONFIG)
    with needed_col:
        st.markdown("**Not needed for the prediction**")
        not_needed(record)

    lam_col, curves_col = st.columns(2, gap="large")
    with lam_col:
        st.plotly_chart(figures.lambda_figure(r.lambda_mean, "λ per feature cell (mean over channels)", height=320),
                        key="ps_lambda", theme=None, config=MAP_CONFIG)
        st.caption("λ = 1 lets a feature through, λ = 0 replaces it by noise.")
    with curves_col:
        st.plotly_chart(figures.curves_figure(r.history, "Optimisation", height=320), key="ps_curves", theme=None)
        st.caption("L_CE and β·L_I in nats (left axis); p(target) on the noisy batch (right axis).")

    downloads(record)
    st.caption(f"Feature statistics: {record.stats_description}.")


def not_needed(record: RunRecord) -> None:
    """Regions below a threshold, greyed and outlined: what the prediction provably does not need."""
    slot = st.empty()
    threshold = st.select_slider(
        "Threshold (bits / pixel)", THRESHOLD_CHOICES, value=DEFAULT_THRESHOLD, key="ps_threshold",
        help="Regions with fewer bits per pixel than this are greyed out and outlined.",
    )
    slot.image(not_needed_outline(record.cropped, record.result.heatmap, threshold), width="stretch")
    share = not_needed_fraction(record.result.heatmap, threshold)
    st.caption(f"{share:.0%} of the image carries less than {threshold:g} bits / pixel (greyed, outlined).")
    with st.expander("Why is that region not needed?"):
        st.markdown(
            "What passes the bottleneck is an upper bound on the information the network can use from a region. "
            "A region scored **~0 bits** is therefore *not necessary* for the prediction made through the "
            f"bottleneck (here p(target) = {format_probability(record.result.p_with)}). Without the noise the "
            "network may still look at it: the guarantee is about necessity, not about what the plain network "
            "happens to use."
        )


def downloads(record: RunRecord) -> None:
    r = record.result
    stem = record.file_stem
    report = record.report()
    opacity = st.session_state.get("ps_opacity", 0.6)
    c1, c2, c3, _ = st.columns([1, 1, 1, 2])
    c1.download_button("Overlay PNG", png_bytes(overlay_image(record.cropped, r.heatmap, opacity)),
                       f"{stem}_overlay.png", "image/png", on_click="ignore", icon=":material/image:",
                       width="stretch")
    c2.download_button("Heatmap .npy", heatmap_npy_bytes(r.heatmap), f"{stem}_bits.npy", "application/octet-stream",
                       on_click="ignore", icon=":material/grid_on:", help="224 × 224 float32, bits per pixel.",
                       width="stretch")
    c3.download_button("JSON report", json.dumps(report, indent=2), f"{stem}.json", "application/json",
                       on_click="ignore", icon=":material/description:", width="stretch")


inputs = ui.input_section()
if inputs is not None:
    with inputs.controls:  # the form, and the live run right under it, sit next to the image
        submitted = form(inputs)
        if submitted is not None:
            execute(inputs, *submitted)
if RESULT_KEY in st.session_state:
    results(st.session_state[RESULT_KEY])
