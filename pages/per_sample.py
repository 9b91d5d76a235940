"""Per-Sample Bottleneck page: fit the bottleneck for one image and show where the bits come from.

Layout: the inputs on the left; on the right a panel — the live view while the bottleneck is fitted,
then the replay of the last run (its colour scale, a step slider, the maps and the drain of total bits per
step) — above the settings form, so the steps are watched next to the image and the result is in view when
the run ends. Below: numbers, the three views of the final map and the downloads.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from iba_core.app.bottleneck_choice import (
    BOTTLENECKS, bottleneck_help, coiba_caption, coiba_defaults, m2ib_defaults, offered_bottlenecks,
    shared_lambda_title,
)
from iba_core.app.choices import DEFAULT_THRESHOLD, THRESHOLD_CHOICES
from iba_core.app.inputs import prompts_from_text
from iba_core.app.state import RunRecord
from iba_core.budget import Cost
from iba_core.heads import PROBABILITY_NOTES
from iba_core.methods import bottleneck_method
from iba_core.methods.base import check_target
from iba_core.methods.targets import PromptTarget
from iba_core.networks.clip_models import is_clip
from iba_core.per_sample import LOST_CLASS_MESSAGE, BottleneckSettings
from iba_core.render import figures
from iba_core.render.animation import animation_gif, step_text
from iba_core.render.colours import SCALE_BASES, ColourScale, run_scale, step_scale
from iba_core.render.overlays import (
    bits_below, centre_crop_box, few_bits_text, full_resolution_overlay, not_needed_fraction, not_needed_outline,
    overlay_image, part_of_total_text, png_bytes, token_strip,
)
from iba_core.render.report import heatmap_npy_bytes
from iba_core.render.text import format_seconds, format_target_score, shown_name, target_score_name
from iba_core.trust import visitor_text
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import (
    advanced_settings, beta_picker, layer_picker, prompt_picker, range_picker, resolve_target, settings_row,
    target_picker,
)
from pages.widgets.inputs import Inputs, input_section
from pages.widgets import plant_mark
from pages.widgets.links import linked_range, replay_step_key, result_note, result_note_line, set_link
from pages.widgets.page import (
    app_trust, bring_into_view, forget_choice, keep_choice, kept_choice, remember_choice, restore_choice, through_app,
)
from pages.widgets.progress import (check_request, method_stats_with_progress, network_turn, stoppable,
                                   stopped_note, taking_turns)
from pages.widgets.step_view import LiveView, draw_step, step_slots
from pages.widgets.text import plain

if TYPE_CHECKING:  # type hints only: the page loads no torch of its own
    import torch

    from iba_core.methods.bottlenecks import BottleneckMethod
    from iba_core.networks import Network
    from iba_core.results import AttributionResult
    from iba_core.text_side import TokenBits

RESULT_KEY = "ps_run"
#: A CLIP run's records, one per prompt (RESULT_KEY holds the one shown), and the choice of the one shown.
PROMPT_RUNS_KEY, PROMPT_SHOWN_KEY = "ps_prompt_runs", "ps_prompt_shown"
#: Maps are read, not explored: no Plotly tool bar over their titles.
MAP_CONFIG = {"displayModeBar": False}
#: Widget key of the colour-scale control (read by the live run, set in the replay panel).
SCALE_TOP_KEY = "ps_scale_top"
SCALE_BASIS_KEY = "ps_scale_basis"
#: The scale's top when none is typed (`colours.SCALE_BASES`, the first the default), as the radio names them.
SCALE_BASIS_NAMES = {"final": "each map's own largest value", "run": "the whole run's largest value"}

through_app()
# the colour-scale basis holds for the session, not only while this page is shown (the typed top is not restored:
# a number field given a value both ways makes Streamlit insert a warning, which shifted the live view's pictures)
restore_choice(SCALE_BASIS_KEY, SCALE_BASES[0])
st.title("Per-Sample Bottleneck")
st.caption(
    "Noise replaces part of a layer's features; for this one image the bottleneck learns how much of each feature "
    "may pass while the network still recognises the class. What passes is measured in **bits**. Regions with "
    "zero bits are not needed for the prediction made through the bottleneck (the paper's guarantee); regions "
    "with a few bits are not covered by it."
)


# ---- colour scale ------------------------------------------------------------------------------


def fixed_top() -> float | None:
    """The top of the colour scale the user typed in the replay panel (bits / pixel), or None: the run's own."""
    top = st.session_state.get(SCALE_TOP_KEY)
    return float(top) if top else None


