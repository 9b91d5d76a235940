"""Folder runs: attribution over a whole image folder, a results table any tool reads, per-map measures.

- `folder`: the loop (images × methods, batched, resumable, sharded across torchrun ranks): `run_folder`,
  `finish_run`;
- `run_settings`: a run's settings (`FolderSettings`), what a call did (`RunSummary`), its identity in run.json;
- `image_list`: the images of a folder or of a `.txt` list (`list_images`, `read_image_list`);
- `rows`: how a chunk of images becomes rows, every method through its one interface (class or prompt targets);
- `metric_columns`: the field's metrics per map, as a row's columns;
- `store`: the run folder on disk (run.json, checksummed parts, maps);
- `checks`: each part checked against its checksum; `heal` moves damaged parts aside before a resume;
- `tables`: results.parquet (`write_table`) and `open_run` → `Run` (`.table`, `.heatmap(row)`, `.thumbnails(rows)`,
  `.missing`: damaged parts left out);
- `claims`: one writer per image of a run folder, so two runs into one folder share the work;
- `measures`: per-map measures that point at shortcuts (border_share, box_share, concentration, thumbnails,
  distance to the class mean), a formula each;
- `spectral`: spectral clustering of thumbnails (SpRAy) with numpy and scipy;
- `per_class`: a class's rows, mean map and clusters of similar maps;
- `highlights`: what stands out across a whole run (images that need very few bits, flagged clusters of every
  class, class means that concentrate, outliers), as plain data for the Dataset page and the report;
- `paired`: two runs compared image by image (`pair_runs` → `Paired`, `write_paired`): Δbits, Δp, changed
  predictions, signed difference maps on one scale, per-class means.

Names are imported on first use, so `from iba_core.runs import open_run` does not load the methods.
"""
from __future__ import annotations

from ..lazy import lazy_exports

#: public name → module (in this package) that defines it
_PUBLIC = {
    "FolderSettings": "run_settings", "RunSummary": "run_settings", "list_images": "image_list",
    "read_image_list": "image_list", "run_folder": "folder", "finish_run": "folder",
    "Run": "tables", "RunFolderError": "store", "open_run": "tables", "build_table": "tables",
    "write_table": "tables",
    "border_share": "measures", "box_share": "measures", "concentration": "measures", "thumbnail": "measures",
    "map_measures": "measures", "cosine_distance": "measures",
    "distance_to_class_mean": "measures",
    "Clusters": "spectral", "spectral_clusters": "spectral",
    "MapClusters": "per_class", "class_rows": "per_class", "class_mean_map": "per_class",
    "map_clusters": "per_class",
    "Highlight": "highlights", "RunHighlights": "highlights", "run_highlights": "highlights",
    "few_bits_mask": "highlights", "concentration_region": "highlights",
    "Paired": "paired", "pair_runs": "paired", "write_paired": "paired",
}

__all__ = sorted(_PUBLIC)


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
