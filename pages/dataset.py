"""Dataset page: a whole folder run (issue #22) — where does the network take its information across a data set?
Open a run folder (or start a run on a folder of the server), filter its table, look through the overlays, the
class means and the clusters of similar maps, open an image on the Per-Sample page, download the table and report.
The logic lives in iba_core.app.dataset and its neighbours (dataset_gallery, dataset_classes, dataset_concepts,
prompt_search, dataset_report, folder_job, concept_job); the concepts are drawn by pages/widgets/concept_atlas."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import streamlit as st

from iba_core.app import dataset as ds
from iba_core.app import dataset_classes, dataset_gallery, dataset_report, folder_job, prompt_search
from iba_core.app.choices import folder_run_choices
from iba_core.app.inputs import prompts_from_text
from iba_core.app.stats_source import stats_folder
from iba_core.networks.clip_models import is_clip
from iba_core.render.text import count_of, shown_name
from iba_core.runs.highlights import BITS_UNIT, BORDER_FLAG, named
from iba_core.runs.store import YARDSTICK_COLUMNS
from iba_core.trust import visitor_path
from pages.widgets import concept_atlas
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import method_picker
from pages.widgets.network_picker import network_picker
from pages.widgets.page import (app_trust, bring_into_view, presentation, request_budget, session_owner,
                                through_app)
from pages.widgets.text import plain
from pages.widgets import run_compare, self_test

RUN_KEY, PATH_KEY, REPORT_KEY = "ds_run", "ds_path", "ds_report"
#: What the table and gallery are narrowed to: (run folder, title, images[, a concept for the gallery]), or absent.
FOCUS_KEY = "ds_focus"
#: Class views (mean map and clusters) already computed this session, by (run folder, rows, method, class).
CLASS_CACHE_KEY = "_ds_class_views"
#: What stands out (`ds.highlights`), computed once per run and method this session.
HIGHLIGHTS_KEY = "_ds_highlights"
#: Thumbnails per highlight on the first screen (one row).
HIGHLIGHT_THUMBS = 6  # columns wide enough at 1280 px for a name like "marked/02.png" on one line
#: The last "Estimate time" of this session.
ESTIMATE_KEY = "_ds_estimate"
#: The start section's open state, and the request to fold it (a run was just opened).
START_OPEN_KEY, FOLD_KEY = "ds_start_open", "_ds_fold_start"
#: The container of the background run's progress (at the top of the run section).
JOB_KEY = "ds_job"
#: Seconds between two looks at a background run's progress.
POLL_S = 1.0

through_app()
st.title("Dataset")
INTRO = (
    "A folder run explains every image of a folder (`python -m iba_core attribute FOLDER --out RUN_DIR`, or "
    "*Start a run* below). Opening a run shows first **what stands out** across it: shortcut candidates among its "
    "concepts, images that need very few bits, flagged clusters, class means in a corner or the border, outliers. "
    "Then the **concepts** the network uses per class, ranked by the bits they carry; filter the table by class, "
    "correct or not, method, bits and each measure; see the maps over the images on **one bits scale**; per class, "
    "the **mean map** and the **clusters of similar maps** (SpRAy). *Per-Sample* opens an image there with the "
    "run's network, layer and class. The same report: `python -m iba_core report RUN_DIR --out report.html`."
)
intro = st.empty()  # filled once the run to show is known (Open run is handled below)


def introduction(run_open: bool) -> None:
    """The page's introduction; with a run open, one line (its text as the help), so the run's highlights sit on the
    first screen."""
    if not run_open:
        intro.markdown(INTRO)
    else:
        intro.caption("What stands out across the run comes first; then its concepts, the table, the gallery, and "
                      "per class the mean map and the clusters of similar maps.", help=INTRO)
trust = app_trust()


# ---- open or start a run -------------------------------------------------------------------------


def open_section() -> None:
    with st.form("ds_open_form", border=False):
        c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
        path = c1.text_input("Run folder on the server", key=PATH_KEY, placeholder="/data/runs/val",
                             help="The --out folder of a folder run (it holds run.json and results.parquet).")
        pressed = c2.form_submit_button("Open run", type="primary", icon=":material/folder_open:",
                                        key="ds_open_button")
    if pressed:
        with shown_errors():  # one sentence; the run shown before stays
            st.session_state[RUN_KEY] = ds.open_run_folder(path, trust)
            st.session_state.pop(REPORT_KEY, None)
            st.session_state[FOLD_KEY] = True


@dataclass(frozen=True)
class StartForm:
    """What the start form held when a button was pressed: the folders, the run's choices, and which button."""

    source: str
    out: str
    methods: list[str]
    layer: str
    limit: int | None
    stats_images: str
    prompt_text: str
    metrics: list[str]
    estimate: bool
    pressed: bool


