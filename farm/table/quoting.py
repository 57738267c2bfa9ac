"""Values as error messages quote them: a long one shortened, so a 100 KB override is not echoed back whole.

An error quotes what the user gave once, and at most its first SHOWN characters with its length after: the
user recognises the value, and the message stays one screen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

SHOWN = 60  # characters of a long value an error quotes
LISTED = 5  # values of a long list an error names


def shortened(text: str, limit: int = SHOWN) -> str:
    """`text`, or its first `limit` characters and how long it is."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def shown(value: Any) -> str:
    """`value` as Python writes it (quotes for a string), shortened: 'xxxx...' (100000 chars)."""
    text = repr(value)
    if len(text) <= SHOWN:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:SHOWN]}... ({size} chars)"


def listed(values: Iterable[Any], limit: int = LISTED) -> str:
    """Each value shown, comma-separated; past `limit` of them, how many more."""
    items = list(values)
    text = ", ".join(shown(v) for v in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")
