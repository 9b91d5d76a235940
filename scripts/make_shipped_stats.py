"""Estimate the offline network's feature statistics for EVERY layer and write them to assets/stats/.

    python scripts/make_shipped_stats.py            # 1000 augmented crops of the 13 offline photos

One pass over the crops estimates all layers (iba_core.feature_stats.compute_all_stats); each layer is stored
compact (float16 μ and σ, with the cache's checksum and identity) under the name the statistics cache uses,
so `get_stats` finds it on a fresh install and the first step of any layer needs no estimation. Prints the
files and their total size.
"""
from __future__ import annotations

import argparse
import time

from iba_core.networks import DEFAULT_NETWORK, load_network
from iba_core.settings import RECOMMENDED_SAMPLES
from iba_core import cache
from iba_core.feature_stats import SHIPPED_STATS_DIR, compute_all_stats, stats_cache_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=RECOMMENDED_SAMPLES)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    network = load_network(DEFAULT_NETWORK)
    start = time.perf_counter()
    stats = compute_all_stats(network, n=args.n, seed=args.seed,
                              progress=lambda d, t, _l: print(f"\r{d}/{t} crops", end="", flush=True))
    print(f"\nestimated {len(stats)} layers in {time.perf_counter() - start:.1f} s")
    for old in SHIPPED_STATS_DIR.glob(f"{cache.safe_name(network.key).rsplit('__', 1)[0]}__*.npz"):
        old.unlink()
    total = 0
    for layer, s in stats.items():
        name = stats_cache_path(network.key, network.weights_id, layer, s.source_key).name
        path = s.save(SHIPPED_STATS_DIR / name, compact=True)
        total += path.stat().st_size
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")
    print(f"total {total / 2**20:.2f} MiB in {SHIPPED_STATS_DIR}")


if __name__ == "__main__":
    main()
