"""kernels_src/VENDOR.lock.json: the record of every vendored file, read and written canonically.

It lives in the store layer because every build reads it: an output directory's SOURCE.md names the
vendored sources its objects were compiled from (`vendored_sources`). `farm vendor` (farm/vendoring/)
is the only writer. Layout (paths of vendored files and license copies are relative to kernels_src/,
like the manifests' `inputs.sources`):

    {"schema": 2,
     "upstreams": {NAME: {"url"}},
     "files": {REL: {"upstream", "commit", "path", "sha256",
                     "license": {"id", "declared_by", "text"},
                     "modifications": [{"why", "changes": [{"removed": [...], "added": [...]}]}]}},
     "license_texts": {REL: {"upstream", "commit", "path", "sha256", "license"}}}

`sha256` is of the upstream blob at `commit`, `path`. Each file has its own license: `id` (SPDX),
`declared_by` (how it was told: `SPDX-License-Identifier`, the covering license file's upstream path,
`license_file=<path>` or `license=`) and `text` (the key of its license text copy in `license_texts`,
or null when upstream ships none), so THIRD_PARTY_LICENSES.md can be generated from the lock alone.
A schema 1 lock (one license per upstream) is read as schema 2. The file is data from disk: `load`
checks every field the farm reads before anyone uses it. This module imports nothing heavy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from farm.core.atomic import write_text_atomic
from farm.core.canonical import canonical_json
from farm.core.errors import FarmError

LOCK_NAME = "VENDOR.lock.json"
SCHEMA = 2


class Upstream(TypedDict):
    url: str | None


class LicenseRecord(TypedDict):
    id: str
    declared_by: str
    text: str | None  # key in license_texts, None: upstream ships no text


class ChangeRecord(TypedDict):
    removed: list[str]
    added: list[str]


class Modification(TypedDict):
    why: str
    changes: list[ChangeRecord]


class FileRecord(TypedDict):
    upstream: str
    commit: str
    path: str  # upstream path
    sha256: str  # of the upstream blob
    license: LicenseRecord
    modifications: list[Modification]


class LicenseCopy(TypedDict):
    """Where a license text copy under kernels_src/ came from."""

    upstream: str
    commit: str | None
    path: str | None  # upstream path of the license file
    sha256: str | None
    license: str | None


class Lock(TypedDict):
    schema: int
    upstreams: dict[str, Upstream]
    files: dict[str, FileRecord]  # rel (to kernels_src/) -> record
    license_texts: dict[str, LicenseCopy]  # rel of the copy -> where it came from


@dataclass(frozen=True)
class VendoredSource:
    """One vendored kernel source as an output directory's SOURCE.md names it."""

    file: str  # relative to kernels_src/
    upstream: str
    path: str
    commit: str
    url: str | None
    license: str
    modifications: tuple[str, ...]  # the recorded reasons


def lock_path(kernels_dir: Path) -> Path:
    return kernels_dir / LOCK_NAME


def empty() -> Lock:
    return {"schema": SCHEMA, "upstreams": {}, "files": {}, "license_texts": {}}


def rel_ok(rel: object) -> bool:
    """A relative POSIX path of plain components (no '..', no absolute path): safe to join to kernels_src/."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


def _from_schema_1(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 kept one license per upstream: each file gets it (`vendor diff` flags any that upstream
    says otherwise)."""
    texts: dict[str, Any] = {}
    for name, up in data["upstreams"].items():
        if up.get("license_file"):
            texts[up["license_file"]] = {"upstream": name, "commit": up.get("license_commit"),
                                         "path": up.get("license_source"), "sha256": None,
                                         "license": up.get("license")}
    for rec in data["files"].values():
        up = data["upstreams"].get(rec.get("upstream"), {})
        rec["license"] = {"id": up.get("license"), "declared_by": "the upstream's license (lock schema 1)",
                          "text": up.get("license_file")}
    upstreams = {name: {"url": up.get("url")} for name, up in data["upstreams"].items()}
    return {"schema": SCHEMA, "upstreams": upstreams, "files": data["files"], "license_texts": texts}


def _validate_file(rel: str, rec: Any, data: dict[str, Any]) -> None:
    if not rel_ok(rel) or not isinstance(rec, dict) or rec.get("upstream") not in data["upstreams"]:
        raise ValueError(f"file {rel!r} is not a relative path naming a known upstream")
    if not all(isinstance(rec.get(key), str) for key in ("commit", "path", "sha256")):
        raise ValueError(f"file {rel} has no upstream commit, path and sha256")
    lic = rec.get("license")
    if not isinstance(lic, dict) or not isinstance(lic.get("id"), str) or \
            (lic.get("text") is not None and lic["text"] not in data["license_texts"]):
        raise ValueError(f"file {rel} has no license record (id, declared_by, text)")
    mods = rec.setdefault("modifications", [])
    if not isinstance(mods, list) or not all(isinstance(m, dict) and isinstance(m.get("why"), str)
                                             and isinstance(m.get("changes", []), list) for m in mods):
        raise ValueError(f"file {rel}: modifications is not a list of {{why, changes}}")


def _validate(data: dict[str, Any]) -> Lock:
    if not isinstance(data.get("upstreams"), dict) or not isinstance(data.get("files"), dict) \
            or not isinstance(data.get("license_texts"), dict):
        raise ValueError("no upstreams/files/license_texts tables")
    for name, up in data["upstreams"].items():
        if not isinstance(up, dict):
            raise ValueError(f"upstream {name!r} is not a table")
    for rel, text in data["license_texts"].items():
        if not rel_ok(rel) or not isinstance(text, dict):
            raise ValueError(f"license text {rel!r} is not a relative path inside kernels_src/")
    for rel, rec in data["files"].items():
        _validate_file(rel, rec, data)
    return data  # type: ignore[return-value]  # checked above, field by field


def load(kernels_dir: Path) -> Lock:
    """The lock, or an empty one when there is none; a FarmError naming the file when it is unreadable."""
    path = lock_path(kernels_dir)
    if not path.is_file():
        return empty()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") not in (1, SCHEMA):
            raise ValueError(f"schema is not {SCHEMA}")
        if data["schema"] == 1 and isinstance(data.get("upstreams"), dict) and isinstance(data.get("files"), dict):
            data = _from_schema_1(data)
        return _validate(data)
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError) as exc:
        raise FarmError(f"{path}: not a readable vendor lock ({exc})",
                        "restore it from git (git checkout -- kernels_src/VENDOR.lock.json)") from None


def save(kernels_dir: Path, data: Lock) -> None:
    """Sorted keys, fixed indentation, atomic: the same record always gives the same bytes."""
    write_text_atomic(lock_path(kernels_dir), canonical_json(data))


def license_id(rec: FileRecord) -> str:
    return str(rec["license"]["id"])


def vendored_sources(kernels_dir: Path, rels: list[str] | dict[str, str]) -> list[VendoredSource]:
    """Those of `rels` (paths relative to kernels_src/) that are vendored, with their upstream and license."""
    if not lock_path(kernels_dir).is_file():
        return []
    data = load(kernels_dir)
    out = []
    for rel in sorted(rels):
        rec = data["files"].get(rel)
        if rec is not None:
            out.append(VendoredSource(file=rel, upstream=rec["upstream"], path=rec["path"], commit=rec["commit"],
                                      url=data["upstreams"][rec["upstream"]].get("url"), license=license_id(rec),
                                      modifications=tuple(m["why"] for m in rec["modifications"])))
    return out
