"""Command line: `python -m iba_core {models,stats,attribute,compare,evaluate,train-readout,report,concepts,
compare-runs,selftest} …`.

One module per command (`add_parser(subparsers)` + `run(args)`); `common` holds what they share, `files` what
every command does first (check its input files and output paths, before the network loads) and last (write
results atomically).
Imports flow one way: this package → command modules → common → the library. Every command prints
plain text or JSON lines, so results can be scripted; user errors are one line on stderr (exit status 1), a bug
is its traceback and one "internal error" line (exit status 70).
"""
from __future__ import annotations

import argparse
from typing import Sequence

from . import attribute, compare, compare_runs, concepts, evaluate, models, readout, report, selftest, stats
from .common import Parser, run_command

#: The command modules, in the order `--help` lists them.
COMMANDS = (models, stats, attribute, compare, evaluate, readout, report, concepts, compare_runs, selftest)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m iba_core",
        description="Information Bottleneck Attribution (Schulz et al., ICLR 2020) from the command line.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; a user's mistake prints one line to stderr (exit 1, no traceback), a bug its traceback and one
    "internal error" line (exit 70)."""
    return run_command(build_parser().parse_args(argv))


__all__ = ["build_parser", "main", "run_command"]
