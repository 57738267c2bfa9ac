"""Canonical JSON and hashing: the same data always gives the same bytes."""

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(data: Any) -> str:
    """Sorted keys, fixed indentation, trailing newline: stable across runs and machines.
    Exactly `json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"`. json's indented
    encoder is pure Python (only its compact one is C); a manifest entry's ~11 kB cost the driver ~0.25 ms
    that way, and about half as much here, where strings and numbers go through json's own C escaping and
    float repr. Anything else (a non-str key, a subclass, a custom type) takes json's own path."""
    try:
        return _indented(data, "") + "\n"
    except (_Unusual, RecursionError):
        return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


class _Unusual(Exception):
    """Data the fast path does not format exactly as json does: json formats it instead."""


_escape = json.encoder.encode_basestring_ascii  # json's own C escaping of a string (ensure_ascii=True)
_INFINITY = float("inf")


def _indented(x: Any, pad: str) -> str:
    kind = type(x)
    if kind is str:
        return _escape(x)
    if kind is dict:
        if not x:
            return "{}"
        inner = pad + "  "
        items = []
        for key, value in sorted(x.items()):
            if type(key) is not str:
                raise _Unusual
            items.append(_escape(key) + ": " + (_escape(value) if type(value) is str else _indented(value, inner)))
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "}"
    if kind is list or kind is tuple:
        if not x:
            return "[]"
        inner = pad + "  "
        values = [_escape(v) if type(v) is str else _indented(v, inner) for v in x]
        return "[\n" + inner + (",\n" + inner).join(values) + "\n" + pad + "]"
    if kind is int:
        return int.__repr__(x)
    if kind is bool:
        return "true" if x else "false"
    if x is None:
        return "null"
    if kind is float:  # as json with allow_nan (its default)
        if x != x:
            return "NaN"
        if x == _INFINITY:
            return "Infinity"
        return "-Infinity" if x == -_INFINITY else float.__repr__(x)
    raise _Unusual


def digest_of(data: Any) -> str:
    """SHA256 of the compact canonical form of `data`."""
    compact = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(compact.encode("utf-8")).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
