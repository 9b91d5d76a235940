"""IBA Explorer: entry point. `streamlit run app.py`.

Defines the pages (PAGES, in pages/); each page gathers inputs and shows results, the logic lives in
iba_core.app and the drawing in iba_core.render.
"""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages.widgets.page import VIA_APP_KEY, presentation_toggle

# The tab's icon from this folder: a Material icon as the page icon makes the browser fetch it from Google's
# font host, which an offline machine cannot reach (issue #40, item 8); the icons in the menu come with Streamlit.
st.set_page_config(page_title="IBA Explorer", page_icon=str(Path(__file__).parent / "assets" / "favicon.png"),
                   layout="wide")

PAGES = [
    st.Page("pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("pages/per_sample.py", title="Per-Sample Bottleneck", icon=":material/blur_on:"),
    st.Page("pages/beta_layer.py", title="β × layer", icon=":material/grid_view:"),
    st.Page("pages/compare.py", title="Compare methods", icon=":material/compare:"),
    st.Page("pages/evaluate.py", title="Evaluate", icon=":material/analytics:"),
    st.Page("pages/dataset.py", title="Dataset", icon=":material/photo_library:"),
]

page = st.navigation(PAGES)
st.sidebar.caption(
    "Per-Sample Information Bottleneck: Schulz, Sixt, Tombari & Landgraf, "
    "*Restricting the Flow: Information Bottlenecks for Attribution*, ICLR 2020."
)
presentation_toggle()  # larger text (every page) and maps (β × layer) for a projector
st.session_state[VIA_APP_KEY] = True  # this run went through the navigation above (see through_app)
page.run()
