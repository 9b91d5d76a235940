"""How long the app takes to start: a fresh Python process runs app.py (Home) and then the Per-Sample page with
Streamlit's AppTest until the page shows the default network's top prediction (the offline network loaded,
the sample photo classified). Prints the seconds of each, per fresh process, with medians, and whether timm or
transformers were imported on the way (they must not be: they load only when such a model is chosen).

Run it in a checkout to compare two versions of the app (e.g. before and after a change), alone on the machine:

    python benchmarks/bench_app_start.py [--runs 5] [--root PATH_TO_ANOTHER_CHECKOUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs in the fresh process, in the checkout's folder (its iba_core and pages are the ones imported).
PROBE = r"""
import json, sys, time
start = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=600)
at.run()
home = time.perf_counter() - start
at.switch_page("pages/per_sample.py")
at.run()
page = time.perf_counter() - start
shown = " ".join(c for im in at.image for c in im.captions)
print(json.dumps({"home": home, "per_sample": page, "errors": [str(e.value)[:200] for e in at.exception],
                  "top_prediction": "Top prediction" in shown,
                  "timm": "timm" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app is timed (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    from iba_core.precision import machine_id

    print(f"machine: {machine_id('cpu')}; load average "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}; app: {root}")
    rows = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:  # a fresh cache: the shipped statistics only
            env = {**os.environ, "IBA_CACHE_DIR": cache, "PYTHONPATH": str(root)}
            out = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=env, capture_output=True, text=True,
                                 timeout=900)
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
        if out.returncode != 0 or not line.startswith("{"):
            raise SystemExit(f"run {i + 1} failed:\n{out.stderr[-2000:]}")
        row = json.loads(line)
        rows.append(row)
        print(f"  run {i + 1}: Home {row['home']:.2f} s, Per-Sample page ready {row['per_sample']:.2f} s "
              f"(top prediction shown: {row['top_prediction']}; errors: {len(row['errors'])}; "
              f"timm imported: {row['timm']}, transformers imported: {row['transformers']})")
    print(f"medians over {len(rows)} fresh processes: Home {statistics.median(r['home'] for r in rows):.2f} s, "
          f"Per-Sample page ready {statistics.median(r['per_sample'] for r in rows):.2f} s; "
          f"load average now {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
