"""Compare one vendored file with its upstream blob: normalised hunks, each covered by a recorded
modification or not. Shared by `farm vendor diff` (which prints it) and `farm vendor note` (which records it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from farm.core.errors import FarmError
from farm.store.vendored import FileRecord
from farm.vendoring import header
from farm.vendoring.gitsrc import Checkout
from farm.vendoring.normalise import Change, Hunk, hunks, normalise
from farm.vendoring.project import Project

CLEAN = "clean"
RECORDED = "modified (all recorded)"
UNRECORDED = "UNRECORDED changes"
MISSING = "MISSING upstream"
MISSING_LOCAL = "MISSING locally"


@dataclass
class Comparison:
    status: str
    detail: str = ""
    # (hunk, reasons of the recorded modifications it touches, whether every change in it is recorded)
    hunks: list[tuple[Hunk, list[str], bool]] = field(default_factory=list)
    uncovered: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def recorded(rec: FileRecord) -> dict[Change, list[str]]:
    """Every change a recorded modification covers -> the reasons recorded for it."""
    out: dict[Change, list[str]] = {}
    for mod in rec.get("modifications", []):
        for change in mod.get("changes", []):
            whys = out.setdefault(Change.from_json(change), [])
            if mod["why"] not in whys:
                whys.append(mod["why"])
    return out


def compare(project: Project, checkout: Checkout, rel: str, rec: FileRecord) -> Comparison:
    commit, path = rec["commit"], rec["path"]
    local_path = project.kernels_dir / rel
    if not local_path.is_file():
        return Comparison(MISSING_LOCAL, f"{project.show(rel)} is in the lock but not on disk")
    if not checkout.has_commit(commit):
        return Comparison(MISSING, f"the pinned commit {commit} is not in {checkout.path} (git fetch it)")
    blob = checkout.blob(commit, path)
    if blob is None:
        return Comparison(MISSING, f"{path} does not exist at the pinned commit {commit}")
    try:
        upstream_text = blob.decode("utf-8")
        local_text = header.body(local_path.read_text(encoding="utf-8"), project.show(rel))
    except UnicodeDecodeError as exc:
        raise FarmError(f"{project.show(rel)} or its upstream {path}: not UTF-8 text ({exc})",
                        "vendored files must be UTF-8 Python sources") from None
    result = Comparison(CLEAN)
    known = recorded(rec)
    seen: set[Change] = set()
    found: list[Hunk] = []
    if local_text != upstream_text:  # byte-identical needs no formatter
        old, old_err = normalise(upstream_text)
        new, new_err = normalise(local_text)
        result.notes += [f"upstream side compared unformatted ({old_err})"] if old_err else []
        result.notes += [f"local side compared unformatted ({new_err})"] if new_err else []
        found = hunks(old, new)
        if not found:
            result.detail = "differs from upstream in formatting only"
    for hunk in found:
        whys: list[str] = []
        for change in hunk.changes:
            seen.add(change)
            if change in known:
                whys += [w for w in known[change] if w not in whys]
            else:
                result.uncovered.append(change)
        result.hunks.append((hunk, whys, all(change in known for change in hunk.changes)))
    if result.hunks:
        result.status = UNRECORDED if result.uncovered else RECORDED
    for mod in rec.get("modifications", []):
        if not any(Change.from_json(c) in seen for c in mod.get("changes", [])):
            result.notes.append(f"recorded modification no longer present: {mod['why']}")
    return result