def record_scale(record: RunRecord) -> ColourScale:
    """The run's colour scale (`run_scale`: the top typed in, else the final map's largest value or the whole
    run's, as chosen), for the final map and the overlays; the replay's and the GIF's steps are drawn on it, or
    by default each on its own top (`step_scale`)."""
    return run_scale(record.result, fixed_top(), st.session_state.get(SCALE_BASIS_KEY, SCALE_BASES[0]))


def scale_controls() -> None:
    """The run's colour scale, in a popover beside the replay slider: right above the maps it sets (the replay's,
    and the Result's below), in one line, so the replayed bits map stays in view beside the inputs."""
    with st.popover("Colour scale", icon=":material/palette:", width="stretch",
                    help="The top of the bits maps' colour scale: each map's own largest value (default), the "
                    "whole run's, or a top you type."):
        st.selectbox("Top of the bits maps' scale", list(SCALE_BASIS_NAMES), format_func=SCALE_BASIS_NAMES.get,
                     key=SCALE_BASIS_KEY, disabled=fixed_top() is not None, on_change=remember_choice,
                     args=(SCALE_BASIS_KEY,),
                     help="Each map's own largest value (default): every step's map, and the final map, runs from "
                     "0 bits to its own largest value, written at the top of its colour bar, so each reads at a "
                     "glance while the bits drain (the drain itself is the chart of total bits per step). The "
                     "whole run's largest value: one scale for every step, so the maps themselves show the drain "
                     "and the later ones look dark. Either way 0 is dark and the colours are bits per pixel.")
        st.number_input("Or a top (bits / pixel)", min_value=0.0, value=None, step=0.1, format="%.3g",
                        key=SCALE_TOP_KEY, placeholder="none typed",
                        help="A top of your own for the run's one colour scale: the replay, the GIF, the final map "
                        "and the overlays all use it. Values above it are drawn in the top colour (the colour bar "
                        "says ≥).")


# ---- run ---------------------------------------------------------------------------------------


def form(inputs: Inputs) -> tuple | None:
    """The settings form; returns (layer, settings, target, folder, n, layer_range) when Run was pressed
    (layer_range: CoIBA's (first, last), else None). target: a class (as the picker gives it), or for a CLIP model
    the prompt box's text (`prompt_picker`)."""
    choice = bottleneck_choice(inputs)  # outside the form: the form then shows the layer or the range picker
    coiba = choice == "coiba"
    with st.form("ps_form"):
        c1, c2 = st.columns(2)
        with c1:
            layer_range = range_picker(inputs, "ps") if coiba else None
            layer = layer_range[0] if coiba else layer_picker(inputs, "ps")
            # CoIBA's β·k starts at its authors' 1 (`coiba.CoIBASettings`), kept apart from the one-layer choice
            beta_k = (beta_picker("psc", inputs.network.head, coiba_defaults().beta_k) if coiba
                      else beta_picker("psm", inputs.network.head, m2ib_defaults().beta_k) if choice == "m2ib"
                      else beta_picker("ps", inputs.network.head))
        with c2:
            target = PromptBox(prompt_picker(inputs, "ps")) if is_clip(inputs.network) else target_picker(inputs, "ps")
        if choice == "m2ib":  # a standard-normal prior: no statistics to choose
            settings, folder, n = advanced_settings("psm", m2ib_defaults()), None, None
            st.caption("M2IB's prior is a standard normal on the layer's raw features: no feature statistics.")
        else:
            settings, folder, n = (settings_row(inputs, "psc", layer, coiba_defaults()) if coiba
                                   else settings_row(inputs, "ps", layer))
        submitted = st.form_submit_button("Run", type="primary", icon=":material/play_arrow:", key="ps_run_button")
    return (layer, replace(settings, beta_k=float(beta_k)), target, folder, n, layer_range) if submitted else None


# ---- CoIBA: one mask shared by the bottlenecks of a layer range (issue #30) ----------------------

#: The "Bottleneck" choice above the form: the paper's one-layer bottleneck, CoIBA or M2IB (`BOTTLENECKS`).
BOTTLENECK_KEY = "ps_bottleneck"


