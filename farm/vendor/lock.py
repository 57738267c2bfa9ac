"""kernels_src/VENDOR.lock.json: the record of every vendored file, read and written canonically.

Layout (paths of vendored files are relative to kernels_src/, like the manifests' `inputs.sources`):

    {"schema": 1,
     "upstreams": {NAME: {"url", "license", "license_file", "license_source"}},
     "files": {REL: {"upstream", "commit", "path", "sha256",
                     "modifications": [{"why", "changes": [{"removed": [...], "added": [...]}]}]}}}

`sha256` is of the upstream blob at `commit`, `path`; `license_file` (relative to kernels_src/, or
null) is the upstream license text copied at add time, so THIRD_PARTY_LICENSES.md can be generated
from the lock alone. This module imports nothing heavy: manifest.py reads it on every build.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..atomic import write_text_atomic
from ..canonical import canonical_json
from ..errors import FarmError

LOCK_NAME = "VENDOR.lock.json"
SCHEMA = 1


def lock_path(kernels_dir: Path) -> Path:
    return kernels_dir / LOCK_NAME


def empty() -> dict[str, Any]:
    return {"schema": SCHEMA, "upstreams": {}, "files": {}}


def load(kernels_dir: Path) -> dict[str, Any]:
    """The lock, or an empty one when there is none; a FarmError naming the file when it is unreadable."""
    path = lock_path(kernels_dir)
    if not path.is_file():
        return empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema is not {SCHEMA}")
        if not isinstance(data.get("upstreams"), dict) or not isinstance(data.get("files"), dict):
            raise ValueError("no upstreams/files tables")
        for rel, rec in data["files"].items():
            if not isinstance(rec, dict) or rec.get("upstream") not in data["upstreams"]:
                raise ValueError(f"file {rel} names no known upstream")
    except (ValueError, UnicodeDecodeError) as exc:
        raise FarmError(f"{path}: not a readable vendor lock ({exc})",
                        "restore it from git (git checkout -- kernels_src/VENDOR.lock.json)") from None
    return data


def save(kernels_dir: Path, data: dict[str, Any]) -> None:
    """Sorted keys, fixed indentation, atomic: the same record always gives the same bytes."""
    write_text_atomic(lock_path(kernels_dir), canonical_json(data))


def vendored_sources(kernels_dir: Path, rels: list[str] | dict[str, Any]) -> list[dict[str, Any]]:
    """Lock records (with their `file` and upstream `url`/`license`) of those of `rels` that are vendored."""
    path = lock_path(kernels_dir)
    if not path.is_file():
        return []
    data = load(kernels_dir)
    out = []
    for rel in sorted(rels):
        rec = data["files"].get(rel)
        if rec is not None:
            up = data["upstreams"][rec["upstream"]]
            out.append({"file": rel, **rec, "url": up.get("url"), "license": up.get("license")})
    return out
