"""Evaluation metrics of the IBA paper (Schulz et al., ICLR 2020, §4 and appendix).

Each metric is a plain function of a model (anything mapping (B, 3, H, W) to logits), a preprocessed
image and an attribution — an (H, W) array or a function (x, target) → array — so it runs on tiny
hand-built networks as well as on the registered ones:

- `degradation_curves` / `degradation_score` (degradation.py): MoRF/LeRF tile removal, area between;
- `bbox_ratio`, `parse_voc`, `box_mask` (bbox.py): share of the top-n pixels inside the box;
- `logit_drops` / `correlations` (sensitivity_n.py): Sensitivity-n (logit drops of random tile sets, then
  their correlation with the map's sums over the same sets);
- `sanity_check`, `cascading_randomisation`, `heatmap_ssim` (sanity.py): weight randomisation;
- `per_sample_row` (beta_table.py): Table 3, L_I/k and accuracy for a β;
- `insertion_deletion`, `PixelProtocol`, `PROTOCOLS`, `auc` (insertion_deletion.py): RISE's insertion and
  deletion curves and their areas; `pointing_scores` (pointing.py): the pointing game, energy-based pointing
  and InputIBA's effective heat ratio.
- `road_curves` / `noisy_linear_impute` (road.py): ROAD (Rong et al. 2022), MoRF/LeRF with noisy linear
  imputation and the combined score.

- `aopc_curve` (aopc.py): MoRF AOPC (Samek et al. 2017), the example of adding a metric.

registry.py holds one object per metric (name, what it measures, direction, units, columns, identity, cost,
`measure`), the one list every driver loops over (`registry.metrics()`); catalogue.py the objects of the metrics
above. results.py keeps results resumable (JSON lines keyed by image, method and setting) and renders
paper-style tables; `python -m iba_core evaluate …` (iba_core/cli/evaluate.py) drives it all.
"""
from __future__ import annotations

from ..lazy import lazy_exports

#: public name → the module of this package that defines it (imported on first use: the registry loads no torch)
_PUBLIC = {
    "AttributionFn": "common",
    **dict.fromkeys(("DegradationCurves", "DegradationSummary", "degradation_curves", "degradation_score"),
                    "degradation"),
    **dict.fromkeys(("Annotation", "Box", "bbox_ratio", "box_mask", "parse_voc"), "bbox"),
    **dict.fromkeys(("LogitDrops", "correlations", "logit_drops"), "sensitivity_n"),
    **dict.fromkeys(("cascading_randomisation", "heatmap_ssim", "normalise_heatmap", "sanity_check"), "sanity"),
    **dict.fromkeys(("PAPER_BETA_K", "per_sample_row"), "beta_table"),
    **dict.fromkeys(("ResultsWriter", "done_keys", "format_tables", "read_records", "write_table"), "results"),
    # the field's yardsticks (issue #29)
    **dict.fromkeys(("PROTOCOLS", "InsertionDeletionCurves", "PixelProtocol", "auc"), "insertion_deletion"),
    **dict.fromkeys(("effective_heat_ratio", "energy_pointing", "pointing_hit", "pointing_scores"), "pointing"),
    **dict.fromkeys(("ROAD", "ROAD_NOISE", "ROAD_REMOVED", "RoadCurves", "noisy_linear_impute", "road_curves"),
                    "road"),
    **dict.fromkeys(("AopcCurve", "aopc_curve"), "aopc"),
    # the registry of metric objects (issue #38)
    **dict.fromkeys(("Column", "MapBatch", "Measurement", "Metric"), "registry"),
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
