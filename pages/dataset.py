"""Dataset page: a whole folder run (issue #22) — where does the network take its information across a data set?
Open a run folder (or start a run on a folder of the server), filter its table, look through the overlays, the
class means and the clusters of similar maps, open an image on the Per-Sample page, download the table and report.
The logic lives in iba_core.app.dataset; this page gathers input and draws."""
from __future__ import annotations

import uuid

import streamlit as st

from iba_core.app import dataset as ds
from iba_core.app.choices import method_choices
from iba_core.methods import display_names
from iba_core.render.text import count_of
from pages.widgets.errors import shown_errors
from pages.widgets.form_widgets import method_picker
from pages.widgets.network_picker import network_picker
from pages.widgets.page import app_trust, presentation, through_app
from pages.widgets.text import plain

RUN_KEY, PATH_KEY, REPORT_KEY = "ds_run", "ds_path", "ds_report"
#: Class views (mean map and clusters) already computed this session, by (run folder, rows, method, class).
CLASS_CACHE_KEY = "_ds_class_views"
#: The last "Estimate time" of this session, and its name for the folder runs it starts.
ESTIMATE_KEY, OWNER_KEY = "_ds_estimate", "_ds_owner"
#: Seconds between two looks at a background run's progress.
POLL_S = 1.0

through_app()
st.title("Dataset")
st.markdown(
    "A folder run explains every image of a folder (`python -m iba_core attribute FOLDER --out RUN_DIR`, or "
    "*Start a run* below). Here you look through it: filter the table by class, correct or not, method, bits and "
    "each measure; see the maps over the images on **one bits scale**; per class, the **mean map** and the "
    "**clusters of similar maps** (SpRAy), so a group of images the network explains by the border or a corner "
    "stands out. A click on *Per-Sample* opens an image there with the run's network, layer and class."
)
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


def start_section() -> None:
    with st.expander("Start a run on a folder of the server", icon=":material/play_circle:"):
        st.caption("The network comes from the menu below; the run goes on in the background (one per server), a "
                   "few images at a time, so this and other pages stay usable. A run folder that exists is resumed: "
                   "what is done is skipped. *Estimate time* times one image first. " + ds.GPU_ROAD)
        shared = network_picker()
        if shared is None:
            return
        network = shared.network
        names = display_names()
        # Only a button starts the run: Enter in a text field commits the field, it does not submit the form.
        with st.form("ds_start_form", border=False, enter_to_submit=False):
            c1, c2 = st.columns(2)
            source = c1.text_input("Image folder on the server", key="ds_source", placeholder="/data/val")
            out = c2.text_input("Run folder (created if missing)", key="ds_out", placeholder="/data/runs/val")
            methods = method_picker("Methods", "ds_methods", method_choices(network), names, ["iba_10"],
                                       help="The Per-Sample Bottleneck takes seconds per image on a CPU.")
            c3, c4 = st.columns(2)
            spec = network.spec
            layer = c3.selectbox("Layer (bottlenecks)", spec.layers, index=spec.layers.index(spec.default_layer),
                                 key=f"ds_layer_{spec.key}", format_func=network.layer_label)
            limit = c4.number_input("At most this many images", 1, 100_000, None, key="ds_limit",
                                    placeholder="all")
            b1, b2 = st.columns(2)
            estimate = b1.form_submit_button("Estimate time", icon=":material/timer:", key="ds_estimate_button",
                                             help="Time one image of the folder with these methods now.")
            pressed = b2.form_submit_button("Start run", icon=":material/play_arrow:", key="ds_start_button")
        limit = None if limit is None else int(limit)
        if estimate:
            with shown_errors(), st.spinner("Timing one image with the chosen methods…"):
                st.session_state[ESTIMATE_KEY] = ds.time_one_image(shared, source, methods, layer, limit,
                                                                   trust=trust).text()
        if st.session_state.get(ESTIMATE_KEY):
            st.info(plain(st.session_state[ESTIMATE_KEY]), icon=":material/timer:")
        if pressed:
            before = ds.current_job()
            with shown_errors():
                try:
                    job = ds.start_folder_job(shared, source, out, methods, layer, limit, trust=trust,
                                              owner=session_owner())
                except ds.FolderRunBusy as busy:  # another session's run: its progress, politely
                    st.info(plain(busy.message), icon=":material/hourglass_top:")
                    return
                if job is before and job.running:  # the user's own run: its progress is shown below
                    st.info(f"Your folder run into {plain(job.run_dir)} is going; its progress is below.",
                            icon=":material/hourglass_top:")
                else:
                    st.session_state[PATH_KEY + "_next"] = str(job.run_dir)


