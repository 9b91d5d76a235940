"""The Dataset page's concepts (issue #41): the shortcut candidates that lead "What stands out" (each with a picture
of where), the atlas (per class its concepts, each a strip of its top crops with its numbers and a button that
narrows the table and gallery to its images, the gallery then outlining it), and, for a run without a concept set,
the form that finds them in the background with its time estimated first and Stop. The logic is in
iba_core.app.dataset_concepts and iba_core.app.concept_job; this module gathers input and draws."""
from __future__ import annotations

import streamlit as st

from iba_core.app import concept_job
from iba_core.app import dataset_concepts as dc
from iba_core.app.dataset import methods_bits_first
from iba_core.app.dataset_classes import class_targets
from iba_core.concepts.measures import USE_SHARE
from iba_core.runs.highlights import named
from pages.widgets.errors import shown_errors
from pages.widgets.page import app_trust, session_owner
from pages.widgets.text import plain

#: Strips already drawn this session, by (run folder, set stamp, group, concept, whole crops).
STRIPS_KEY = "_ds_concept_strips"
#: The concept set open this session: (run folder, its stamp, the set).
SET_KEY = "_ds_concept_set"
#: The last "Estimate time" of the concepts' form: ((run folder, settings), its sentence).
ESTIMATE_KEY = "_ds_concepts_estimate"
#: Shortcut candidates "What stands out" shows first (a run of many classes may have many; the atlas flags each).
HIGHLIGHT_CONCEPTS = 3
#: Pictures of a shortcut candidate in "What stands out": its top images whole, the concept's place outlined.
HIGHLIGHT_PICTURES = 4
#: Seconds between two looks at a concept job's progress.
POLL_S = 1.0
#: The largest K the form offers (the contract's automatic choice goes up to its k_max).
K_LIMIT = 32
WHAT = ("A concept is a direction of the bottleneck layer's activations found by non-negative matrix factorisation "
        "over the class's images (CRAFT's idea, ranked here by information). Bits share: the share of the class's "
        "bits that falls where the concept is active; effect: how much p(target) drops when its part of the layer "
        f"is removed; used by: the images that put at least {USE_SHARE:.0%} of their bits in it.")


def concept_set(run):
    """The run's newest concept set, opened once while it stays as it is (`dataset_concepts.set_stamp`), or None (none
    yet, or one that cannot be read: said in one sentence)."""
    with shown_errors():
        stamp = dc.set_stamp(run)
        kept = st.session_state.get(SET_KEY)
        if stamp is None:
            return None
        if kept is None or kept[:2] != (str(run.path), stamp):
            kept = st.session_state[SET_KEY] = (str(run.path), stamp, dc.run_concepts(run))
        return kept[2]
    return None


def strip(run, concepts, row, whole: bool = False) -> list[dc.StripCell]:
    """A concept's strip (`dataset_concepts.concept_strip`), drawn once per session and concept set."""
    cache = st.session_state.setdefault(STRIPS_KEY, {})
    key = (str(run.path), dc.set_stamp(run), str(row["group"]), int(row["concept"]), whole)
    if key not in cache:
        cache[key] = dc.concept_strip(run, concepts, row, app_trust(), whole=whole)
    return cache[key]


def concept_columns(pictures: int = dc.STRIP_IMAGES, text: float = 3):
    """A concept's row: a column for its words and buttons, then one per picture of its strip (low enough that a
    concept takes about a third of the first screen at 1280 × 800)."""
    words, *columns = st.columns([text] + [1] * pictures)
    return words, columns


def draw_strip(cells: list[dc.StripCell], cols) -> None:
    """The strip's pictures in `cols`, each with its caption."""
    for col, cell in zip(cols, cells):
        if cell.png is None:
            col.info("Not readable here.", icon=":material/image_not_supported:")
        else:
            col.image(cell.png, width="stretch")
        col.caption("  \n".join(plain(part) for part in cell.caption.split(" · ")))


def focus_on(run, concepts, row, focus_key: str) -> None:
    """Narrow the table and gallery to the concept's images (the page's focus, with the concept for the gallery)."""
    images = dc.concept_images(concepts, str(row["group"]), int(row["concept"]))
    ref = dc.ConceptFocus(str(getattr(concepts, "path", "")), str(row["group"]), int(row["concept"]))
    title = dc.focus_title(row) + "; the gallery outlines where it is active (half its peak or more)"
    st.session_state[focus_key] = (str(run.path), title, images, ref)