def start_section():
    """The folded section that times and starts a folder run of the chosen network in the background; returns the
    chosen network (a `SharedModel`, None where it does not load), which the concepts' form uses too."""
    # folded again when a run is opened (FOLD_KEY), so a form used before does not push the run's first screen down
    if st.session_state.pop(FOLD_KEY, False):
        st.session_state[START_OPEN_KEY] = False
    with st.expander("Start a run on a folder of the server", icon=":material/play_circle:", key=START_OPEN_KEY,
                     on_change="rerun"):
        st.caption("The network comes from the menu below; the run goes on in the background (one per server), a "
                   "few images at a time, so this and other pages stay usable. A run folder that exists is resumed: "
                   "what is done is skipped. *Estimate time* times one image first. " + folder_job.GPU_ROAD)
        shared = network_picker()
        if shared is None:
            return None
        network = shared.network
        form = start_form(network)
        prompts: list[str] = []
        if (form.estimate or form.pressed) and is_clip(network):
            with shown_errors() as outcome:
                prompts = prompts_from_text(form.prompt_text)
            if outcome.failed:
                return
        if form.estimate:
            with shown_errors(), st.spinner("Timing one image with the chosen methods…"):
                st.session_state[ESTIMATE_KEY] = folder_job.time_one_image(
                    shared, form.source, form.methods, form.layer, form.limit, trust=trust, metrics=form.metrics,
                    prompts=prompts, stats_images=form.stats_images, budget=request_budget()).text()
        if form.metrics and not st.session_state.get(ESTIMATE_KEY):
            st.caption(plain(folder_job.metric_cost_text(network, form.metrics)))
        if st.session_state.get(ESTIMATE_KEY):
            st.info(plain(st.session_state[ESTIMATE_KEY]), icon=":material/timer:")
        if form.pressed:
            start_run(shared, form, prompts)
    return shared


