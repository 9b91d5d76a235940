"""The Dataset page's planted-mark self-test (issue #42, item 2): a folded form (the image folder and the test's
folder on the server, the mark, where, its size and opacity, the methods, the sample), the test run with its progress
and Stop, then the verdict, the model's reaction in figures, the methods' ranking and the clean and marked runs
compared image by image. The logic is `iba_core.app.self_test`; the network is the one the Network menu holds (under
*Start a run*)."""
from __future__ import annotations

import time

import streamlit as st

from iba_core.app import self_test as st_core
from iba_core.app.choices import folder_run_choices
from iba_core.app.models import source_version
from iba_core.selftest.marks import DEFAULT_PLACE, DEFAULT_SIZE, DEFAULT_TEXT, PNG
from iba_core.trust import Trust, visitor_path
from pages.widgets import run_compare
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import method_picker
from pages.widgets.links import NETWORK_CHOICE_KEY
from pages.widgets.network_picker import shared_model
from pages.widgets.page import request_budget
from pages.widgets.progress import network_turn, stoppable, stopped_note
from pages.widgets.text import plain

#: The last self-test's results (`SelfTest`) this session.
RESULT_KEY = "ds_st_result"
#: (that SelfTest, the (method, target) shown, its clean and marked runs paired), kept while they are shown.
PAIRED_KEY = "_ds_st_paired"
KIND_NAMES = {"patch": "a patch (solid square)", "text": "a text", "border": "a border round the crop",
              PNG: "a PNG of yours"}


def self_test_section(trust: Trust) -> None:
    """The folded self-test: its form, the run, the last results."""
    with st.expander("Self-test: would the maps show a mark the model reacts to?", icon=":material/verified:",
                     key="ds_st_open"):
        st.caption("The images of a folder are copied twice, clean and with a mark planted at the network's crop "
                   "coordinates; the methods run on both copies (one folder run each, resumable). It answers two "
                   "questions for your model and folder: does the model react to this mark, and does each method's "
                   "difference map put its mass on the mark (localisation ratio: 1 = chance) and tell marked from "
                   "clean images (AUROC: 0.5 = chance)? One cue at a time: a model that ignores this mark leaves "
                   "nothing for a map to show, and says nothing about other cues. The network is the Network "
                   "menu's (under *Start a run*). The same from the command line: `python -m iba_core selftest`.")
        shared = chosen_network(trust)
        if shared is None:
            return
        asked = self_test_form(shared.network)
        if asked is not None:
            run_test(shared, trust, *asked)
        stopped_note("ds_st_stop")
        result = st.session_state.get(RESULT_KEY)
        if result is not None:
            results_view(result, trust)


def chosen_network(trust: Trust):
    """The network the page's Network menu holds (its one shared model), or None (its reason shown there)."""
    key = st.session_state.get(NETWORK_CHOICE_KEY)
    if not key:
        st.info("Choose a network under *Start a run on a folder of the server* first.", icon=":material/info:")
        return None
    with shown_errors() as outcome:
        shared = shared_model(key, source_version(key, trust), trust)
    return None if outcome.failed else shared


def self_test_form(network) -> tuple | None:
    """The form; (folder, out, mark's fields, methods, sample) when *Run the self-test* was pressed."""
    kind = st.radio("Mark", list(KIND_NAMES), key="ds_st_kind", horizontal=True, format_func=KIND_NAMES.get)
    choices, names, defaults = folder_run_choices(network)
    with st.form("ds_st_form", border=False, enter_to_submit=False):
        c1, c2 = st.columns(2)
        folder = c1.text_input("Image folder on the server", key="ds_st_source", placeholder="/data/val")
        out = c2.text_input("Self-test folder (created if missing)", key="ds_st_out", placeholder="/data/selftest")
        c3, c4, c5 = st.columns(3)
        where = c3.selectbox("Where on the crop", st_core.PLACE_CHOICES, key="ds_st_where", disabled=kind == "border",
                             index=st_core.PLACE_CHOICES.index(DEFAULT_PLACE))
        size = c4.number_input("Size (share of the crop side)", 0.01, 1.0, DEFAULT_SIZE[kind], 0.01,
                               key=f"ds_st_size_{kind}", help="A border: the frame's width.")
        opacity = c5.slider("Opacity", 0.01, 1.0, 1.0, 0.01, key="ds_st_opacity")
        text = st.text_input("Text", DEFAULT_TEXT, key="ds_st_text") if kind == "text" else ""
        upload = st.file_uploader("Mark PNG (transparent where the mark is not)", ["png"],
                                  key="ds_st_png") if kind == PNG else None
        methods = method_picker("Methods", "ds_st_methods", choices, names, defaults,
                                help="Each runs on both copies of every image (and twice more where the mark "
                                "pushes toward a class).")
        if "ds_st_sample" not in st.session_state:  # proposed, and clearable: value None is "every image"
            st.session_state["ds_st_sample"] = st_core.DEFAULT_SAMPLE
        sample = st.number_input("A sample of this many images (seeded; clear it for every image)", 1, 100_000,
                                 None, key="ds_st_sample", placeholder="every image")
        pressed = st.form_submit_button("Run the self-test", icon=":material/play_arrow:", key="ds_st_button")
    if not pressed:
        return None
    picture = None if upload is None else (upload.name, upload.getvalue())
    return folder, out, (kind, where, size, opacity, text, picture), methods, sample


