"""Downloadable records of a Per-Sample run (a JSON report: settings and numbers; the heatmap as .npy) and of a
folder run (one self-contained HTML page: what stands out first, then classes, clusters and flagged images)."""
from __future__ import annotations

import io
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from ..jsonable import jsonable
from .text import count_of, shown_name

if TYPE_CHECKING:
    from ..bottleneck import BottleneckSettings
    from ..results import AttributionResult

REPORT_VERSION = 1
METHOD = "Per-Sample Information Bottleneck (Schulz et al., ICLR 2020)"


def run_report(
    settings: "BottleneckSettings",
    result: "AttributionResult",
    model_key: str,
    layer: str,
    image_name: str,
    class_name: str,
    *,
    stats_description: str | None = None,
    stats_seconds: float | None = None,
) -> dict:
    """Everything needed to reproduce and cite a run, without the arrays (JSON-serialisable; NaN → null).

    results.seconds is the optimisation's time; results.statistics_seconds (when given) the time to get
    the feature statistics. results.bottleneck_lost_class says whether the bottleneck discarded the class;
    results.target_note (a sentence, "" when fine) whether the network hardly predicts the explained class
    (`per_sample.target_note`), next to the network's own top-1 (results.predicted).
    """
    heatmap = np.asarray(result.heatmap)
    return jsonable(
        {
            "report_version": REPORT_VERSION,
            "method": METHOD,
            "image": image_name,
            "model": model_key,
            "layer": layer,
            "target": {"index": int(result.target), "name": class_name},
            # the precision that ran (never "auto": the page says the same), and what was asked for beside it
            "settings": {**asdict(settings), "precision": result.precision, "precision_asked": settings.precision},
            "statistics": stats_description,
            "results": {
                "total_bits": float(result.total_bits),
                "p_target_without_bottleneck": float(result.p_without),
                "p_target_with_bottleneck": float(result.p_with),
                "seconds": float(result.seconds),
                "statistics_seconds": None if stats_seconds is None else float(stats_seconds),
                "bottleneck_lost_class": bool(result.lost_class),
                "predicted": {"index": int(result.predicted), "p": float(result.p_predicted)}
                if result.predicted >= 0 else None,  # -1: a result that does not know it
                "target_note": result.target_note,
                "feature_shape": [int(v) for v in result.feature_shape],
                "heatmap_shape": [int(v) for v in heatmap.shape],
                "max_bits_per_pixel": float(heatmap.max()) if heatmap.size else 0.0,
            },
            "units": {"heatmap": "bits per input pixel", "losses": "nats",
                      "history": "ce, beta_info, info_nats and p_target of each step's forward pass (its noisy "
                                 "batch, before its update)"},
            "history": [
                {"step": h.step, "ce": h.ce, "beta_info": h.beta_info, "info_nats": h.info, "p_target": h.p_target}
                for h in result.history
            ],
        }
    )


def heatmap_npy_bytes(heatmap: np.ndarray) -> bytes:
    """The heatmap (bits per pixel) as a float32 .npy file's bytes; load with np.load(BytesIO(b))."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(heatmap, dtype=np.float32), allow_pickle=False)
    return buf.getvalue()


# ---- the Dataset page's report: one self-contained HTML file ------------------------------------------------

#: The report's look: plain, printable, no script, no file or address outside it.
_REPORT_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; } h3 { font-size: 1rem; }
.cells { display: flex; flex-wrap: wrap; gap: 0.75rem; }
figure { margin: 0; width: 200px; } figure.thumb { width: 100px; }
figcaption { font-size: 0.75rem; overflow-wrap: anywhere; }
img { width: 100%; image-rendering: auto; }
.flag { color: #b00020; font-weight: bold; }
.warning { color: #8a4b00; background: #fff4e0; padding: 0.4rem 0.6rem; }
table.summary td { padding: 0.1rem 0.8rem 0.1rem 0; }
.note { font-size: 0.85rem; color: #555; }
h3.highlight { color: #b00020; }
table.metrics { border-collapse: collapse; font-size: 0.85rem; }
table.metrics th, table.metrics td { padding: 0.15rem 0.6rem; border-bottom: 1px solid #ddd; text-align: right; }
table.metrics th:first-child, table.metrics td:first-child { text-align: left; }
"""


def _img(png: bytes | None, alt: str) -> str:
    """An <img> with the PNG embedded as base64 (a placeholder sentence where there is none)."""
    import base64
    import html

    if png is None:
        return f"<p>{html.escape(alt)}: not readable here.</p>"
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt, quote=True)}" src="data:image/png;base64,{data}">'


