"""Short reports: a count and the first few names, every name only when asked for (-v)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

FEW = 5  # names shown before "and N more"


def wants_all(flags: Collection[str]) -> bool:
    """-v / --verbose: list every name instead of the first few."""
    return "--verbose" in flags or "-v" in flags


def first_few(names: Sequence[str], everything: bool = False) -> str:
    """`a, b, c`, or `a, b, c, d, e and 37 more (-v lists all)`."""
    shown = list(names) if everything else list(names[:FEW])
    rest = len(names) - len(shown)
    return ", ".join(shown) + (f" and {rest} more (-v lists all)" if rest else "")


def lines_shown(lines: Sequence[str], everything: bool = False) -> list[str]:
    """The first few report lines, or all of them; a last line says how many were left out."""
    if everything or len(lines) <= FEW:
        return list(lines)
    return [*lines[:FEW], f"  ... and {len(lines) - FEW} more (-v lists all)"]
