"""A folder run's HTML report (the Dataset page's download and the `report` command), with no Streamlit: what
stands out across the run, the run's concepts (when it has a concept set), per class the mean map and clusters, the
images flagged by their border share, and the field's metric means, gathered for `render.report.dataset_report_html`.

    html = report_html(run, "iba_10", trust)            # bytes of one self-contained HTML file
"""
from __future__ import annotations

from ..runs.highlights import BITS_UNIT, BORDER_FLAG, RunHighlights, named
from ..runs.tables import Run
from ..trust import Trust, visitor_path
from .dataset import (MetricMeans, empty_methods_sentence, flagged_rows, highlight_rows, highlights,
                      method_layer_text, method_names, method_units, metric_means, result_rows)
from .dataset_classes import class_targets, class_view, cluster_words
from .dataset_concepts import report_concepts
from .dataset_gallery import gallery, map_label, map_png, page_scale, thumbnails_on_one_scale


#: At most this many flagged images, and this many members per cluster or highlight, go into the report (its size).
REPORT_FLAGGED, REPORT_MEMBERS = 24, 12


def report_html(run: Run, method: str, trust: Trust, found: RunHighlights | None = None) -> bytes:
    """The run's self-contained HTML report for `method` (`render.report.dataset_report_html`): first what stands
    out across the run (`highlights`, or `found` when already computed for `method`), the run's concepts where it has
    a concept set (`dataset_concepts.report_concepts`), then per class the mean map and the clusters (their mean
    maps on one scale, members as maps over the images), then the images flagged by their border share; every
    picture embedded as a PNG."""
    from ..render.report import dataset_report_html

    if found is None or found.method != method:
        found = highlights(run, method)
    units = method_units(run)
    label = map_label(units, method)
    stands_out = []
    for i, h in enumerate(found.items if found is not None else []):
        same = found.same_images_as(i)
        if same is None:
            cells, scale = thumbnails_on_one_scale(run, highlight_rows(run, h.images[:REPORT_MEMBERS], h.method),
                                                   trust)
        else:  # drawn above already
            cells, scale = [], None
        stands_out.append({"title": h.title, "detail": h.detail, "kind": h.kind, "images": named(h.images),
                           "cells": cells, "scale": scale,
                           "same_as": None if same is None else found.items[same].title})
    classes = []
    for target, _ in class_targets(run, method):
        view = class_view(run, method, target, found.cluster_scale if found is not None else None)
        clusters = []
        for c in view.clusters:
            cells, scale = thumbnails_on_one_scale(run, c.members.head(REPORT_MEMBERS), trust)
            clusters.append({
                "cluster": c.cluster, "size": len(c.members), "border_share": c.border_share, "flagged": c.flagged,
                "near_zero": cluster_words(c, found.reference_bits if found is not None else None),
                "mean_png": map_png(c.mean_map, view.cluster_unit, top=view.cluster_scale),
                "members": [(cell["caption"], cell["png"]) for cell in cells], "scale": scale,
            })
        classes.append({"name": view.class_name, "target": view.target, "images": view.images,
                        "mean_png": map_png(view.mean_map, label), "clusters": clusters})
    flagged = flagged_rows(result_rows(run.table)[lambda t: t["method"] == method]).head(REPORT_FLAGGED)
    scale = page_scale(run, flagged)
    flagged_cells = [{"image": str(r["image"]), "caption": c.caption, "png": c.png}
                     for (_, r), c in zip(flagged.iterrows(), gallery(run, flagged, trust, scale, with_links=False))]
    table = run.table
    summary = {
        # the run as a visitor may see it: relative to the allowed folder, not the server's layout (issue #40)
        "run": visitor_path(run.path, trust), "network": run.info.get("network") or "unknown",
        "layer": method_layer_text(run, method),  # the method's own (Grad-CAM's target layer), not the run's
        "method": method_names(run).get(method, method), "images": int(table["image"].nunique()),
        "rows": len(table), "errors": int(table["error"].notna().sum()), "border_flag": BORDER_FLAG,
        "scale": scale if units.get(method) == BITS_UNIT else None,
        "checked": found.checked if found is not None else "",
        # rows a damaged (e.g. cut short) part takes away: said, never silently fewer rows (issue #40, item 6)
        "missing": run.missing or "",
        # a method whose map column came out empty for every row: said, not an empty section
        "empty": empty_methods_sentence(table),
    }
    return dataset_report_html(summary, classes, flagged_cells, stands_out, metric_report(metric_means(run)),
                               report_concepts(run, trust)).encode("utf-8")


def metric_report(means: MetricMeans | None) -> dict | None:
    """The report's section on the field's metrics (`render.report.dataset_report_html`'s `metrics`): headers with
    their directions, rows of cells, a note per column and the protocol; None for a run that measured none."""
    if means is None:
        return None
    headers = [means.header(c) for c in means.columns]
    return {"method_headers": ["method", "maps", *headers],
            "by_method": means.by_method[["method", "maps", *means.columns]].values.tolist(),
            "class_headers": ["class", "method", "maps", *headers],
            "by_class": means.by_class[["class", "method", "maps", *means.columns]].values.tolist(),
            "notes": [f"{means.header(c)}: {means.notes[c]}" for c in means.columns], "protocol": means.protocol}