def bottleneck_choice(inputs: Inputs) -> str:
    """The chosen bottleneck's key in BOTTLENECKS (kept for the session, as the colour scale's basis; CoIBA where
    a link names a layer range, whose `range` leaves the link when Per-Sample is chosen)."""
    if linked_range(inputs.network) is not None:
        keep_choice(BOTTLENECK_KEY, "coiba")
    offered = offered_bottlenecks(inputs.network)
    if kept_choice(BOTTLENECK_KEY, st.session_state.get(BOTTLENECK_KEY)) not in (*offered, None):
        forget_choice(BOTTLENECK_KEY)  # M2IB chosen for a CLIP model, now a classifier: back to the default
        st.session_state.pop(BOTTLENECK_KEY, None)
    restore_choice(BOTTLENECK_KEY, "per_sample")
    choice = st.radio(
        "Bottleneck", offered, format_func=BOTTLENECKS.get, key=BOTTLENECK_KEY, horizontal=True,
        on_change=remember_choice, args=(BOTTLENECK_KEY,), help=bottleneck_help(offered))
    if choice != "coiba":
        set_link(range=None)
    return choice


def bottleneck_parts(inputs: Inputs, layer: str, settings: BottleneckSettings, folder: str | None, n: int,
                     layer_range: tuple[str, str] | None, timing: dict):
    """(the method, its layers, its statistics' description) of a run: the bottleneck from the method registry (the
    one door: a `methods.BottleneckRequest`, the object the CLI builds too: CoIBA over `layer_range`, else the
    one-layer bottleneck), its layers resolved (a bad range is refused in words before any statistics), every
    layer's statistics with a bar."""
    from iba_core.app.stats_source import range_stats_description
    from iba_core.results import range_label
    from iba_core.methods import BottleneckRequest

    method = BottleneckRequest(settings, layer=layer, layer_range=layer_range, stats_images=folder,
                               stats_samples=n).method()
    layers = method.resolve(inputs.network)[1]
    label = layers[0] if layer_range is None else range_label(layers[0], layers[-1])
    stats = method_stats_with_progress(inputs, method, label, folder, timing=timing)
    if not stats:  # a prior with nothing estimated (M2IB's standard normal)
        return method, layers, "none: a standard-normal prior"
    described = next(iter(stats.values())).describe() if len(stats) == 1 else range_stats_description(stats)
    return method, layers, described


class PromptBox(str):
    """The prompt box's text (a CLIP model): what the form returns in place of a class."""


def run_live(inputs: Inputs, layer: str, settings: BottleneckSettings, target: int | PromptTarget,
             folder: str | None, n: int, panel: DeltaGenerator, layer_range: tuple[str, str] | None = None, *,
             live_key: str = "ps_live", heading: str | None = None) -> RunRecord:
    """Statistics, then T optimisation steps with a live heatmap, λ map and loss curves in `panel` (`LiveView`, on
    the largest value so far or each step's own, as chosen); with `layer_range`, CoIBA's over that range (its
    shared mask drawn as λ, its first layer's bits map). target: a class index, or a text prompt (a CLIP model),
    resolved in the network's turn (a new prompt is added to it there). live_key, heading: the panel's key and a
    line above it (one run per prompt).
    """
    fixed = fixed_top()
    timing: dict = {}
    with panel.container(border=True, key=live_key):
        bring_into_view(live_key)  # after a later run's Run click, the panel may lie above the window
        if heading:
            st.markdown(heading)
        layers: tuple[str, ...] = ()
        # One turn for the statistics and the steps: a turn each would let a long request of another session
        # (which makes way between its steps) take the network back between them, and this run wait twice.
        with network_turn(inputs.shared, timing) as network:
            method, resolved, stats_description = bottleneck_parts(inputs, layer, settings, folder, n, layer_range,
                                                                   timing)
            if layer_range is not None:
                layers, layer = tuple(resolved), resolved[0]
                st.caption(coiba_caption(layers))
            one_scale = bool(fixed) or st.session_state.get(SCALE_BASIS_KEY, SCALE_BASES[0]) == "run"
            view = LiveView(settings.steps, inputs.network.head, fixed, one_scale, shared_lambda_title(layers))
            # No pause after a step for the page's sake: the turn runs torch on all cores but one (settings.
            # torch_threads), and with two CPU burners each step's message still left the server within 21 ms
            # (benchmarks/bench_live_view.py). Steps go missing only when the *browser* is busy, e.g. drawing its
            # first Plotly chart (1.4–1.7 s); a pause here would not help that, only slow every run.
            result, prompt, text = fit_in_turn(network, method, inputs.x, target, settings, view)
    pre = inputs.network.preprocess
    return RunRecord(
        image_name=inputs.image.name, image_digest=inputs.image.digest, model_key=inputs.network.key,
        model_title=inputs.network.spec.title, layer=layer,
        class_name=prompt or inputs.network.class_name(result.target), cropped=inputs.cropped, result=result,
        stats_description=stats_description, original=inputs.image.image,
        crop_box=centre_crop_box(inputs.image.image.size, pre.resize, pre.crop_size),
        stats_seconds=timing.get("stats", 0.0), wait_seconds=timing.get("wait", 0.0), layers=layers, text_side=text,
    )


