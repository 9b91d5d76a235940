"""`PerMapMetric`: the base of a metric that gives columns per map (metrics/aopc.py is one), with the evaluate CLI's
generic loop (one record per image and method, keyed by the metric's identity) and table (the mean of each column
per method, each header with its direction). Kept apart from registry.py, which the loop and the tables import."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .registry import Metric


class PerMapMetric(Metric):
    """A `registry.Metric` whose `measure` gives its columns per map; `run` and `format_table` need nothing more."""

    def run(self, ctx, item, methods: dict) -> None:
        from .runner import run_per_map

        run_per_map(self, ctx, item, methods)

    def format_table(self, records: Sequence[dict]) -> str:
        from .common import group_records, method_label
        from .results import markdown_table

        mine = [r for r in records if r.get("metric") == self.name and r.get("method") != "*"]
        rows = []
        for (method,), rs in group_records(mine, "method").items():
            means = []
            for c in self.columns:
                vals = [float(r[c.name]) for r in rs if r.get(c.name) is not None and math.isfinite(float(r[c.name]))]
                means.append(float(np.mean(vals)) if vals else None)
            rows.append([method_label(mine, method), *means, len(rs)])
        header = ["Method", *(c.titled for c in self.columns), "images"]
        sentences = dict.fromkeys(s for r in mine if (s := self.protocol_sentence(r.get("identity") or {})))
        return (f"### {self.title}: {self.measures}\n\n" + markdown_table(header, rows) + "\n\n"
                + "".join(f"{s}\n" for s in sentences))


__all__ = ["PerMapMetric"]
