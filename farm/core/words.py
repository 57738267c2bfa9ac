"""Counts in the farm's messages: "1 directory", "2 directories"."""

from __future__ import annotations

_IRREGULAR = {"directory": "directories", "copy": "copies", "entry": "entries"}


def count(n: int, noun: str) -> str:
    """`n` and `noun`, the noun plural unless n is 1."""
    return f"{n} {noun if n == 1 else _IRREGULAR.get(noun, noun + 's')}"
