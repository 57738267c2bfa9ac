"""Diagnostics: every farm module logs through `logging.getLogger(__name__)`; the CLI sets the level.

What a command is asked to print (a plan table, a check summary, a report path) goes to stdout;
everything else (progress, notes, warnings, why something happens) is a log record on stderr.
`-q` shows warnings and errors only, the default adds information, `-v` adds debug records.
"""

from __future__ import annotations

import logging
import sys

ROOT = "farm"


def configure(verbosity: int = 0) -> None:
    """Send the farm's records to stderr as plain lines: -1 quiet, 0 normal, 1 or more verbose."""
    level = logging.WARNING if verbosity < 0 else logging.INFO if verbosity == 0 else logging.DEBUG
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    # Plain lines at the default level, as the farm always printed them; -v adds where each came from.
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s" if verbosity > 0 else "%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
