"""farm golden, push, pull and status: the published tree and its recorded digests."""

from __future__ import annotations

import sys

from farm.cli.parser import Invocation
from farm.cli.selection import load, selected_rows
from farm.publish import pull, push, seal_golden, status
from farm.store.preflight import require_writable


def cmd_golden(inv: Invocation) -> int:
    """farm golden: record outputs.sha256 (and outputs.dvc) from a complete, clean tree."""
    cfg = load(inv.words)
    rows, every = selected_rows(cfg)
    return seal_golden(cfg, rows, every, sys.stdout, everything=bool(inv.verbose))


def _flags(inv: Invocation) -> set[str]:
    """The verb's flags; the publish code reads its own spelling of "say more" (-v lists every name)."""
    return set(inv.flags) | ({"--verbose"} if inv.verbose else set())


def cmd_push(inv: Invocation) -> int:
    return push(load(inv.words), _flags(inv))


def cmd_pull(inv: Invocation) -> int:
    cfg = load(inv.words)
    require_writable(cfg, reports=False)  # the pull checks out into outputs_dir
    return pull(cfg, _flags(inv))


def cmd_status(inv: Invocation) -> int:
    return status(load(inv.words), _flags(inv))