def start_form(network) -> StartForm:
    """The start form's fields for `network` (its layers, its methods, prompts for a CLIP model) and its buttons."""
    choices, names, defaults = folder_run_choices(network)  # a CLIP model: M2IB's β·k first
    # Only a button starts the run: Enter in a text field commits the field, it does not submit the form.
    with st.form("ds_start_form", border=False, enter_to_submit=False):
        c1, c2 = st.columns(2)
        source = c1.text_input("Image folder on the server", key="ds_source", placeholder="/data/val")
        out = c2.text_input("Run folder (created if missing)", key="ds_out", placeholder="/data/runs/val")
        methods = method_picker("Methods", "ds_methods", choices, names, defaults,
                                help="The Per-Sample Bottleneck takes seconds per image on a CPU.")
        c3, c4 = st.columns(2)
        spec = network.spec
        layer = c3.selectbox("Layer (bottlenecks)", spec.layers, index=spec.layers.index(spec.default_layer),
                             key=f"ds_layer_{spec.key}", format_func=network.layer_label)
        limit = c4.number_input("At most this many images", 1, 100_000, None, key="ds_limit", placeholder="all")
        own = stats_folder(network)  # the network's own: its model card's folder, else the sample photos
        stats_images = st.text_input(
            "Feature statistics from this image folder (optional)", key=f"ds_stats_images_{spec.key}",
            placeholder=own or "the offline sample photos",
            help="The bottlenecks' feature statistics (μ_R, σ_R of the layer) come from these images; empty: "
            "the network's own folder (its model card's stats_images), else the offline sample photos. A run "
            "folder keeps the folder it was made with. Another folder here needs no new network.")
        prompt_text = st.text_area(
            "Text prompts (one a line)", key="ds_prompts", placeholder="a photo of a dog\na watermark",
            help="A CLIP model explains text prompts: a map per image, method and prompt. A run folder that "
            "exists gets the prompts it lacks; those it holds are skipped.") if is_clip(network) else ""
        metrics = st.multiselect(
            "The field's metrics per map (optional)", folder_job.PAGE_METRICS, key="ds_metrics", placeholder="none",
            help="Each metric (insertion and deletion under RISE's protocol) as a column of the table and "
                 "means per method and class. Each costs forward passes per image and method: "
                 + plain(folder_job.metric_cost_text(network, folder_job.PAGE_METRICS))
                 + " The pointing game needs boxes: run it from the command line with --boxes.")
        b1, b2 = st.columns(2)
        estimate = b1.form_submit_button("Estimate time", icon=":material/timer:", key="ds_estimate_button",
                                         help="Time one image of the folder with these methods now.")
        pressed = b2.form_submit_button("Start run", icon=":material/play_arrow:", key="ds_start_button")
    return StartForm(source, out, methods, layer, None if limit is None else int(limit), stats_images, prompt_text,
                     metrics, estimate, pressed)


def start_run(shared, form: StartForm, prompts: list[str]) -> None:
    """Start the form's folder run in the background, or say whose run is going; the page then shows its progress."""
    before = folder_job.current_job()
    with shown_errors():
        try:
            job = folder_job.start_folder_job(shared, form.source, form.out, form.methods, form.layer, form.limit,
                                              trust=trust, owner=session_owner(), metrics=form.metrics,
                                              prompts=prompts, stats_images=form.stats_images, budget=request_budget())
        except folder_job.FolderRunBusy as busy:  # another session's run: its progress, politely
            st.info(plain(busy.message), icon=":material/hourglass_top:")
            return
        if job is before and job.running:  # the user's own run: its progress is shown below
            st.info(f"Your folder run into {plain(visitor_path(job.run_dir, trust))} is going; its progress is at the "
                    "top.", icon=":material/hourglass_top:")
        else:
            st.session_state[PATH_KEY + "_next"] = str(job.run_dir)
            st.session_state.pop(ESTIMATE_KEY, None)  # the run's own pace replaces it
            bring_into_view(JOB_KEY)  # the page is scrolled down to the button: its progress is above


def _showing(run_dir) -> bool:
    """Whether the run open on this page is the one in `run_dir`."""
    run = st.session_state.get(RUN_KEY)
    return run is not None and Path(run.path).resolve() == Path(run_dir).resolve()


def job_section() -> None:
    """The server's background run, redrawn every POLL_S seconds while it runs (a fragment: the page stays)."""
    job = folder_job.current_job()
    if job is None:
        return
    mine = job.owner is None or job.owner == session_owner()
    whose, into = "Your folder run" if mine else "Another session's folder run", plain(visitor_path(job.run_dir, trust))

    @st.fragment(run_every=POLL_S if job.running else None)
    def status() -> None:
        done, total, _ = job.progress()
        if job.running:
            st.progress(done / max(total, 1),
                        text=f"{whose} into {into}: {plain(folder_job.job_text(job))}")
            st.caption(folder_job.GPU_ROAD)
            if mine and st.button("Stop after this batch", key="ds_stop", icon=":material/stop:"):
                job.cancel()
        elif job.error:
            st.error(f"The folder run into {into} stopped: {plain(job.error)}",
                     icon=":material/error:")
        elif _showing(job.run_dir):  # its run is open below: the box would only push it down
            st.caption(f"Folder run into {into}: {plain(folder_job.job_text(job))}; shown below.")
        else:
            st.success(f"Folder run into {into}: {plain(folder_job.job_text(job))}.",
                       icon=":material/check_circle:")
            if st.button("Open this run", key="ds_open_job", icon=":material/folder_open:"):
                with shown_errors():
                    st.session_state[RUN_KEY] = ds.open_run_folder(str(job.run_dir), trust)
                    st.session_state.pop(REPORT_KEY, None)
                    st.session_state[FOLD_KEY] = True
                st.rerun(scope="app")
        if not job.running and st.session_state.get("_ds_was_running"):
            st.session_state["_ds_was_running"] = False
            st.rerun(scope="app")  # the fragment stops polling once the run ended
        st.session_state["_ds_was_running"] = job.running

    status()


