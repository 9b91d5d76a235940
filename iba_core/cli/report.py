"""`python -m iba_core report RUN_DIR --out report.html`: a folder run's HTML report, the one the Dataset page
offers (`app.dataset_report.report_html`): what stands out across the run first, then per class the mean map and the
clusters of similar maps, then the images flagged by their border share; every picture embedded. A run that
measured the field's metrics (`attribute FOLDER --metrics …`) gets their means per method and per class too."""
from __future__ import annotations

import argparse

from . import files
from .common import print_json, trust_from_args


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="a folder run's self-contained HTML report (what stands out, classes, clusters)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the --out folder of `attribute FOLDER --out RUN_DIR`")
    p.add_argument("--out", required=True, help="the HTML file to write (e.g. report.html)")
    p.add_argument("--method", default=None,
                   help="the method whose maps the report shows (a key of the run; default: the first bottleneck "
                   "method, else the first method)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Open the run (a one-sentence error for a missing or damaged folder), draw the report, write it atomically,
    print one JSON line (the file, the method, the highlights' titles)."""
    from ..app.dataset import highlights, method_names, methods_bits_first, metric_columns
    from ..app.dataset_report import report_html
    from ..errors import UserError
    from ..runs.tables import open_run

    out = files.output_file(args.out, "--out")  # checked before the slow work
    run_ = open_run(files.readable_folder(args.run_dir, "RUN_DIR", "Run folder"))
    methods = methods_bits_first(run_)
    if not methods:
        raise UserError(f"The run {run_.path} names no method, so there is nothing to report.")
    method = args.method or methods[0]
    if method not in methods:
        raise UserError(f"The run has no method {method!r}; it has {', '.join(methods)}.")
    found = highlights(run_, method)
    # the command line reads the local user's files: every image of the run may be drawn
    files.write_bytes(out, report_html(run_, method, trust_from_args(args), found))
    print_json({"report": str(out), "run": str(run_.path), "method": method,
                "method_name": method_names(run_).get(method, method),
                "stands_out": [h.title for h in found.items] if found else [],
                "metrics": metric_columns(run_.table),
                # rows a damaged part left out (the report says so at its top too); None when every part is whole
                "missing": run_.missing})
    return 0
