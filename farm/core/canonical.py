"""Canonical JSON and hashing: the same data always gives the same bytes."""

import hashlib
import json
from pathlib import Path
from typing import Any


def canonical_json(data: Any) -> str:
    """Sorted keys, fixed indentation, trailing newline: stable across runs and machines."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


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
