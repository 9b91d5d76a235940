"""The Dataset page's "compare with another run" (issue #42, item 1): once a run is open, a second run folder typed
on the server, a method of each, and the two runs compared image by image — the counts or the one-sentence refusal
(the open run stays), the table most changed first, the most changed images' maps beside their signed difference,
per class the mean difference and the changed predictions, the downloads. The logic is `iba_core.app.run_compare`."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from iba_core.app import dataset as ds
from iba_core.app import run_compare as rc
from iba_core.trust import Trust, visitor_path
from pages.widgets.errors import shown_errors
from pages.widgets.text import plain

#: The second run (B), opened on this page; its folder's text field.
OTHER_KEY, OTHER_PATH_KEY = "ds_cmp_run", "ds_cmp_path"
#: Comparisons made this session, by (A's folder and rows, B's folder and rows, methods): pairing reads every map.
CACHE_KEY = "_ds_cmp_cache"


def compare_section(run, trust: Trust) -> None:
    """The comparison of the open run (A) with a run folder typed here (B), folded until used."""
    st.divider()
    with st.expander("Compare with another run", icon=":material/compare_arrows:", key="ds_cmp_open"):
        st.caption("Two runs over the same images (two networks, methods or settings), or over two folders whose "
                   "files share their relative paths (before and after a change), compared image by image: the "
                   "change of the bits (or of the map's positive mass), of p(target) and of the prediction, and "
                   "the signed difference maps B − A. This run is A. The same from the command line: "
                   "`python -m iba_core compare-runs RUN_A RUN_B --out DIR`.")
        other = other_run(trust)
        if other is None:
            return
        paired = comparison(run, other)
        if paired is not None:
            comparison_view(paired, trust)


def other_run(trust: Trust):
    """Run B: the folder typed here, opened under the trust rules as the first (a refusal in one sentence; the
    run open above stays), kept for the session."""
    with st.form("ds_cmp_form", border=False):
        c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
        path = c1.text_input("Run folder to compare with (B)", key=OTHER_PATH_KEY, placeholder="/data/runs/marked",
                             help="The --out folder of another folder run.")
        pressed = c2.form_submit_button("Compare", icon=":material/compare_arrows:", key="ds_cmp_button")
    if pressed:
        st.session_state.pop(OTHER_KEY, None)  # a refused folder must not leave the run before it compared
        with shown_errors():
            st.session_state[OTHER_KEY] = rc.open_other_run(path, trust)
    return st.session_state.get(OTHER_KEY)


def comparison(run, other):
    """The pairing of the chosen methods (kept for the session), or None after its one-sentence refusal."""
    keys_a, names_a = rc.method_choices(run)
    keys_b, names_b = rc.method_choices(other)
    c1, c2 = st.columns(2)
    # keyed by the runs' methods: another pair of runs starts from its own defaults, not a method it lacks
    method_a = c1.selectbox("Method of A (this run)", keys_a, key="ds_cmp_method_a_" + "_".join(keys_a),
                            format_func=names_a.get)
    method_b = c2.selectbox("Method of B", keys_b, key="ds_cmp_method_b_" + "_".join(keys_b), format_func=names_b.get)
    key = (str(run.path), len(run.table), str(other.path), len(other.table), method_a, method_b)
    cache = st.session_state.setdefault(CACHE_KEY, {})
    if key not in cache:
        with shown_errors() as outcome, st.spinner("Comparing the runs image by image…"):
            cache.clear()  # one comparison kept: it holds two opened runs
            cache[key] = rc.compare_runs(run, other, method_a, method_b)
        if outcome.failed:
            return None
    return cache[key]


def comparison_view(paired, trust: Trust, prefix: str = "ds_cmp") -> None:
    """The counts, the notes, the most changed images, the table, the classes and the downloads; `prefix` keeps the
    widgets of two comparisons on one page apart (the self-test's is a second)."""
    st.caption(plain(rc.runs_sentence(paired, trust)))
    st.info(plain(rc.counts_sentence(paired)), icon=":material/compare_arrows:")
    for note in paired.notes:
        st.warning(plain(note), icon=":material/info:")
    with shown_errors() as outcome:
        cells, scales = rc.top_cells(paired, trust)
    if not outcome.failed:
        st.markdown(f"**The {len(cells)} most changed images** ({plain(paired.order)})")
        st.caption(plain(scales))
        for cell in cells:  # one row an image, its numbers beside it: six rows stay about a screen high
            cols = st.columns([1, 1, 1, 1.35, 1.65], vertical_alignment="center")
            if cell.photo is not None:
                cols[0].image(cell.photo, width="stretch")
            else:
                cols[0].caption("The image cannot be read on this server.")
            cols[1].image(cell.map_a, caption="A", width="stretch")
            cols[2].image(cell.map_b, caption="B", width="stretch")
            cols[3].image(cell.difference, caption="B − A", width="stretch")
            cols[4].caption(plain(cell.caption))
    st.markdown("**Every matched image**")
    st.dataframe(rc.shown_table(paired), hide_index=True, key=f"{prefix}_table", column_config={
        "delta_score": st.column_config.NumberColumn(f"Δ{rc.score_word(paired)}", format="%+.3g"),
        "delta_p": st.column_config.NumberColumn("Δp(target)", format="%+.3f"),
        "changed": st.column_config.CheckboxColumn("changed", help="The two runs' predictions differ.")})
    class_view(paired)
    downloads(paired, trust, prefix)


def class_view(paired) -> None:
    """Per class of A: the mean difference map on the classes' one scale, with the changed predictions."""
    cells = rc.class_cells(paired)
    st.markdown("**Per class**")
    st.caption(f"The mean difference map of each class of A, on one scale for every class: "
               f"±{paired.class_scale:.3g} (averaging shrinks the maps, so not the images' scale).")
    per_row = 4
    for start in range(0, len(cells), per_row):
        cols = st.columns(per_row)
        for col, cell in zip(cols, cells[start:start + per_row]):
            col.image(cell["png"], width="stretch")
            col.caption(plain(cell["caption"]))


def downloads(paired, trust: Trust, prefix: str) -> None:
    """The table as Parquet and CSV, and the HTML report (made on request)."""
    c1, c2, c3 = st.columns(3)
    c1.download_button("Comparison (Parquet)", ds.table_parquet(paired.table), "paired.parquet",
                       "application/vnd.apache.parquet", on_click="ignore", icon=":material/download:",
                       key=f"{prefix}_parquet")
    c2.download_button("Comparison (CSV)", ds.table_csv(paired.table), "paired.csv", "text/csv", on_click="ignore",
                       icon=":material/download:", key=f"{prefix}_csv")
    key = (str(paired.run_a.path), str(paired.run_b.path), paired.method_a, paired.method_b, len(paired.table))
    if c3.button("Make the comparison's report", icon=":material/description:", key=f"{prefix}_report_button"):
        with shown_errors(), st.spinner("Drawing the report…"):
            st.session_state[f"_{prefix}_report"] = (key, rc.report_bytes(paired, trust))
    made = st.session_state.get(f"_{prefix}_report")
    if made is not None and made[0] == key:
        name = f"compare_{Path(visitor_path(paired.run_b.path, trust)).name or 'runs'}.html"
        c3.download_button("Report (HTML)", made[1], name, "text/html", on_click="ignore",
                           icon=":material/download:", key=f"{prefix}_report_download")
