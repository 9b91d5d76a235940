"""Convert the shipped statistics in assets/stats/ from the old .npz layout to the cache's (once).

    python scripts/convert_shipped_stats.py

The old files (mean, std, active as float16; n, skipped, meta = [model, weights, layer, source], photos)
carried neither a checksum nor the identity of what made them. Each is rewritten through
`FeatureStats.save(compact=True)` — the same float16 values, now with a checksum and its identity — under
the name the statistics cache uses, and the old file is removed. Files already in the new layout are left
alone. Prints the files and their total size.
"""
from __future__ import annotations

import numpy as np
import torch

from iba_core.feature_stats import SHIPPED_STATS_DIR, FeatureStats, stats_cache_path, stats_source_key


def convert(path) -> FeatureStats | None:
    """The statistics of an old-layout file, or None when `path` is not one."""
    with np.load(path, allow_pickle=False) as data:
        if "__meta__" in data.files:
            return None
        model, weights, layer, source = (str(s) for s in data["meta"])
        n = int(data["n"])
        active = torch.from_numpy(data["active"].astype(np.float32)) if "active" in data.files else None
        return FeatureStats(torch.from_numpy(data["mean"].astype(np.float32)),
                            torch.from_numpy(data["std"].astype(np.float32)), n, model, weights, layer, source,
                            int(data["skipped"]), active, tuple(str(p) for p in data["photos"]),
                            stats_source_key(None, n))


def main() -> None:
    total = 0
    for old in sorted(SHIPPED_STATS_DIR.glob("*.npz")):
        stats = convert(old)
        if stats is None:
            continue
        new = SHIPPED_STATS_DIR / stats_cache_path(stats.model, stats.weights, stats.layer, stats.source_key).name
        stats.save(new, compact=True)
        back = FeatureStats.load(new)  # same float16 values, now checked
        assert torch.equal(back.mean, stats.mean) and torch.equal(back.std, stats.std), old.name
        if new != old:
            old.unlink()
        print(f"{old.name} → {new.name}: {new.stat().st_size / 1024:.0f} KiB")
    for path in SHIPPED_STATS_DIR.glob("*.npz"):
        total += path.stat().st_size
    print(f"total {total / 2**20:.2f} MiB in {SHIPPED_STATS_DIR}")


if __name__ == "__main__":
    main()
