"""`farm vendor note`: record a vendored file's current unrecorded changes as one intended local modification.

The changes (normalised, without context) and the reason go into the lock, so `farm vendor diff`
marks them as recorded; the reason is listed in the file's header and its directory's SOURCE.md.
"""

from __future__ import annotations

from pathlib import Path

from farm.core.errors import FarmError
from farm.store import vendored
from farm.vendoring import docs, header
from farm.vendoring.add import write_changed
from farm.vendoring.compare import MISSING, MISSING_LOCAL, compare
from farm.vendoring.gitsrc import Checkout
from farm.vendoring.project import Project

KEYS = ("path", "why", "from")
USAGE = 'usage: farm vendor note path=<vendored file> why="<reason>" from=<checkout>'


def note(project: Project, opts: dict[str, str]) -> int:
    why = " ".join(opts["why"].split())
    rel = project.rel_of(opts["path"])
    data = vendored.load(project.kernels_dir)
    rec = data["files"].get(rel)
    if rec is None:
        raise FarmError(f"{project.show(rel)} is not a vendored file (not in {vendored.LOCK_NAME})",
                        "name a file that farm vendor add brought in")
    if any(m["why"] == why for m in rec.get("modifications", [])):
        raise FarmError(f"{project.show(rel)}: a modification is already recorded as {why!r}",
                        "give this one its own reason")
    checkout = Checkout(Path(opts["from"]))
    result = compare(project, checkout, rel, rec)
    if result.status in (MISSING, MISSING_LOCAL):
        raise FarmError(f"{project.show(rel)}: {result.status}: {result.detail}",
                        "point from= at a checkout that has the pinned commit")
    if not result.uncovered:
        raise FarmError(f"{project.show(rel)} has no unrecorded changes against upstream; nothing to note",
                        "edit the file first, then record the edit with farm vendor note")
    changes = list(dict.fromkeys(result.uncovered))
    rec.setdefault("modifications", []).append({"why": why, "changes": [c.as_json() for c in changes]})
    up = data["upstreams"][rec["upstream"]]
    path = project.kernels_dir / rel
    write_changed({path: header.restamped(path.read_text(encoding="utf-8"), project.show(rel), rec["upstream"],
                                          up["url"], rec)})
    vendored.save(project.kernels_dir, data)
    docs.write_all(project.root, project.kernels_dir, data)
    print(f"recorded {len(changes)} change(s) in {project.show(rel)} as a local modification: {why}")
    return 0
