"""Two runs compared image by image, drawn (`runs.paired`): a signed difference map in blue (B lower) – white (no
change) – red (B higher) on a scale symmetric around 0, with its colour bar; the comparison's HTML page, built with
the folder-run report's helpers (`render.report`) so both pages look alike."""
from __future__ import annotations

import numpy as np
from PIL import Image

from .colours import WHITE_RGB, colour_bar, colour_map
from .comparison import SIGNED_CMAP
from .overlays import png_bytes
from .report import _REPORT_STYLE, _cells, _number, _table
from .text import count_of, shown_name

#: The side of a difference map's picture (px, before its colour bar).
MAP_PX = 192


def signed_map_png(values: np.ndarray, scale: float, label: str, size: int = MAP_PX) -> bytes:
    """A signed map as a PNG on −scale … +scale (0 white, SIGNED_CMAP: blue below, red above; values beyond the
    scale take the end colours), with a vertical colour bar in `label`. A scale of 0 (no change anywhere) draws
    white."""
    top = max(float(scale), 1e-12)
    picture = colour_map(np.asarray(values, dtype=np.float32), top, SIGNED_CMAP, bottom=-top)
    picture = picture.resize((size, size), Image.Resampling.NEAREST)
    bar = colour_bar(size, top, SIGNED_CMAP, label, bottom=-top, font_size=11)
    out = Image.new("RGB", (size + 6 + bar.width, size), WHITE_RGB)
    out.paste(picture, (0, 0))
    out.paste(bar, (size + 6, 0))
    return png_bytes(out, optimize=False)


def _summary_rows(summary: dict) -> list[list]:
    keys = ("run_a", "run_b", "name_a", "name_b", "score", "basis", "matched", "only_a", "only_b", "failed", "changed",
            "targets_differ", "mean_delta_p", "mean_delta_score", "scale")
    return [[key, "–" if summary.get(key) is None else summary[key]] for key in keys]


def _classes_section(classes: list[dict], scale: float) -> list[str]:
    """Per class: its counts in the caption under its mean difference map, all on one scale of their own."""
    cells = [{"image": f"mean difference of {c['name']}", "png": c["png"],
              "caption": f"{shown_name(c['name'])} (class {c['target']}): {count_of(c['images'], 'image')}, "
                         f"{c['changed']} changed, mean Δp {_number(c['mean_delta_p'])}, "
                         f"mean Δscore {_number(c['mean_delta_score'])}"} for c in classes]
    return ["<h2>Per class (A's classes): changed predictions and the mean difference map</h2>",
            f'<p class="note">Class means on one scale of their own: ±{_number(scale)} (a mean is smaller than '
            "its maps).</p>", _cells(cells, css="pair")]


def paired_report_html(summary: dict, top: list[dict], classes: list[dict], columns: list[str],
                       rows: list[list]) -> str:
    """The comparison's page, every picture embedded: what was compared and the counts (`summary`:
    `runs.paired.Paired.summary()`), its notes, the most changed images (`top`: [{image, caption, png}]) on one
    scale, the table's first rows (`columns`, `rows`), and per class (`classes`: [{name, target, images, changed,
    mean_delta_p, mean_delta_score, png}]). Every text from the runs is escaped."""
    import html

    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>IBA Explorer · two runs compared: {e(str(summary.get('run_a', '')))} → "
           f"{e(str(summary.get('run_b', '')))}</title>",
           f"<style>{_REPORT_STYLE} figure.pair {{ width: 260px; }}</style></head><body>",
           "<h1>IBA Explorer · two runs compared image by image</h1>",
           _table(["", "value"], _summary_rows(summary))]
    out += [f'<p class="warning">{e(note)}</p>' for note in summary.get("notes", [])]
    out.append(f'<p class="note">Difference maps show B − A: red where B puts more, blue where it puts less, white '
               f"where nothing changed; every image on one scale, ±{_number(summary.get('scale'))} (the largest "
               f"change of any pixel). Order: {e(str(summary.get('order', '')))}.</p>")
    out += ["<h2>The images that changed most</h2>", _cells(top, css="pair")]
    out += [f"<h2>The table ({count_of(len(rows), 'row')} shown of {summary.get('matched', len(rows))})</h2>",
            _table(columns, rows)]
    out += _classes_section(classes, float(summary.get("class_scale") or 0.0))
    out.append("</body></html>")
    return "\n".join(out)
