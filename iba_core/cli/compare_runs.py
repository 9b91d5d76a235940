"""`python -m iba_core compare-runs RUN_A RUN_B --out DIR`: two folder runs compared image by image
(`runs.paired`): two models, methods or settings over the same images, or two folders whose files match by relative
path. Writes the table (Parquet), the per-class summary, the difference maps, a JSON summary and the HTML report."""
from __future__ import annotations

import argparse

from . import files
from .common import print_json


def add_parser(sub) -> None:
    p = sub.add_parser("compare-runs", help="two folder runs compared image by image (Δbits, Δp, changed "
                       "predictions, difference maps)")
    p.add_argument("run_a", metavar="RUN_A", help="the first run folder (`attribute FOLDER --out RUN_DIR`)")
    p.add_argument("run_b", metavar="RUN_B", help="the second run folder; differences are B − A")
    p.add_argument("--out", required=True, help="the folder to write the comparison into (created if missing)")
    p.add_argument("--method-a", default=None, help="RUN_A's method key (default: its first bottleneck method, "
                   "else its first method)")
    p.add_argument("--method-b", default=None, help="RUN_B's method key (default as for --method-a)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the folders (the output first, before any map is read), pair the runs, write the files, print one
    JSON line: the counts, the mean changes, the most changed images and the files written."""
    from ..runs.paired import check_paired_out, pair_runs, write_paired
    from ..runs.tables import open_run

    check_paired_out(args.out)  # never into a run folder (RUN_A's own, say)
    out = files.output_folder(args.out, "--out")  # checked before the slow work
    run_a = open_run(files.readable_folder(args.run_a, "RUN_A", "Run folder"))
    run_b = open_run(files.readable_folder(args.run_b, "RUN_B", "Run folder"))
    paired = pair_runs(run_a, run_b, args.method_a, args.method_b)
    written = write_paired(paired, out)
    summary = paired.summary()
    keys = ("matched", "only_a", "only_b", "failed", "changed", "targets_differ", "mean_delta_p", "mean_delta_score",
            "method_a", "method_b", "score", "basis", "scale")
    print_json({**{k: summary[k] for k in keys}, "top": summary["top"], "notes": summary["notes"],
                "files": {k: str(v) for k, v in written.items()}})
    return 0
