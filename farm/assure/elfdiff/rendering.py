"""Output: one summary line (for an audit), the full listing (for `farm diff`), and JSON records."""

from __future__ import annotations

from typing import Any, TypedDict

from farm.assure.elfdiff.difference import ABSENT, Difference


class DifferenceRecord(TypedDict):
    """One Difference as JSON (`farm diff --json`, the audit report): values made JSON-safe."""

    level: str
    field: str
    a: Any  # None for a side that does not have the field; bytes as hex
    b: Any
    message: str
    detail: str
    offset: int | None
    where: str | None


def summary(diffs: list[Difference]) -> str:
    """One line for an audit summary: the most explanatory difference (plus the code change it caused)."""
    if not diffs:
        return "identical"
    parts = [diffs[0]]
    if diffs[0].level in ("kernel", "metadata", "descriptor"):  # name the code change it goes with
        parts += [d for d in diffs if d.level == "text" and d.offset is not None][:1]
    text = "; ".join(d.message for d in parts)
    more = len(diffs) - len(parts)
    return text + (f" (+{more} more)" if more else "")


def render(diffs: list[Difference]) -> str:
    """The full listing: a summary line, then every difference with its level."""
    if not diffs:
        return "identical"
    lines = [f"differ: {summary(diffs)}", f"{len(diffs)} difference(s), most explanatory first:"]
    for d in diffs:
        lines.append(f"  {d.level:<10} {d.message}" + (f"  [{d.detail}]" if d.detail else ""))
    return "\n".join(lines)


def _jsonable(value: Any) -> Any:
    if value is ABSENT:
        return None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def to_json(diffs: list[Difference]) -> list[DifferenceRecord]:
    # Field by field, not dataclasses.asdict: asdict deep-copies the values, and a copied ABSENT is no
    # longer ABSENT (it reached json.dumps as an object it cannot encode).
    return [DifferenceRecord(level=d.level, field=d.field, a=_jsonable(d.a), b=_jsonable(d.b), message=d.message,
                             detail=d.detail, offset=d.offset, where=d.where) for d in diffs]
