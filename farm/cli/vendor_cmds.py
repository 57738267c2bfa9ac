"""farm vendor add|diff|note: routed to the vendoring tool, which parses its own plain key=value words."""

from __future__ import annotations

from farm.cli.parser import Invocation
from farm.vendoring.cli import main as vendor_main


def cmd_vendor(inv: Invocation) -> int:
    return vendor_main(set(inv.flags), inv.words)