# ---- the run -------------------------------------------------------------------------------------


def run_highlights(run, method: str | None = None):
    """What stands out in the run (`ds.highlights`), kept for this run's table and method this session."""
    cache = st.session_state.setdefault(HIGHLIGHTS_KEY, {})
    key = (str(run.path), len(run.table), method)
    if key not in cache:
        cache[key] = ds.highlights(run, method)
    return cache[key]


def stands_out_section(run, found) -> None:
    """The first screen of a run: every highlight with its images (maps over them) and a button that narrows the
    table and gallery to them."""
    names = ds.method_names(run)
    told = "" if found is None else f"In the {names.get(found.method, found.method)} maps of every class, most telling first."
    st.subheader("What stands out", help=plain(told) or None)
    concepts = concept_atlas.stands_out(run, FOCUS_KEY)  # a shortcut candidate among the concepts leads
    if found is None:
        st.info("The run has no method to look at.", icon=":material/info:")
        return
    if not found.items and not concepts:
        st.success(f"Nothing stands out in the {plain(names.get(found.method, found.method))} maps. "
                   f"{plain(found.checked)}", icon=":material/check_circle:")
        return
    for i, h in enumerate(found.items):
        with st.container(border=True, key=f"ds_highlight_{i}"):
            st.markdown(f"**{plain(h.title)}**")
            st.caption(plain(h.detail))
            same = found.same_images_as(i)
            if same is not None:  # one cue often shows several ways: its pictures once
                st.caption(f"The same images as “{plain(found.items[same].title)}” above. Images: "
                           + plain(named(h.images)))
            else:
                highlight_pictures(run, h)
            if st.button(f"Show these {len(h.images)} images in the table and gallery", key=f"ds_focus_{i}",
                         icon=":material/filter_alt:"):
                st.session_state[FOCUS_KEY] = (str(run.path), h.title, tuple(h.images))


def highlight_pictures(run, h) -> None:
    """A highlight's first images, their maps over them on one bits scale, and the names of all its images."""
    with shown_errors() as outcome:
        cells, scale = dataset_gallery.thumbnails_on_one_scale(
            run, ds.highlight_rows(run, h.images[:HIGHLIGHT_THUMBS], h.method), trust)
    if outcome.failed:
        return
    cols = st.columns(HIGHLIGHT_THUMBS)
    for j, cell in enumerate(cells):
        if cell["png"] is not None:
            cols[j].image(cell["png"], width="stretch")
        # a line per part: a file name in a narrow column then wraps whole, not mid-word
        cols[j].caption("  \n".join(plain(part) for part in cell["caption"].split(" · ")))
    more = f" (the first {HIGHLIGHT_THUMBS} shown)" if len(h.images) > HIGHLIGHT_THUMBS else ""
    note = (f"Maps over the images on one scale: 0 – {scale:.3g} bits per pixel (at least a typical map's mean, so "
            "maps that hold almost nothing stay dark). ") if scale else ""
    st.caption(f"{note}Images: " + plain(named(h.images)) + more)