def run_test(shared, trust: Trust, folder: str, out: str, fields: tuple, methods: list[str], sample) -> None:
    """Run the self-test under the network's lock, with a progress bar and Stop; keep its results."""
    bar = st.empty()
    started = time.monotonic()

    def progress(done: int, total: int, label: str = "") -> None:
        bar.progress(min(done / max(total, 1), 1.0),
                     text=f"{plain(label)} ({done}/{total}, {time.monotonic() - started:.0f} s)")

    with shown_errors(), stoppable("ds_st_stop"):
        mark = st_core.form_mark(*fields[:5], upload=fields[5])
        with network_turn(shared) as network:
            st.session_state[RESULT_KEY] = st_core.run_self_test(
                network, folder, out, mark, methods, None if sample is None else int(sample), shared=shared,
                trust=trust, budget=request_budget(), progress=progress)
    bar.empty()


def results_view(result, trust: Trust) -> None:
    """The verdict, the reaction's figures, the mark, the ranking, and the clean and marked runs compared."""
    st.markdown(f"**Self-test in {plain(visitor_path(result.out_dir, trust))}** · {result.reaction.images} images")
    verdict = plain(result.reaction.verdict[:1].upper() + result.reaction.verdict[1:]) + "."
    if result.reaction.reacts:
        st.success(verdict, icon=":material/check_circle:")
    else:
        st.warning(verdict, icon=":material/warning:")
    cols = st.columns(3)
    for col, (label, value, help_text) in zip(cols, st_core.reaction_figures(result)):
        col.metric(plain(label), value, help=plain(help_text))
    x0, y0, x1, y1 = result.box
    pair = st_core.example_copies(result)
    if pair is not None:
        c1, c2, c3 = st.columns([1, 1, 2])
        c1.image(pair[0], caption="clean copy", width="stretch")
        c2.image(pair[1], caption="marked copy", width="stretch")
        c3.caption(f"The mark's box on the {result.crop} × {result.crop} crop: x {x0}–{x1}, y {y0}–{y1}; it "
                   f"covers {result.region_share:.1%} of the crop, so a map spread evenly puts that share on it "
                   f"(localisation ratio 1 = chance, at most {1 / result.region_share:.3g}).")
    st.markdown("**Does each method's map show it?**")
    if not result.ranking:
        # the caution is the verdict shown above: said once, referred to here
        st.caption("Not ranked: " + ("see the verdict above." if result.caution else "a score is missing."))
    st.dataframe(st_core.ranking_table(result), hide_index=True, key="ds_st_ranking", column_config={
        "localisation_ratio": st.column_config.NumberColumn(
            "localisation ratio", format="%.2f", help="The difference map's positive mass inside the mark's box, "
            "over the box's share of the crop: 1 = chance, best_ratio = all of it on the mark."),
        "auroc": st.column_config.NumberColumn("AUROC", format="%.2f", help="How well the map's mass inside the mark "
                                               "tells marked from clean copies: 0.5 = chance, 1 = always."),
        "share_clean": st.column_config.NumberColumn("share (clean)", format="%.3f"),
        "share_marked": st.column_config.NumberColumn("share (marked)", format="%.3f")})
    st.markdown("**The clean and marked runs compared image by image** (A: clean, B: marked)")
    choices = st_core.paired_choices(result)
    if not choices:
        return
    # an option's text is shown as it is (no Markdown), so it is not escaped
    choice = st.selectbox("Method and class", choices, key="ds_st_paired",
                          format_func=lambda c: st_core.paired_label(result, c))
    with shown_errors() as outcome:  # pairing reads every map: once per self-test and choice shown
        kept = st.session_state.get(PAIRED_KEY)
        if kept is None or kept[0] is not result or kept[1] != choice:
            kept = st.session_state[PAIRED_KEY] = (result, choice, st_core.paired_runs(result, choice))
    if not outcome.failed:
        run_compare.comparison_view(kept[2], trust, prefix="ds_st_cmp")
