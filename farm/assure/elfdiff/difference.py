"""What a comparison finds: one `Difference` per field that differs, ranked by how much it explains.

Also the small value helpers every view shares: how a value is shown in a message, how two values are
judged equal, where two byte strings first differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# Most explanatory first: a different linker or target explains everything below it; a metadata
# change explains the code change; which sections' bytes differ ("data") is the inventory behind the
# finer levels; layout and raw offsets are mostly consequences.
LEVELS = ("file", "linker", "target", "kernel", "metadata", "descriptor", "text", "section", "symbol",
          "data", "header", "layout", "raw")


class _Absent:
    """A field or entry that one side does not have (distinct from a msgpack nil)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Difference:
    """One difference: `level` (see LEVELS), `field`, the value on each side, and a one-line message."""

    level: str
    field: str
    a: Any  # a field's value: a number, a string, a metadata value, or ABSENT
    b: Any
    message: str
    detail: str = ""  # extra context for the full listing only (e.g. the differing instruction words)
    offset: int | None = None  # first differing byte, relative to the section (or the file, level raw)
    where: str | None = None  # the symbol containing `offset`, as "name+0xoff"

    @property
    def rank(self) -> int:
        return LEVELS.index(self.level)


def show(value: Any) -> str:
    """A value as a message shows it: strings quoted, containers as compact JSON."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=repr)
    return str(value)


def show_hex(value: Any, width: int = 0) -> str:
    return f"0x{value:0{width}x}" if isinstance(value, int) else show(value)


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type: a msgpack `true` and `1` are different bytes."""
    return type(a) is type(b) and a == b


def only(mine: dict[Any, Any], other: dict[Any, Any]) -> list[Any]:
    """Keys of `mine` missing from `other`, in `mine`'s order (sets would make the listing unstable)."""
    return [k for k in mine if k not in other]


def first_difference(a: bytes, b: bytes) -> int | None:
    """The first offset where `a` and `b` differ; the shorter length when one is a prefix of the other."""
    if a == b:
        return None
    n = min(len(a), len(b))
    # Compare in blocks, then bytewise in the first differing block.
    step = 256
    for start in range(0, n, step):
        end = min(start + step, n)
        if a[start:end] != b[start:end]:
            return next(i for i in range(start, end) if a[i] != b[i])
    return n