def prompt_section(run) -> None:
    """For a run with text prompts (a CLIP network): one of its prompts (or one typed) → the images ranked by the
    bits their map needs for it (or by similarity), as thumbnails with their numbers; a prompt the run does not
    hold says how to add it."""
    prompts = prompt_search.run_prompts(run)
    if not prompts:
        return
    st.subheader("Search the run for a prompt")
    names = ds.method_names(run)
    c1, c2, c3 = st.columns([2, 2, 1.4])
    chosen = c1.selectbox("One of the run's prompts", prompts, key="ds_prompt", format_func=plain)
    typed = c2.text_input("…or type a prompt", key="ds_prompt_typed", placeholder="e.g. a watermark",
                          help="Overrides the choice on the left. A prompt the run does not hold says how to add it.")
    wanted = " ".join(typed.split()) or chosen
    held = prompt_search.held_prompt(run, wanted)
    if held is None:
        st.warning(plain(prompt_search.missing_prompt_text(run, wanted, command=False, trust=trust)),
                   icon=":material/manage_search:")
        st.code(prompt_search.add_prompt_command(run, wanted, trust), language="bash")
        return
    methods = prompt_search.prompt_methods(run, held)
    method = c3.selectbox("Ranked by the maps of", methods, key="ds_prompt_method",
                          format_func=lambda k: plain(names.get(k, k)))
    with shown_errors() as outcome:
        found = prompt_search.search_prompt(run, held, method)
        top = found.rows.head(prompt_search.PROMPT_HITS)
        scale = dataset_gallery.page_scale(run, top)
        pictures = [dataset_gallery.image_thumbnail(run, row, trust, size=2 * dataset_gallery.THUMB_PX,
                                                    top=scale if scale > 0 else None)
                    for _, row in top.iterrows()]
    if outcome.failed:
        return
    order = ("the bits their map needs for it, most first (ties: the higher similarity)" if found.by == "total_bits"
             else "their cosine similarity with it, highest first")
    st.caption(f"The {count_of(len(found.rows), 'image')} of the run for “{plain(held)}”, ranked by {order}; the "
               f"first {len(top)} shown. Similarity: the cosine of the image's and the prompt's embeddings (−1 … 1, "
               "not a probability)."
               + (f" Maps over the images on one scale, 0 – {scale:.3g} bits per pixel." if found.by == "total_bits"
                  and scale > 0 else ""))
    per_row = 4 if presentation() else 6
    cols = st.container(key="ds_prompt_hits").columns(per_row)
    for i, ((_, row), png) in enumerate(zip(top.iterrows(), pictures)):
        with cols[i % per_row]:
            if png is None:
                st.info("The image cannot be read on this server.", icon=":material/image_not_supported:")
            else:
                st.image(png, width="stretch")
            st.caption(plain(prompt_search.prompt_caption(row, i + 1, found.by)))


def metrics_section(run) -> None:
    """The means of the field's metrics the run measured, per method and per class (nothing for a run without)."""
    with shown_errors() as outcome:
        means = ds.metric_means(run)
    if outcome.failed or means is None:
        return
    st.subheader("The field's metrics", help=" ".join(plain(means.notes[c]) for c in means.columns))
    st.caption(plain(" ".join(means.protocol)) + " ↑: higher is better, ↓: lower is better; a mean is over the maps "
               "with a value.")
    config = {c: st.column_config.NumberColumn(means.header(c), format="%.3f", help=means.notes[c])
              for c in means.columns}
    st.dataframe(means.by_method[["method", "maps", *means.columns]], hide_index=True, key="ds_metric_means",
                 column_config=config)
    with st.expander("Per class", icon=":material/category:"):
        st.dataframe(means.by_class[["class", "method", "maps", *means.columns]], hide_index=True,
                     key="ds_metric_class_means", column_config=config)