def stands_out(run, focus_key: str) -> int:
    """The shortcut candidates among the run's concepts, first in "What stands out" (the HIGHLIGHT_CONCEPTS most
    telling; how many more, said): each with why it is flagged, a picture of where (its concept map over its top
    images, the crop around its peak outlined) and a button that narrows the table and gallery to its images.
    Returns how many there are."""
    concepts = concept_set(run)
    found = dc.shortcut_highlights(concepts) if concepts is not None else []
    for i, h in enumerate(found[:HIGHLIGHT_CONCEPTS]):
        with st.container(border=True, key=f"ds_concept_highlight_{i}"):
            text, pictures = concept_columns(HIGHLIGHT_PICTURES, 2)  # fewer, larger: where it sits must read
            text.markdown(f"**{plain(h.title)}**")
            text.caption(plain(f"Why: {h.reasons}."))
            if text.button(f"Show these {len(h.images)} images", key=f"ds_concept_focus_{i}",
                           icon=":material/filter_alt:", help="In the table and gallery, the concept outlined."):
                focus_on(run, concepts, h.row, focus_key)
            text.caption("Where: its concept map (own colours, not bits) over the images that carry it most; the box: "
                         "the crop the atlas shows. Images: " + plain(named(h.images)))
            with shown_errors():
                draw_strip(strip(run, concepts, h.row, whole=True)[:HIGHLIGHT_PICTURES], pictures)
    if len(found) > HIGHLIGHT_CONCEPTS:
        st.caption(f"{len(found) - HIGHLIGHT_CONCEPTS} more shortcut candidates among the concepts: each is flagged in "
                   "its class's concepts below, and the HTML report lists them all.")
    return len(found)


def atlas_section(run, shared, focus_key: str) -> None:
    """The atlas: per class its concepts (most bits share first), each its strip of top crops, numbers and a button
    for its images; without a concept set, the form that finds them (`start_form`)."""
    st.subheader("Concepts", help=WHAT)
    job_progress(run)
    concepts = concept_set(run)
    if concepts is None:
        st.caption("This run has no concepts yet: find them here, or with `python -m iba_core concepts RUN_DIR`.")
        with st.expander("Find the concepts of this run", icon=":material/category_search:"):
            start_form(run, shared)
        return
    if concepts.missing:
        st.warning(plain(concepts.missing), icon=":material/broken_image:")
    table = concepts.concepts
    choices = dc.groups(table)
    names = dict(choices)
    flags = table["flagged"].fillna(False).astype(bool)
    flagged = [g for g, _ in choices if ((table["group"] == g) & flags).any()]
    if st.session_state.get("ds_concept_group") not in names:  # a group of another set (other classes), or none
        st.session_state.pop("ds_concept_group", None)
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    group = c1.selectbox("Concepts of", list(names), index=[g for g, _ in choices].index(flagged[0]) if flagged else 0,
                         key="ds_concept_group", format_func=lambda g: plain(names[g][:1].upper() + names[g][1:]))
    order = c2.radio("Order by", dc.ORDERS, key="ds_concept_order", horizontal=True,
                     help="Bits share: where the class's information lies. Effect: what the decision needs; a cue "
                          "the class keeps through pure noise carries few bits, yet its effect shows it.")
    st.caption(plain(f"Most {order} first; each picture: a crop around the concept's peak in one of its top images, "
                     f"the concept map over it on one scale per concept. {dc.set_text(concepts)}"))
    for _, row in dc.ordered_concepts(table, group, order).iterrows():
        k = int(row["concept"])
        with st.container(border=True, key=f"ds_concept_{group}_{k}"):
            text, pictures = concept_columns()
            flag = " · :red[**shortcut candidate**]" if bool(row["flagged"]) else ""
            text.markdown(f"**{dc.concept_title(row)}**{flag}")
            text.caption(plain(dc.concept_caption(row)))
            if words := dc.words_text(concepts, row):
                text.caption(plain(words))
            if flag:
                text.caption(plain(f"Why: {dc.flag_text(row)}."))
            if text.button(f"Show its {int(row['images_using'])} images", key=f"ds_concept_show_{group}_{k}",
                           icon=":material/filter_alt:", disabled=not int(row["images_using"]),
                           help="The images that use it, in the table and gallery, the concept outlined."):
                focus_on(run, concepts, row, focus_key)
            with shown_errors():
                draw_strip(strip(run, concepts, row), pictures)
    if concepts.words is None:
        st.caption(dc.WORDS_HOW)
    with st.expander("Find concepts again (another K, other classes)", icon=":material/refresh:"):
        start_form(run, shared)