def fit_in_turn(network: Network, method: BottleneckMethod, x: torch.Tensor, target: int | PromptTarget,
                settings: BottleneckSettings, view: LiveView) -> tuple[AttributionResult, str | None, TokenBits | None]:
    """In the network's turn: (the fit drawn live, the prompt or None, its words' bits (M2IB's text side) or None);
    a prompt target becomes its index among the network's prompts, added if new."""
    prompt = text = None
    if isinstance(target, PromptTarget):
        prompt, target = target.text, check_target(network, target).index
    iba = method.bottleneck(network)
    if iba.measures_precision():  # asked in the turn: the remembered choice depends on its thread count
        view.bar.progress(0.0, text=f"**Step 0 / {settings.steps}** · preparing the network; this first run at "
                                    "this layer also measures which precision is fastest here (once)…")
    result = iba.attribute(x, target=target, callback=view.on_step)
    if prompt is not None:  # which words carry the information: M2IB's text side, in the same turn
        from iba_core.text_side import TextSideSettings, text_side

        view.bar.progress(1.0, text=f"**Step {settings.steps} / {settings.steps}** · the prompt's words…")
        text = text_side(network, x, prompt, TextSideSettings(seed=settings.seed))
    return result, prompt, text


def execute(inputs: Inputs, layer: str, settings: BottleneckSettings, target: int | str,
            folder: str | None, n: int, layer_range: tuple[str, str] | None = None, *,
            panel: DeltaGenerator) -> None:
    """The live run; its record replaces the previous one only if it succeeds."""
    if isinstance(target, PromptBox):
        execute_prompts(inputs, layer, settings, target, folder, n, panel, layer_range)
        return
    with shown_errors() as outcome:  # previous results stay
        check_runs(inputs, layer, settings.validate(), layer_range, 1)
        record = run_live(inputs, layer, settings.validate(), resolve_target(inputs, target), folder, n, panel,
                          layer_range)
    if outcome.failed:
        panel.empty()
        return
    st.session_state[RESULT_KEY] = record
    st.session_state.pop(PROMPT_RUNS_KEY, None)


def check_runs(inputs: Inputs, layer: str, settings: BottleneckSettings, layer_range: tuple[str, str] | None,
               runs: int) -> None:
    """Refuse `runs` bottleneck runs (one per prompt) above the app's budget before anything runs."""
    from iba_core.text_side import TextSideSettings

    method = bottleneck_method(settings, layer=layer, layer_range=layer_range)
    per_run = method.forward_passes(inputs.network, *inputs.x.shape[-2:])
    words = TextSideSettings().forward_passes if is_clip(inputs.network) else 0  # each prompt's words, M2IB's
    check_request(Cost.part("bottleneck steps", runs * per_run) + Cost.part("the prompts' words", runs * words),
                  "This run" if runs == 1 else f"These {runs} runs (one per prompt)",
                  "choose fewer steps, a smaller batch" + (" or fewer prompts" if runs > 1 else ""))


