"""Drawing results, with no Streamlit: Plotly figures, PNG images and downloadable files.

- `figures`: interactive Plotly figures (bits heatmaps, the β × layer grid, degradation curves, the sanity
  check's SSIM);
- `colours`: colour maps, the scales of a run's maps (`run_scale`, `step_scale`, `live_scale`), colour bars and legends;
- `animation`: a Per-Sample run step by step (live view, replay, GIF, loss curves);
- `overlays`: PIL images (heatmap over the photo, the "not needed" view, boxes) and PNG bytes;
- `comparison`: the comparison grid as one PNG (`grid_png`, `cell_png`) and the colour range of a map (`limits_text`);
- `sanity`: the sanity check's strip of heatmaps as a PNG;
- `report`: the Per-Sample run's JSON report and the heatmap as .npy bytes; a folder run's HTML report;
- `text`: numbers as short texts (probabilities, times, β);
- `arrays`: maps made drawable (finite float32, pooled).

Names are imported on first use, so `from iba_core.render import grid_png` does not load Plotly.
"""
from __future__ import annotations

from ..lazy import lazy_exports

#: public name → module (in this package) that defines it
_PUBLIC = {
    "heatmap_figure": "figures", "grid_figure": "figures", "degradation_figure": "figures", "ssim_figure": "figures",
    "BITS_COLORSCALE": "figures", "BITS_UNIT": "figures",
    "ColourScale": "colours", "run_scale": "colours", "step_scale": "colours", "live_scale": "colours", "colour_legend": "colours",
    "colour_bar": "colours", "BITS_LABEL": "colours", "BITS_CMAP": "colours",
    "colorize": "overlays", "overlay_image": "overlays", "not_needed_mask": "overlays",
    "not_needed_fraction": "overlays", "not_needed_outline": "overlays", "png_bytes": "overlays",
    "draw_boxes": "overlays", "OUTLINE_RGB": "overlays",
    "grid_png": "comparison", "cell_png": "comparison", "colour_limits": "comparison", "limits_text": "comparison",
    "sanity_strip_png": "sanity",
    "run_report": "report", "heatmap_npy_bytes": "report", "dataset_report_html": "report",
    "format_seconds": "text", "format_probability": "text", "format_beta": "text",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