def session_owner() -> str:
    """This browser session's name for the folder runs it starts (its own run shows as progress, not a refusal)."""
    return st.session_state.setdefault(OWNER_KEY, uuid.uuid4().hex)


def job_section() -> None:
    """The server's background run, redrawn every POLL_S seconds while it runs (a fragment: the page stays)."""
    job = ds.current_job()
    if job is None:
        return
    mine = job.owner is None or job.owner == st.session_state.get(OWNER_KEY)
    whose = "Your folder run" if mine else "Another session's folder run"

    @st.fragment(run_every=POLL_S if job.running else None)
    def status() -> None:
        done, total, _ = job.progress()
        if job.running:
            st.progress(done / max(total, 1), text=f"{whose} into {plain(job.run_dir)}: {plain(ds.job_text(job))}")
            st.caption(ds.GPU_ROAD)
            if mine and st.button("Stop after this batch", key="ds_stop", icon=":material/stop:"):
                job.cancel()
        elif job.error:
            st.error(f"The folder run into {plain(job.run_dir)} stopped: {plain(job.error)}",
                     icon=":material/error:")
        else:
            st.success(f"Folder run into {plain(job.run_dir)}: {plain(ds.job_text(job))}.",
                       icon=":material/check_circle:")
            if st.button("Open this run", key="ds_open_job", icon=":material/folder_open:"):
                with shown_errors():
                    st.session_state[RUN_KEY] = ds.open_run_folder(str(job.run_dir), trust)
                    st.session_state.pop(REPORT_KEY, None)
                st.rerun(scope="app")
        if not job.running and st.session_state.get("_ds_was_running"):
            st.session_state["_ds_was_running"] = False
            st.rerun(scope="app")  # the fragment stops polling once the run ended
        st.session_state["_ds_was_running"] = job.running

    status()


# ---- the run -------------------------------------------------------------------------------------


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
                   "mean map (28 × 28); box_share: share inside the boxes, when given.")
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
    return ds.RowFilter(tuple(chosen), correct, tuple(methods), tuple(ranges))


TABLE_COLUMNS = ["image", "method", "class_name", "label", "predicted_name", "correct", "p_target", "total_bits",
                 "border_share", "box_share", "concentration", "distance_to_class_mean", "seconds"]


