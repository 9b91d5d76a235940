"""Command line: `python -m iba_core {models,stats,attribute,compare,evaluate,train-readout} …`.

One module per command (`add_parser(subparsers)` + `run(args)`); `common` holds what they share, `files` what
every command does first (check its input files and output paths, before the network loads) and last (write
results atomically).
Imports flow one way: this package → command modules → common → the library. Every command prints
plain text or JSON lines, so results can be scripted; user errors are one line on stderr.
"""
from __future__ import annotations

import argparse
from typing import Sequence

from . import attribute, compare, evaluate, models, readout, stats
from .common import run_command

#: The command modules, in the order `--help` lists them.
COMMANDS = (models, stats, attribute, compare, evaluate, readout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m iba_core",
        description="Information Bottleneck Attribution (Schulz et al., ICLR 2020) from the command line.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors print one line to stderr and exit non-zero, no traceback."""
    return run_command(build_parser().parse_args(argv))


__all__ = ["build_parser", "main", "run_command"]
