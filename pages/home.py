"""Home page: what IBA shows, one precomputed example, links to the tools."""
from __future__ import annotations

import json

import streamlit as st

from iba_core.render.text import format_probability
from iba_core.settings import ASSETS_DIR
from pages.widgets.page import through_app

through_app()
st.title("IBA Explorer")
st.markdown(
    """
**How many bits of information does each image region give the network?**
IBA (*Information Bottleneck Attribution*, Schulz et al., ICLR 2020) answers this by inserting a
bottleneck into an ImageNet network: at one layer, every feature is partly replaced by noise. The
bottleneck is trained, for a single image, to let through as little information as possible while the
network still recognises the class. What passes is measured in **bits**.

**What bits compare.** Bits compare between images and regions explained by **one network at one layer, with
one β and one set of feature statistics** (μ and σ of the layer, which shape the noise). Change any of these
and the scale changes: in an independent check, statistics from another image set scaled the total bits
×0.80–1.11. Within one setting, a fit with another seed moves the total by a few per cent (the
example below gives its spread), so differences of that size between two images say nothing.

The bits that pass the bottleneck are an upper bound on what the network can use from a region when it
predicts through the noisy bottleneck. So **a region with zero bits is guaranteed not to be needed for the
prediction made through the bottleneck** — a guarantee that gradient- or perturbation-based heatmaps cannot
give. It covers exactly zero bits and only that prediction: a region with a few bits is not covered, and
without the noise the network may still use any region.
"""
)


def example() -> None:
    png, report_file = ASSETS_DIR / "home_example.png", ASSETS_DIR / "home_example.json"
    if not png.is_file() or not report_file.is_file():
        st.info("Run `python scripts/make_home_example.py` to add the example picture.")
        return
    report = json.loads(report_file.read_text())
    res = report["results"]
    st.subheader("Example")
    st.image(
        str(png),
        caption=(
            f"{report['image']} → “{report['target']['name']}”: the photo, the bits per pixel over it, and the "
            f"regions below {report['threshold_bits']:g} bits / pixel (greyed, outlined): few bits, not zero, so "
            "the guarantee does not cover them."
        ),
        width="stretch",
    )
    c1, c2, c3 = st.columns(3)
    c1.metric("Information used", f"{res['total_bits']:,.0f} bits")
    c2.metric("p(target) without bottleneck", format_probability(res["p_target_without_bottleneck"]))
    c3.metric("p(target) with bottleneck", format_probability(res["p_target_with_bottleneck"]))
    spread = report.get("seed_spread")
    if spread:
        st.caption(
            f"Seeds {spread['seeds'][0]}–{spread['seeds'][-1]} give {spread['mean']:,.0f} ± {spread['sd']:,.0f} "
            f"bits (mean ± sd, ±{100 * spread['sd'] / spread['mean']:.1f} %): the same photo and settings, another "
            "draw of the noise."
        )
    st.caption(
        f"{report['model']} at layer {report['layer']}, β·k = {report['settings']['beta_k']:g}, "
        f"{report['settings']['steps']} steps; statistics from {report['statistics']}."
    )


def links() -> None:
    st.subheader("Explore")
    c1, c2 = st.columns(2)
    with c1.container(border=True):
        st.page_link("pages/per_sample.py", label="**Per-Sample Bottleneck**", icon=":material/blur_on:")
        st.caption("Your image (or a sample photo): watch the heatmap form step by step and replay it, read off "
                   "the bits, see which regions pass only a few, download the results.")
    with c2.container(border=True):
        st.page_link("pages/beta_layer.py", label="**β × layer**", icon=":material/grid_view:")
        st.caption("The paper's Figure 3 for your image: how the penalty β and the bottleneck's depth change the map.")


links()
example()