def execute_prompts(inputs: Inputs, layer: str, settings: BottleneckSettings, text: str, folder: str | None, n: int,
                    panel: DeltaGenerator, layer_range: tuple[str, str] | None = None) -> None:
    """A CLIP model: one live run per prompt of the box, one after the other in the panel; the records replace
    the previous ones only if every run succeeds (an empty box or a failure: its sentence, the last result kept)."""
    with shown_errors() as outcome:
        prompts = prompts_from_text(text)
        settings = settings.validate()
        check_runs(inputs, layer, settings, layer_range, len(prompts))
        records = []
        # one turn for all prompts, making way between them: released and retaken at once, the lock would rarely
        # pass to a session that waits
        with stoppable("ps_stop"), network_turn(inputs.shared):
            make_way = taking_turns(inputs.shared, None)
            for i, prompt in enumerate(prompts):
                make_way(i, len(prompts), prompt)
                records.append(run_live(
                    inputs, layer, settings, PromptTarget(prompt), folder, n, panel, layer_range,
                    live_key=f"ps_live_{i}",
                    heading=f"**Prompt {i + 1} / {len(prompts)}:** “{plain(prompt)}”" if len(prompts) > 1 else None))
    if outcome.failed:
        panel.empty()
        return
    st.session_state[PROMPT_RUNS_KEY] = records
    st.session_state[RESULT_KEY] = records[0]
    st.session_state[PROMPT_SHOWN_KEY] = 0


def prompt_choice() -> None:
    """A CLIP run of several prompts: which prompt's run the replay and the result below show (RESULT_KEY)."""
    records = st.session_state.get(PROMPT_RUNS_KEY) or []
    if len(records) < 2:
        return
    shown = st.segmented_control(
        "Prompt shown", list(range(len(records))), key=PROMPT_SHOWN_KEY, required=True,
        format_func=lambda i: plain(records[i].class_name),
        help="The replay and the result below show this prompt's run; *One map per prompt* below shows them all.")
    st.session_state[RESULT_KEY] = records[shown if shown is not None else 0]


# ---- replay (the panel after a run) -------------------------------------------------------------


def lost_class_warning(record: RunRecord) -> None:
    r = record.result
    # A CLIP model's outputs are cosines: the thresholds of a lost class (p < 1 %, a tenth of p) and of a hardly
    # predicted one (p < 10 %) are probabilities' and misfire on a cosine (a similarity of −0.3 rising to −0.2 read
    # as "lost"), so the page says neither for the similarity head.
    if r.lost_class and r.head != "similarity":
        score = target_score_name(r.head)
        # short: at 1280 × 800 the replayed maps below it must stay on the first screen
        st.warning(
            f"**{'Prompt' if score == 'similarity' else 'Class'} lost:** {score} "
            f"{format_target_score(r.p_without, r.head)} → {format_target_score(r.p_with, r.head)} with the "
            f"bottleneck; {LOST_CLASS_MESSAGE}. A smaller β·k lets more bits through.",
            icon=":material/warning:",
        )


def target_warning(record: RunRecord) -> None:
    """The network hardly predicts the explained class (`AttributionResult.target_note`), or nothing."""
    note = record.result.target_note if record.result.head != "similarity" else ""  # see lost_class_warning
    if note:
        st.warning(f"**Hardly predicted:** {note}", icon=":material/help:")


def replay(record: RunRecord, scale: ColourScale, current_key: str | None = None) -> None:
    """The last run step by step: a slider over the steps, the maps and curves at the chosen step, on the run's
    colour scale. current_key: the network chosen now; when the run used another one, the panel says so."""
    r = record.result
    history = r.history
    if current_key is not None and (note := result_note(record.image_name, record.model_title or record.model_key,
                                                         record.image_digest)):
        st.caption(note)  # another image or network is chosen above: says which this run is of
    about = f" for “{plain(record.class_name)}”" if r.head == "similarity" else ""
    st.markdown(
        f"**Last run{about}:** {r.bits_text()} · {target_score_name(r.head)} {format_target_score(r.p_without, r.head)}"
        f" → {format_target_score(r.p_with, r.head)} · [details below](#result)"
    )
    if record.layers:
        st.caption(coiba_caption(record.layers))
    lost_class_warning(record)
    target_warning(record)
    if not history:
        st.info("This run had 0 steps: nothing to replay.", icon=":material/info:")
        return
    steps = len(history)
    slider_col, scale_col = st.columns([1.8, 1], vertical_alignment="bottom")  # room for the popover's label
    with scale_col:
        scale_controls()  # above the maps it sets
    step = steps if steps == 1 else slider_col.slider(
        "Replay step", 1, steps, steps, key=replay_step_key(f"ps_replay_{record.run_id}", steps),
        help="Shows the bits, λ and the curves as they were at this step of the optimisation.",
    )
    info = history[step - 1]
    # The last step is the final map: its line quotes the result's own total, as every other figure does.
    st.markdown(f"**{step_text(info, total_bits=r.total_bits if step == steps else None, head=r.head)}**")
    # The pictures' hover toolbar (44 px) rises above their top edge: a gap keeps it off the step line, whose
    # end (p(target)) it covered.
    st.space(20)
    draw_step(step_slots(), history[:step], steps, step_scale(info.bits_per_pixel, scale).top, all_steps=history,
              lambda_title=shared_lambda_title(record.layers), head=r.head)
    read = ("after the step's update, so the last step is the final map below" if r.settings.read_point == "final"
            else "from the step's forward pass, as the final map below")
    st.caption(f"Bits maps: {scale.describe()}. Bits and λ {read}; λ = 1 lets a feature through, λ = 0 replaces "
               f"it by noise. {target_score_name(r.head)} in the step line and the curves: that step's noisy batch, "
               "before its update."
               + (" The curves: the fitting term −cos drawn as 1 − cos (≥ 0), the similarity on the right axis, "
                  "−1 … 1." if r.head == "similarity" else ""))