def gallery_outlines(run, focus_key: str):
    """For the gallery (`dataset_gallery.gallery`'s `outlines`): the regions of the concept the page's focus names,
    or None when it names no concept of this run's newest set."""
    focus = st.session_state.get(focus_key)
    if not focus or len(focus) < 4 or focus[0] != str(run.path) or not isinstance(focus[3], dc.ConceptFocus):
        return None
    concepts = concept_set(run)
    if concepts is None or str(getattr(concepts, "path", "")) != focus[3].set_name:
        return None
    return lambda rows, sizes: dc.outline_masks(concepts, focus[3], rows, sizes)


# ---- finding the concepts ---------------------------------------------------------------------------


def start_form(run, shared) -> None:
    """K (auto or a number), the classes and the whole run; the time estimated before it starts; the job started in
    the background. The network is the app's (the menu of "Start a run"): one the run was not made with is said."""
    from iba_core.concepts import ConceptSettings

    if shared is None:
        st.info("Choose the network this run was made with in the menu of “Start a run” above.",
                icon=":material/info:")
        return
    mismatch = concept_job.network_mismatch(shared.network, run)
    if mismatch:
        st.info(plain(mismatch), icon=":material/info:")
        return
    methods = methods_bits_first(run)
    classes = dict(class_targets(run, methods[0])) if methods else {}
    with st.form("ds_concepts_form", border=False, enter_to_submit=False):
        c1, c2, c3 = st.columns([1, 2, 1], vertical_alignment="bottom")
        k = c1.number_input("Concepts per class (K)", 2, K_LIMIT, None, key="ds_concepts_k", placeholder="auto",
                            help="Empty: chosen per class at the elbow of the reconstruction error.")
        chosen = c2.multiselect("Classes", list(classes), key="ds_concepts_classes", placeholder="every class",
                                format_func=lambda t: plain(classes[t]))
        whole = c3.checkbox("The whole run too", True, key="ds_concepts_whole")
        b1, b2 = st.columns(2)
        estimate = b1.form_submit_button("Estimate time", icon=":material/timer:", key="ds_concepts_estimate")
        pressed = b2.form_submit_button("Find concepts", icon=":material/play_arrow:", key="ds_concepts_start")
    settings = ConceptSettings(k=None if k is None else int(k), classes=tuple(chosen) or None, whole_run=whole)
    asked = (str(run.path), settings)  # an estimate is shown only for the run and settings it was made for
    if estimate:
        with shown_errors():
            st.session_state[ESTIMATE_KEY] = (asked, concept_job.estimate(shared, run, settings, app_trust()).text())
    told = st.session_state.get(ESTIMATE_KEY)
    if told and told[0] == asked:
        st.info(plain(told[1]), icon=":material/timer:")
    if pressed:
        with shown_errors():
            try:
                concept_job.start_concept_job(shared, run, settings, app_trust(), owner=session_owner())
            except concept_job.ConceptRunBusy as busy:
                st.info(plain(busy.message), icon=":material/hourglass_top:")
                return
            st.rerun()  # its progress shows at the top of the section


def job_progress(run) -> None:
    """The concept job of this run, redrawn every POLL_S seconds while it goes (a fragment: the page stays), with
    Stop for the session that started it; once it ends, the page is drawn again with what it found."""
    job = concept_job.current_job()
    if job is None or str(job.run_dir) != str(run.path):
        return
    mine = job.owner is None or job.owner == session_owner()

    @st.fragment(run_every=POLL_S if job.running else None)
    def status() -> None:
        done, total, _ = job.progress()
        if job.running:
            st.progress(done / max(total, 1), text=f"Finding concepts: {plain(job.text())}")
            if mine and st.button("Stop", key="ds_concepts_stop", icon=":material/stop:",
                                  help="Stops at its next step; the classes it finished are kept."):
                job.cancel()
        elif job.error:
            st.error(f"Finding concepts stopped: {plain(job.error)}", icon=":material/error:")
        else:
            st.caption(f"Finding concepts: {plain(job.text())}.")
        if not job.running and st.session_state.get("_ds_concepts_running"):
            st.session_state["_ds_concepts_running"] = False
            st.rerun(scope="app")  # the atlas of what it found
        st.session_state["_ds_concepts_running"] = job.running

    status()