def filters(run) -> ds.RowFilter:
    table = run.table
    names = ds.method_names(run)
    c1, c2, c3 = st.columns([2, 1, 2])
    classes = sorted(str(c) for c in ds.result_rows(table)["class_name"].dropna().unique())
    chosen = c1.multiselect("Classes", classes, key="ds_classes", format_func=plain, placeholder="all classes")
    correct = c2.radio("Prediction", ds.CORRECT_CHOICES, key="ds_correct", horizontal=True,
                       help="correct: the network's top-1 is the label (rows without a label count as neither).")
    note = ds.label_note(table)
    if note:
        st.info(note, icon=":material/label_off:")
    methods = c3.multiselect("Methods", list(names), key="ds_methods_shown", format_func=lambda k: names[k],
                             placeholder="all methods")
    ranges = []
    with st.expander("Bits and measures", icon=":material/tune:"):
        st.caption("border_share: share of the map in the outer 10 % on each side (36 % of the area); "
                   "concentration: share in the top 5 % of pixels; distance_to_class_mean: 1 − cos to the class's "
                   "mean map (28 × 28); box_share: share inside the boxes, when given; the field's metrics (insertion "
                   "AUC and the others), when the run measured them.")
        cols = st.columns(3)
        i = 0
        for column in ds.MEASURES:
            span = ds.value_range(table, column)
            if span is None or span[0] == span[1]:
                continue
            low, high = cols[i % 3].slider(column, span[0], span[1], span, key=f"ds_range_{column}")
            i += 1
            if (low, high) != span:
                ranges.append((column, float(low), float(high)))
    focus = st.session_state.get(FOCUS_KEY)
    images: tuple[str, ...] = ()
    if focus and focus[0] != str(run.path):  # chosen on another run
        focus = None
    if focus:
        c1, c2 = st.columns([4, 1], vertical_alignment="center")
        c1.info(f"Showing only the images of: {plain(focus[1])}.", icon=":material/filter_alt:")
        if c2.button("Show every image", key="ds_focus_clear", icon=":material/filter_alt_off:"):
            st.session_state.pop(FOCUS_KEY, None)
            st.rerun()
        images = tuple(focus[2])
    return ds.RowFilter(tuple(chosen), correct, tuple(methods), tuple(ranges), images)


TABLE_COLUMNS = ["image", "method", "class_name", "label", "predicted_name", "correct", "p_target", "total_bits",
                 ds.FEW_BITS_COLUMN, "border_share", "box_share", "concentration", "distance_to_class_mean",
                 *YARDSTICK_COLUMNS, "seconds"]


def table_section(run, rows) -> None:
    st.subheader("Table")
    st.caption(f"{len(rows)} of {len(ds.result_rows(run.table))} result rows · click a column's header to sort · "
               f"{ds.FEW_BITS_COLUMN}: total bits at least ten times below the run's upper quartile of this method.")
    # a measure no row has (box_share without boxes, a metric the run did not measure) is left out rather than shown
    # as a column of "None"
    optional = {"box_share", *YARDSTICK_COLUMNS}
    shown = [c for c in TABLE_COLUMNS if c in rows and not (c in optional and len(rows) and rows[c].isna().all())]
    metric_help = ds.metric_help([c for c in shown if c in YARDSTICK_COLUMNS])
    st.dataframe(rows[shown], hide_index=True, key="ds_table", column_config={
        **{c: st.column_config.NumberColumn(c, format="%.3f", help=text) for c, text in metric_help.items()},
        "seconds": st.column_config.NumberColumn(
            "seconds", format="%.2f", help="Seconds per image: images run in batches, and a batch's time is "
                                           "split evenly over its images."),
        "total_bits": st.column_config.NumberColumn("total_bits", help="The bits the map lets through in all "
                                                    "(bottleneck methods)."),
    })
    errors = ds.error_rows(run.table)
    if len(errors):
        with st.expander(f"{len(errors)} rows with an error (an image that could not be read or used)",
                         icon=":material/warning:"):
            st.dataframe(errors, hide_index=True, key="ds_errors")