def _cells(cells: list[dict], css: str = "thumb") -> str:
    """Figures of [{image, caption, png}] in a wrapping row."""
    import html

    return '<div class="cells">' + "".join(
        f'<figure class="{css}">{_img(c.get("png"), c["image"])}<figcaption>{html.escape(c["caption"])}</figcaption>'
        "</figure>" for c in cells) + "</div>"


def _scale_line(scale: float | None) -> str:
    return "" if scale is None else (f'<p class="note">Maps over the images on one colour scale: 0 – {float(scale):.3g} '
                                     "bits per pixel.</p>")


def _number(value) -> str:
    """A table cell: a number to 3 significant digits (an int as it is), '–' where there is none."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    try:
        number = float(value)
    except (TypeError, ValueError):  # a name (a class, a method): isolated, its invisible characters said
        return shown_name(value) if isinstance(value, str) else str(value)
    return "–" if not np.isfinite(number) else f"{number:.3g}"


def _table(headers: list[str], rows: list[list]) -> str:
    """An HTML table of `rows` (texts and numbers) under `headers`, every text escaped."""
    import html

    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_number(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="metrics"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _metrics_section(metrics: dict) -> list[str]:
    """The field's metrics (`metrics`: headers and rows of the means per method and per class and method, a note
    per column, the protocol's sentences)."""
    import html

    out = ['<h2 id="metrics">The field\'s metrics: means per method and per class</h2>',
           '<p class="note">' + html.escape(" ".join(metrics.get("protocol", []))) + "</p>",
           _table(metrics["method_headers"], metrics["by_method"]), "<h3>Per class</h3>",
           _table(metrics["class_headers"], metrics["by_class"])]
    out.append("<ul>" + "".join(f"<li>{html.escape(note)}</li>" for note in metrics.get("notes", [])) + "</ul>")
    return out


def _stands_out_section(stands_out: list[dict], checked: str) -> list[str]:
    """The report's first section: each highlight with its pictures (or the earlier one naming the same images)."""
    import html

    e = html.escape
    out = ['<h2 id="stands-out">What stands out</h2>']
    if not stands_out:
        out.append(f"<p>Nothing stands out. {e(checked)}</p>")
    for item in stands_out:
        out.append(f'<h3 class="highlight">{e(item["title"])}</h3><p>{e(item["detail"])}</p>')
        if item.get("same_as"):
            out.append(f'<p class="note">The same images as “{e(item["same_as"])}”: '
                       f'{e(str(item.get("images", "")))}.</p>')
        else:
            out.append(_scale_line(item.get("scale")) + _cells(item.get("cells", [])))
    return out


def _classes_section(classes: list[dict]) -> list[str]:
    """The report's classes: each one's mean map, then its clusters with their mean map and members."""
    import html

    e = html.escape
    out = ["<h2>Classes: mean map and clusters of similar maps</h2>"]
    for c in classes:
        out.append(f"<h3>{e(shown_name(c['name']))} (class {int(c['target'])}, {count_of(int(c['images']), 'image')})</h3>")
        out.append('<div class="cells"><figure>' + _img(c.get("mean_png"), f"mean map of {c['name']}")
                   + "<figcaption>mean map</figcaption></figure></div>")
        for k in c.get("clusters", []):
            note = ' <span class="flag">border shortcut?</span>' if k.get("flagged") else ""
            out.append(f"<p>Cluster {int(k['cluster']) + 1}: {count_of(int(k['size']), 'image')}, mean border share "
                       f"{float(k['border_share']):.0%}{note}</p>")
            if k.get("near_zero"):
                out.append(f'<p class="note">{e(k["near_zero"])}</p>')
            cells = ['<figure>' + _img(k.get("mean_png"), "cluster mean") + "<figcaption>where its maps put their "
                     "mass (the mean of its maps, on one scale for every cluster)</figcaption></figure>"]
            cells += [f'<figure class="thumb">{_img(png, name)}<figcaption>{e(name)}</figcaption></figure>'
                      for name, png in k.get("members", [])]
            out.append(_scale_line(k.get("scale")) + '<div class="cells">' + "".join(cells) + "</div>")
    return out


def _flagged_section(flagged: list[dict], flag: float, scale: float | None) -> list[str]:
    """The report's images whose maps lie mostly in the border, on one bits scale where they are in bits."""
    import html

    out = ["<h2>Flagged images</h2>"]
    if not flagged:
        return out + [f"<p>No map puts {flag:.0%} or more of its mass in the border.</p>"]
    if scale is not None:
        out.append(f"<p>One colour scale for all: 0 – {float(scale):.3g} bits per pixel.</p>")
    out.append('<div class="cells">' + "".join(
        f"<figure>{_img(f.get('png'), f['image'])}<figcaption>{html.escape(f['caption'])}</figcaption></figure>"
        for f in flagged) + "</div>")
    return out