# ---- result ------------------------------------------------------------------------------------


def results(record: RunRecord, scale: ColourScale) -> None:
    """Numbers, maps, the "few bits" view and downloads for the last finished run; the maps on the run's scale."""
    r, s = record.result, record.result.settings
    st.divider()
    st.subheader("Result", anchor="result")
    prompt_maps(st.session_state.get(PROMPT_RUNS_KEY) or [])
    explained = (f"explaining the prompt **“{plain(record.class_name)}”**" if r.head == "similarity" else
                 f"explaining **{plain(record.class_name)}** (#{r.target})")
    st.caption(
        f"{plain(shown_name(record.image_name))} · {plain(record.model_title or record.model_key)} · "
        f"{record.where} · {explained} · β·k = {s.beta_k:g} · "
        f"{len(r.history)} steps × batch {s.batch}"
        + result_note_line(record.image_name, record.model_title or record.model_key, record.image_digest)
    )
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("Information used", f"{r.total_bits:,.0f} bits",
              help="The sum of the heatmap: bits that pass the bottleneck for this image.")
    score = target_score_name(r.head)
    m2.metric(f"{score} without bottleneck", format_target_score(r.p_without, r.head),
              help=PROBABILITY_NOTES[r.head] or None)  # a multi-label, binary or CLIP network's p: what it means
    m3.metric(f"{score} with bottleneck", format_target_score(r.p_with, r.head),
              delta=(f"{r.p_with - r.p_without:+.3f}" if score == "similarity" else
                     f"{100 * (r.p_with - r.p_without):+.1f} pp"), delta_color="off",
              help="Mean over a fresh batch of noisy copies, with the fitted bottleneck in place.")
    waited = f" Waiting {format_seconds(record.wait_seconds)} for another session's run is in neither." \
        if record.wait_seconds >= 0.5 else ""
    m4.metric("Optimisation time", format_seconds(r.seconds), delta=f"+ {format_seconds(record.stats_seconds)} "
              "statistics", delta_color="off", delta_arrow="off",
              help="Optimisation: the T steps, including drawing the live view. Statistics: estimating the layer's "
              f"μ_R and σ_R (near 0 when they are cached).{waited}")
    target_warning(record)

    # Three views of the same map (the crop's size) side by side: label on top, picture, then its control.
    overlay_col, heat_col, few_col = st.columns([1, 1.3, 1], gap="medium")
    with overlay_col:
        st.markdown("**Bits over the image**")
        overlay_slot = st.empty()
        opacity = st.slider("Overlay opacity", 0.0, 1.0, 0.6, 0.05, key="ps_opacity")
        overlay_slot.image(overlay_image(record.cropped, r.heatmap, opacity=opacity, top=scale.top, legend=True),
                           width="stretch", alt=f"Bits over the image, 0 – {scale.top:.3g} bits / pixel")
        st.caption(f"Inferno colours on the run's scale (*Colour scale*, beside the replay step): dark = 0 bits, "
                   f"bright = {scale.top:.3g} bits / pixel (the legend below the image).")
    with heat_col:
        st.markdown("**Bits per pixel** (final map)")
        lost_class_warning(record)
        st.plotly_chart(figures.heatmap_figure(r.heatmap, "", zmax=scale.top, height=300), key="ps_heatmap",
                        theme=None, config=MAP_CONFIG)
    with few_col:
        st.markdown("**Few bits**")
        few_bits(record)

    prompt_words(record)
    downloads(record, opacity, scale)
    # it may name a folder of the server: a visitor sees it relative to the allowed folder (issue #40)
    st.caption(f"Feature statistics: {plain(visitor_text(record.stats_description, app_trust()))}.")