def gallery_section(run, rows) -> None:
    st.subheader("Gallery")
    if rows.empty:
        st.info("No row passes the filters.", icon=":material/filter_alt_off:")
        return
    c1, c2, c3 = st.columns(3)
    orders = [m for m in ds.MEASURES if m in rows] + ["image"]
    if rows["total_bits"].isna().all():  # no map in bits: the image order reads best
        orders = ["image"] + orders[:-1]
    # fewest bits first by default: the images that need very few bits lead the gallery too
    order = c1.selectbox("Order by", orders, key="ds_order")
    descending = c2.toggle("Highest first", value=order not in ("image", "total_bits"), key=f"ds_desc_{order}")
    pages = -(-len(rows) // dataset_gallery.GALLERY_PAGE)
    page = c3.number_input(f"Page (of {pages})", 1, pages, 1, key="ds_page")
    shown = rows.sort_values(order, ascending=not descending, na_position="last", kind="stable")
    shown = shown.iloc[(int(page) - 1) * dataset_gallery.GALLERY_PAGE:int(page) * dataset_gallery.GALLERY_PAGE]
    with shown_errors() as outcome:
        scale = dataset_gallery.page_scale(run, shown)
        cells = dataset_gallery.gallery(run, shown, trust, scale, outlines=concept_atlas.gallery_outlines(run, FOCUS_KEY))
    if outcome.failed:
        return
    first = (int(page) - 1) * dataset_gallery.GALLERY_PAGE
    st.caption(f"Rows {first + 1}–{first + len(shown)} of "
               f"{len(rows)}. {dataset_gallery.scale_note(run, shown, scale)}")
    per_row = 3 if presentation() else 4
    cols = st.container(key="ds_gallery").columns(per_row)
    for i, cell in enumerate(cells):
        with cols[i % per_row]:
            if cell.png is None:
                st.info("The image cannot be read on this server.", icon=":material/image_not_supported:")
            else:
                st.image(cell.png, width="stretch")
            link = f" · [Per-Sample]({cell.link})" if cell.link else ""
            st.markdown(f"<small>{plain(cell.caption)}</small>{link}", unsafe_allow_html=True)


def class_section(run, found) -> None:
    st.subheader("Per class: mean map and clusters of similar maps")
    names = ds.method_names(run)
    units = ds.method_units(run)
    methods = ds.methods_bits_first(run)
    c1, c2 = st.columns(2)
    method = c1.selectbox("Method", methods, key="ds_class_method", format_func=lambda k: names[k])
    targets = dataset_classes.class_targets(run, method)
    if not targets:
        st.info("No map of this method to group.", icon=":material/info:")
        return
    labels = dict(targets)
    if found is None or found.method != method:
        found = run_highlights(run, method)
    # opens on the first class something stands out in, not on class 0
    flagged = [h.target for h in found.items if h.target is not None and h.target in labels] if found else []
    first = list(labels).index(flagged[0]) if flagged else 0
    target = c2.selectbox("Class", list(labels), index=first, key=f"ds_class_{method}",
                          format_func=lambda t: plain(labels[t]))
    with shown_errors() as outcome:
        # kept for this run's table: the mean map reads every map of the class, the clusters solve an eigenproblem
        cache = st.session_state.setdefault(CLASS_CACHE_KEY, {})
        key = (str(run.path), len(run.table), method, int(target))
        view = cache.get(key) or cache.setdefault(
            key, dataset_classes.class_view(run, method, target, found.cluster_scale if found else None))
    if outcome.failed:
        return
    unit = "bits / pixel" if units.get(method) == BITS_UNIT else (units.get(method) or "attribution")
    left, right = st.columns([1, 3])
    left.image(dataset_gallery.map_png(view.mean_map, unit), width="stretch", caption=f"Mean map of "
               f"{plain(shown_name(view.class_name))} over {count_of(view.images, 'image')} ({unit}).")
    with right:
        st.caption(f"{count_of(len(view.clusters), 'cluster')} (spectral clustering of the 28 × 28 thumbnails; k by the "
                   f"eigengap). A cluster whose maps put {BORDER_FLAG:.0%} or more in the border is flagged. "
                   f"Each cluster's first picture is the mean of its maps ({plain(view.cluster_unit)}) on one scale, "
                   f"0 – {view.cluster_scale:.3g}, for every cluster of the run: a cluster whose maps hold few bits "
                   "is dark. Its members show their maps over the images, on one scale per class.")
        shown = [c.members.head(7) for c in view.clusters]
        with shown_errors() as outcome:
            scale = dataset_gallery.page_scale(run, pd.concat(shown)) if shown else 0.0
        if outcome.failed:
            return
        for c, members in zip(view.clusters, shown):
            flag = " · :red[**border shortcut?**]" if c.flagged else ""
            bits = f" · median {c.median_bits:.3g} bits" if c.median_bits == c.median_bits else ""
            st.markdown(f"**Cluster {c.cluster + 1}** · {count_of(len(c.members), 'image')} · mean border share "
                        f"{c.border_share:.0%}{bits}{flag}")
            words = dataset_classes.cluster_words(c, found.reference_bits if found else None)
            if words:
                st.caption(plain(words))
            cols = st.columns([2] + [1] * 7)  # the cluster's mean map wider: its legend must read
            cols[0].image(dataset_gallery.map_png(c.mean_map, view.cluster_unit, size=96, top=view.cluster_scale),
                          width="stretch")
            cols[0].caption(f"Mean of its maps: peak {float(c.mean_map.max()):.3g} on the common 0 – "
                            f"{view.cluster_scale:.3g} {plain(view.cluster_unit)}")
            for i, (_, row) in enumerate(members.iterrows(), start=1):
                png = dataset_gallery.image_thumbnail(run, row, trust, top=scale if scale > 0 else None)
                if png is not None:
                    cols[i].image(png, width="stretch")
            st.caption("Members: " + ", ".join(plain(shown_name(m)) for m in c.members["image"]))


def downloads(run, method_for_report: str | None, found) -> None:
    st.subheader("Downloads")
    c1, c2, c3 = st.columns(3)
    c1.download_button("Table (Parquet)", ds.table_parquet(run.table), "results.parquet", "application/vnd.apache.parquet",
                       on_click="ignore", icon=":material/download:", key="ds_parquet")
    c2.download_button("Table (CSV)", ds.table_csv(run.table), "results.csv", "text/csv", on_click="ignore",
                       icon=":material/download:", key="ds_csv")
    if method_for_report is None:
        return
    if c3.button("Make the HTML report", icon=":material/description:", key="ds_report_button",
                 help="Class means, clusters and flagged images in one file, pictures embedded."):
        with shown_errors(), st.spinner("Drawing the report…"):
            st.session_state[REPORT_KEY] = dataset_report.report_html(run, method_for_report, trust, found)
    if (report := st.session_state.get(REPORT_KEY)) is not None:
        c3.download_button("Report (HTML)", report, "report.html", "text/html", on_click="ignore",
                           icon=":material/download:", key="ds_report_download")


pending = st.session_state.pop(PATH_KEY + "_next", None)
if pending is not None:  # the run folder of a run just started, for Open run
    st.session_state[PATH_KEY] = pending
# The background run's progress at the top of the run section, above the start form it is started from, and
# scrolled to on Start (`bring_into_view`): below the form, and with the page scrolled down to the button, it was
# out of view at 1280 × 800.
job_slot = st.container(key=JOB_KEY)
open_section()
shared = start_section()
with job_slot:
    job_section()
run = st.session_state.get(RUN_KEY)
introduction(run is not None)
if run is not None:
    st.caption(f"Run {plain(visitor_path(run.path, trust))} · {plain(ds.run_line(run))} · "
               f"{run.table['image'].nunique()} images · {len(run.table)} rows")
    if run.missing:  # damaged parts left out: the sentence says which rows and that a resume redoes them
        st.warning(plain(run.missing), icon=":material/broken_image:")
    found = None
    with shown_errors():
        found = run_highlights(run)
    prompt_section(run)
    stands_out_section(run, found)
    metrics_section(run)
    concept_atlas.atlas_section(run, shared, FOCUS_KEY)
    st.divider()
    rows = ds.with_flags(run, ds.filter_rows(run.table, filters(run)))
    table_section(run, rows)
    gallery_section(run, rows)
    st.divider()
    class_section(run, found)
    st.divider()
    downloads(run, st.session_state.get("ds_class_method"), found)
    run_compare.compare_section(run, trust)
self_test.self_test_section(trust)  # a run open or not: it makes its own runs