def _concepts_section(concepts: dict) -> list[str]:
    """The concepts found in the run's bottleneck layer (`concepts`: set, a sentence on what the set was made with;
    groups [{name, concepts [{title, caption, flag, flagged, cells [{image, caption, png}]}]}], the shortcut
    candidates first in each group; missing: a sentence on damaged parts left out)."""
    import html

    e = html.escape
    out = ['<h2 id="concepts">Concepts: what the network uses, ranked by the bits they carry</h2>',
           '<p class="note">Per class (and for the whole run), the bottleneck layer\'s activations factorised into '
           "concepts (non-negative matrix factorisation). Bits share: the share of the class's bits that falls where "
           "the concept is active; effect: how much p(target) drops when the concept's part of the layer is removed. "
           "Each picture: a crop around the concept's peak in one of its top images, the concept map over it.</p>"]
    if concepts.get("set"):
        out.append(f'<p class="note">{e(str(concepts["set"]))}</p>')
    if concepts.get("missing"):
        out.append(f'<p class="warning">{e(str(concepts["missing"]))}</p>')
    for group in concepts.get("groups", []):
        out.append(f"<h3>{e(str(group['name']))}</h3>")
        for c in group.get("concepts", []):
            flag = f' <span class="flag">shortcut candidate: {e(c["flag"])}</span>' if c.get("flagged") else ""
            out.append(f"<p><b>{e(c['title'])}</b> · {e(c['caption'])}{flag}</p>" + _cells(c.get("cells", [])))
    return out


def dataset_report_html(summary: dict, classes: list[dict], flagged: list[dict],
                        stands_out: list[dict] | None = None, metrics: dict | None = None,
                        concepts: dict | None = None) -> str:
    """A folder run's report as one HTML page with every picture embedded (base64 PNG): what the run is
    (`summary`: run, network, layer, method, images, rows, errors, border_flag, scale, checked), first what stands
    out across the run (`stands_out`: [{title, detail, images (their names in words), cells [{image, caption, png}], scale, same_as (the title of an
    earlier highlight naming the same images, whose pictures are not repeated)}], the same highlights
    as the Dataset page's first screen), per class its mean map and its clusters of similar maps (`classes`: name,
    target, images, mean_png, clusters [{cluster, size, border_share, flagged, near_zero (a sentence or ""),
    mean_png, members [(caption, png)], scale}]), and the images whose maps lie mostly in the border (`flagged`:
    [{image, caption, png}]); and, when the run measured the field's metrics (`metrics`: method_headers,
    by_method, class_headers, by_class (rows of cells), notes, protocol (sentences)), their means after what stands
    out; and when the run has a concept set (`concepts`: `_concepts_section`), its concepts right after what stands
    out. Every text from the run is escaped."""
    import html

    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>IBA Explorer · folder run {e(str(summary.get('run', '')))}</title>",
           f"<style>{_REPORT_STYLE}</style></head><body>",
           "<h1>IBA Explorer · folder run report</h1>", '<table class="summary">']
    for key in ("run", "network", "layer", "method", "images", "rows", "errors"):
        # names the run's files chose: isolated, their invisible characters said (`shown_name`)
        value = summary.get(key, "")
        out.append(f"<tr><td>{e(key)}</td><td>{e(shown_name(value) if isinstance(value, str) else str(value))}"
                   "</td></tr>")
    out.append("</table>")
    for key in ("missing", "empty"):  # rows left out, methods with no map: said before anything is counted
        if summary.get(key):
            out.append(f'<p class="warning">{e(str(summary[key]))}</p>')
    out += _stands_out_section(stands_out or [], str(summary.get("checked", "")))
    if concepts:
        out.extend(_concepts_section(concepts))
    if metrics:
        out.extend(_metrics_section(metrics))
    flag = float(summary.get("border_flag", 0.5))
    out.append(f"<p>Border share: the share of a map's mass (bits for the bottlenecks) in the outer 10 % of the "
               f"image on each side, 36 % of its area. A cluster or image at {flag:.0%} or more is flagged: the "
               "network takes most of what it uses from the border (a ruler, a watermark, a corner mark).</p>")
    out += _classes_section(classes)
    out += _flagged_section(flagged, flag, summary.get("scale"))
    out.append("</body></html>")
    return "\n".join(out)