def prompt_words(record: RunRecord) -> None:
    """A CLIP prompt's words on the colours of their bits (M2IB's text side), under the image's maps."""
    text = record.text_side
    if text is None:
        return
    st.markdown(f"**Which words of “{plain(text.prompt)}” carry the information**")
    words = text.words()
    st.image(token_strip(words), alt="The prompt's words with their bits per token: " + ", ".join(
        f"{w} {b:.1f}" for w, b in words))
    shown = sum(b for _, b in words)
    st.caption(f"M2IB's text side: a bottleneck on the text encoder at {plain(text.layer)} (standard-normal prior, "
               f"β·k {text.settings.beta_k:g}), fitted to keep the prompt's similarity to this image. Bits per "
               f"token, under each word, on the words' own scale (0 – the largest word's), not the image's: "
               f"{shown:,.1f} bits in the words shown, {text.total_bits - shown:,.1f} in the start and end tokens "
               f"(not shown). Similarity {text.similarity_without:.3f} without this text bottleneck → "
               f"{text.similarity_with:.3f} with it (the image unchanged).")


def prompt_maps(records: list[RunRecord]) -> None:
    """A CLIP run of several prompts: every prompt's final map over the image side by side, on one bits scale
    (the largest value among them: bits compare between prompts of one image, network, layer and β·k), each with
    its prompt, total bits and similarity."""
    if len(records) < 2:
        return
    top = max(float(np.max(r.result.heatmap)) for r in records) or 1.0
    st.markdown("**One map per prompt**")
    st.caption(f"Bits over the image for each prompt, on one scale: 0 – {top:.3g} bits / pixel (the largest value "
               "among them), so the prompts' maps compare. Similarity: the cosine of the image's and the prompt's "
               "embeddings without the bottleneck → with it (−1 … 1, not a probability). *Prompt shown* above "
               "picks the one the replay and the result show.")
    per_row = 4  # a map about as large as the replay's, also for two prompts
    for start in range(0, len(records), per_row):
        cols = st.columns(per_row)
        for col, record in zip(cols, records[start:start + per_row]):
            r = record.result
            col.image(overlay_image(record.cropped, r.heatmap, opacity=0.6, top=top, legend=True), width="stretch",
                      alt=f"Bits over the image for the prompt {record.class_name}")
            col.markdown(f"**“{plain(record.class_name)}”**  \n{r.total_bits:,.0f} bits · similarity "
                         f"{format_target_score(r.p_without, r.head)} → {format_target_score(r.p_with, r.head)}")


def few_bits(record: RunRecord) -> None:
    """Regions below a threshold, greyed and outlined, with the bits they still pass, and the guarantee
    stated as the paper states it (zero bits only)."""
    r = record.result
    slot = st.empty()
    threshold = st.select_slider(
        "Threshold (bits / pixel)", THRESHOLD_CHOICES, value=DEFAULT_THRESHOLD, key="ps_threshold",
        help="Regions with fewer bits per pixel than this are greyed out and outlined.",
    )
    slot.image(not_needed_outline(record.cropped, r.heatmap, threshold), width="stretch")
    share = not_needed_fraction(r.heatmap, threshold)
    passed = bits_below(r.heatmap, threshold)
    st.caption(few_bits_text(share, passed, r.total_bits, threshold))
    part, _ = part_of_total_text(passed, r.total_bits)
    with st.expander("What does the guarantee cover?"):
        st.markdown(
            "The bits that pass the noisy bottleneck bound what the network can use from a region *when it "
            "predicts through that bottleneck*. The paper (§3.1) guarantees only this: **a region with zero "
            "bits** is not necessary for the prediction made through the bottleneck (here "
            f"{target_score_name(r.head)} = {format_target_score(r.p_with, r.head)}). A region with a few bits — like "
            "the greyed ones, "
            f"{part} bits in all — is not covered. And without the noise the network may still use "
            "any region: the guarantee is about the prediction through the bottleneck, not about the plain "
            "network."
        )


