"""IBA Explorer: entry point. `streamlit run app.py`.

Defines the pages; each page gathers inputs and shows results, the science lives in iba_core.
"""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="IBA Explorer", page_icon=":material/blur_on:", layout="wide")

PAGES = [
    st.Page("app_pages/home.py", title="Home", icon=":material/home:", default=True),
    st.Page("app_pages/per_sample.py", title="Per-Sample Bottleneck", icon=":material/blur_on:"),
    st.Page("app_pages/beta_layer.py", title="β × layer", icon=":material/grid_view:"),
    st.Page("app_pages/compare.py", title="Compare methods", icon=":material/compare:"),
    st.Page("app_pages/evaluate.py", title="Evaluate", icon=":material/analytics:"),
]

page = st.navigation(PAGES)
st.sidebar.caption(
    "Per-Sample Information Bottleneck: Schulz, Sixt, Tombari & Landgraf, "
    "*Restricting the Flow: Information Bottlenecks for Attribution*, ICLR 2020."
)
page.run()