def table_section(run, rows) -> None:
    st.subheader("Table")
    st.caption(f"{len(rows)} of {len(ds.result_rows(run.table))} result rows · click a column's header to sort.")
    st.dataframe(rows[[c for c in TABLE_COLUMNS if c in rows]], hide_index=True, key="ds_table")
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
    order = c1.selectbox("Order by", ["image", *[m for m in ds.MEASURES if m in rows]], key="ds_order")
    descending = c2.toggle("Highest first", value=order != "image", key=f"ds_desc_{order}")
    pages = -(-len(rows) // ds.GALLERY_PAGE)
    page = c3.number_input(f"Page (of {pages})", 1, pages, 1, key="ds_page")
    shown = rows.sort_values(order, ascending=not descending, na_position="last", kind="stable")
    shown = shown.iloc[(int(page) - 1) * ds.GALLERY_PAGE:int(page) * ds.GALLERY_PAGE]
    with shown_errors() as outcome:
        scale = ds.page_scale(run, shown)
        cells = ds.gallery(run, shown, trust, scale)
    if outcome.failed:
        return
    st.caption(f"Rows {(int(page) - 1) * ds.GALLERY_PAGE + 1}–{(int(page) - 1) * ds.GALLERY_PAGE + len(shown)} of "
               f"{len(rows)}. {ds.scale_note(run, shown, scale)}")
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


def class_section(run) -> None:
    st.subheader("Per class: mean map and clusters of similar maps")
    names = ds.method_names(run)
    units = ds.method_units(run)
    methods = sorted(names, key=lambda k: (units.get(k) != ds.BITS_UNIT, k))
    c1, c2 = st.columns(2)
    method = c1.selectbox("Method", methods, key="ds_class_method", format_func=lambda k: names[k])
    targets = ds.class_targets(run, method)
    if not targets:
        st.info("No map of this method to group.", icon=":material/info:")
        return
    labels = dict(targets)
    target = c2.selectbox("Class", list(labels), key=f"ds_class_{method}", format_func=lambda t: plain(labels[t]))
    with shown_errors() as outcome:
        # kept for this run's table: the mean map reads every map of the class, the clusters solve an eigenproblem
        cache = st.session_state.setdefault(CLASS_CACHE_KEY, {})
        key = (str(run.path), len(run.table), method, int(target))
        view = cache.get(key) or cache.setdefault(key, ds.class_view(run, method, target))
    if outcome.failed:
        return
    unit = "bits / pixel" if units.get(method) == ds.BITS_UNIT else (units.get(method) or "attribution")
    left, right = st.columns([1, 3])
    left.image(ds.map_png(view.mean_map, unit), width="stretch",
               caption=f"Mean map of {plain(view.class_name)} over {count_of(view.images, 'image')} ({unit}).")
    with right:
        st.caption(f"{count_of(len(view.clusters), 'cluster')} (spectral clustering of the 28 × 28 thumbnails; k by the "
                   f"eigengap). A cluster whose maps put {ds.BORDER_FLAG:.0%} or more in the border is flagged.")
        for c in view.clusters:
            flag = " · :red[**border shortcut?**]" if c.flagged else ""
            st.markdown(f"**Cluster {c.cluster + 1}** · {count_of(len(c.members), 'image')} · mean border share "
                        f"{c.border_share:.0%}{flag}")
            cols = st.columns(8)
            cols[0].image(ds.map_png(c.mean_thumbnail, "share of the map", size=96), width="stretch")
            for i, (_, row) in enumerate(c.members.head(7).iterrows(), start=1):
                png = ds.image_thumbnail(run, row, trust)
                if png is not None:
                    cols[i].image(png, width="stretch")
            st.caption("Members: " + ", ".join(plain(m) for m in c.members["image"]))


def downloads(run, method_for_report: str | None) -> None:
    st.subheader("Downloads")
    c1, c2, c3 = st.columns(3)
    c1.download_button("Table (Parquet)", ds.table_parquet(run.table), "results.parquet",
                       "application/vnd.apache.parquet", on_click="ignore", icon=":material/download:",
                       key="ds_parquet")
    c2.download_button("Table (CSV)", ds.table_csv(run.table), "results.csv", "text/csv", on_click="ignore",
                       icon=":material/download:", key="ds_csv")
    if method_for_report is None:
        return
    if c3.button("Make the HTML report", icon=":material/description:", key="ds_report_button",
                 help="Class means, clusters and flagged images in one file, pictures embedded."):
        with shown_errors():
            with st.spinner("Drawing the report…"):
                st.session_state[REPORT_KEY] = ds.report_html(run, method_for_report, trust)
    report = st.session_state.get(REPORT_KEY)
    if report is not None:
        c3.download_button("Report (HTML)", report, "report.html", "text/html", on_click="ignore",
                           icon=":material/download:", key="ds_report_download")


pending = st.session_state.pop(PATH_KEY + "_next", None)
if pending is not None:  # the run folder of a run just started, for Open run
    st.session_state[PATH_KEY] = pending
open_section()
start_section()
job_section()
run = st.session_state.get(RUN_KEY)
if run is not None:
    st.divider()
    info = run.info
    st.caption(f"Run {plain(run.path)} · network {plain(info.get('network'))} · layer "
               f"{plain(info.get('layer'))} · {run.table['image'].nunique()} images · {len(run.table)} rows")
    if run.missing:  # damaged parts left out: the sentence says which rows and that a resume redoes them
        st.warning(plain(run.missing), icon=":material/broken_image:")
    rows = ds.filter_rows(run.table, filters(run))
    table_section(run, rows)
    gallery_section(run, rows)
    st.divider()
    class_section(run)
    st.divider()
    downloads(run, st.session_state.get("ds_class_method"))