def downloads(record: RunRecord, opacity: float, scale: ColourScale) -> None:
    r, stem, report, top = record.result, record.file_stem, record.report(), scale.top
    c1, c2, c3, c4, _ = st.columns([1, 1, 1, 1, 0.5])
    side = " × ".join(map(str, r.heatmap.shape[::-1]))  # width × height of the map (the network's crop)
    if record.original is not None and record.crop_box is not None:
        original, box = record.original, record.crop_box
        width, height = original.size
        c1.download_button(
            "Overlay PNG",
            lambda: png_bytes(full_resolution_overlay(original, r.heatmap, box, opacity, top=top, legend=True),
                              optimize=False),
            f"{stem}_overlay.png", "image/png", on_click="ignore", icon=":material/image:", width="stretch",
            help=f"{width} × {height} px, the size of the image you gave, with the colour legend below it "
            f"(0 – {top:.3g} bits / pixel, the run's scale). The heatmap covers the centre crop the network saw "
            "(outlined); the rest of the photo, which the network never saw, is grey and dimmed.",
        )
    else:
        c1.download_button("Overlay PNG", png_bytes(overlay_image(record.cropped, r.heatmap, opacity, top=top,
                                                                  legend=True)),
                           f"{stem}_overlay.png", "image/png", on_click="ignore", icon=":material/image:",
                           width="stretch", help=f"The {side} crop the network saw, with the colour legend below "
                           f"it (0 – {top:.3g} bits / pixel).")
    c2.download_button("Heatmap .npy", heatmap_npy_bytes(r.heatmap), f"{stem}_bits.npy", "application/octet-stream",
                       on_click="ignore", icon=":material/grid_on:", help=f"{side} float32, bits per pixel.",
                       width="stretch")
    c3.download_button("JSON report", json.dumps(report, indent=2), f"{stem}.json", "application/json",
                       on_click="ignore", icon=":material/description:", width="stretch")
    c4.download_button(
        "Animation GIF", lambda: animation_gif(r, scale, lambda_title=shared_lambda_title(record.layers)),
        f"{stem}_steps.gif", "image/gif", on_click="ignore",
        icon=":material/animation:", width="stretch", disabled=not r.history,
        help="One frame per step (bits, the drain of total bits so far and λ, with the step, the bits and p(target) "
        "written on each), then the final map, held; each bits map on the scale chosen under *Colour scale* (by "
        "default its own largest value, written on its colour bar).",
    )


# ---- page --------------------------------------------------------------------------------------

inputs = input_section(widths=(1.55, 3))
if inputs is not None:
    with inputs.controls:  # the live view / replay, then the form, next to the image
        # A run's live view takes the replay's place (one slot: st.empty), then the replay takes it back. Any other
        # rerun draws the replay straight at that place, as the same keyed container: an st.empty sent again at
        # each rerun first clears its place, so the replay slider was mounted anew at every step it showed, lost
        # its focus, and its arrow keys moved the page instead of the step.
        running = bool(st.session_state.get("ps_run_button"))
        panel = st.empty() if running else None
        replay_box = (st.container(border=True, key="ps_replay")
                      if not running and RESULT_KEY in st.session_state else None)
        submitted = form(inputs)
    if submitted is not None:
        with inputs.controls:
            execute(inputs, *submitted, panel=panel or st.empty())
    with inputs.controls:
        stopped_note("ps_stop")  # a prompt box's runs stopped
    if RESULT_KEY in st.session_state:
        with replay_box if replay_box is not None else panel.container(border=True, key="ps_replay"):
            prompt_choice()  # several prompts: which one the replay and the result show
            replay(st.session_state[RESULT_KEY], record_scale(st.session_state[RESULT_KEY]), inputs.network.key)
if RESULT_KEY in st.session_state:
    results(st.session_state[RESULT_KEY], record_scale(st.session_state[RESULT_KEY]))
    plant_mark.plant_section(inputs, st.session_state[RESULT_KEY])  # teaching: the run without and with a mark
