"""Downloadable records of a Per-Sample run: a JSON report (settings and numbers) and the heatmap as .npy."""
from __future__ import annotations

import io
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from ..jsonable import jsonable

if TYPE_CHECKING:
    from ..per_sample import AttributionResult, BottleneckSettings

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
            "settings": asdict(settings),
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
