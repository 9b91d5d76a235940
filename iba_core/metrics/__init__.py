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

results.py keeps results resumable (JSON lines keyed by image, method and setting) and renders
paper-style tables; `python -m iba_core evaluate …` (iba_core/cli/evaluate.py) drives it all.
"""
from __future__ import annotations

from . import bbox, beta_table, degradation, insertion_deletion, pointing, road, sanity, sensitivity_n
from .bbox import Annotation, Box, bbox_ratio, box_mask, parse_voc
from .beta_table import PAPER_BETA_K, per_sample_row
from .common import AttributionFn
from .degradation import DegradationCurves, DegradationSummary, degradation_curves, degradation_score
from .results import ResultsWriter, done_keys, format_tables, read_records, write_table
from .sanity import cascading_randomisation, heatmap_ssim, normalise_heatmap, sanity_check
from .sensitivity_n import LogitDrops, correlations, logit_drops
# the field's yardsticks (issue #29)
from .insertion_deletion import PROTOCOLS, InsertionDeletionCurves, PixelProtocol, auc
from .pointing import effective_heat_ratio, energy_pointing, pointing_hit, pointing_scores
from .road import ROAD, ROAD_NOISE, ROAD_REMOVED, RoadCurves, noisy_linear_impute, road_curves

#: metric name (as in the CLI and in the records) → table builder (records → markdown)
TABLES = {
    degradation.METRIC: degradation.format_table,
    bbox.METRIC: bbox.format_table,
    sensitivity_n.METRIC: sensitivity_n.format_table,
    sanity.METRIC: sanity.format_table,
    beta_table.METRIC: beta_table.format_table,
    # insertion / deletion and pointing (issue #29)
    insertion_deletion.INSERTION: insertion_deletion.format_table,
    insertion_deletion.DELETION: insertion_deletion.format_table,
    pointing.POINTING: pointing.format_table,
    road.ROAD: road.format_table,
}
METRICS = tuple(TABLES)

__all__ = [
    "METRICS", "TABLES", "AttributionFn",
    "DegradationCurves", "DegradationSummary", "degradation_curves", "degradation_score",
    "Annotation", "Box", "bbox_ratio", "box_mask", "parse_voc",
    "LogitDrops", "correlations", "logit_drops",
    "cascading_randomisation", "heatmap_ssim", "normalise_heatmap", "sanity_check",
    "PAPER_BETA_K", "per_sample_row",
    "ResultsWriter", "done_keys", "format_tables", "read_records", "write_table",
    # insertion / deletion and pointing (issue #29)
    "PROTOCOLS", "InsertionDeletionCurves", "PixelProtocol", "auc",
    "effective_heat_ratio", "energy_pointing", "pointing_hit", "pointing_scores",
    "ROAD", "ROAD_NOISE", "ROAD_REMOVED", "RoadCurves", "noisy_linear_impute", "road_curves",
]
