"""`farm vendor diff`: every vendored file of an upstream against its blob at the pinned commit.

Exit 1 when a vendored file has no upstream counterpart at its pinned commit, or upstream removed it by
the checkout's commit (or it is gone locally),
with pinned=true when the checkout is not at the pinned commit, and with strict=true when a
difference is not covered by a recorded modification, or a file's license differs from the lock's (upstream's
at the pinned commit or at the checkout's commit, or the file's header); 0 otherwise.
"""

from __future__ import annotations

from pathlib import Path

from farm.core.errors import FarmError
from farm.store import vendored
from farm.store.vendored import FileRecord, Lock
from farm.vendoring import header
from farm.vendoring.args import as_bool
from farm.vendoring.compare import CLEAN, MISSING, MISSING_LOCAL, RECORDED, UNRECORDED, Comparison, compare
from farm.vendoring.gitsrc import Checkout
from farm.vendoring.license import BY_NAMED_FILE, BY_OPTION, derive
from farm.vendoring.project import Project

KEYS = ("from", "upstream", "pinned", "strict")
USAGE = "usage: farm vendor diff from=<checkout> [upstream=<name>] [pinned=true] [strict=true]"


def pick_upstream(data: Lock, given: str | None) -> str:
    names = sorted({rec["upstream"] for rec in data["files"].values()})
    if not names:
        raise FarmError("nothing is vendored (the lock lists no files)",
                        "vendor files first: farm vendor add from=<checkout> commit=<sha> upstream=<name> paths=[...]")
    if given:
        if given not in names:
            raise FarmError(f"upstream={given}: nothing is vendored from it (vendored upstreams: {', '.join(names)})",
                            f"e.g. upstream={names[0]}")
        return given
    if len(names) > 1:
        raise FarmError(f"files are vendored from several upstreams ({', '.join(names)}); which one is from=?",
                        f"add upstream=<name>, e.g. upstream={names[0]}")
    return names[0]


def _moved(project: Project, checkout: Checkout, head: str,
           files: dict[str, FileRecord]) -> tuple[list[str], int]:
    """Where the checkout is not at the pinned commit(s): what changed upstream since, per vendored file;
    and how many vendored files upstream has removed by the checkout's commit."""
    lines = []
    removed = 0
    for commit in sorted({rec["commit"] for rec in files.values()}):
        if commit == head:
            continue
        lines.append(f"pinned {commit}, checkout at {head}: the checkout is not at the pinned commit")
        if not checkout.has_commit(commit):
            continue
        for rel, rec in sorted(files.items()):
            if rec["commit"] != commit:
                continue
            was, now = checkout.blob(commit, rec["path"]), checkout.blob(head, rec["path"])
            if now is None and was is not None:
                removed += 1
                lines.append(f"  removed upstream since the pinned commit: {rec['path']} ({project.show(rel)})")
            elif now != was:
                lines.append(f"  changed upstream since the pinned commit: {rec['path']} ({project.show(rel)})")
    return lines, removed


def upstream_license(checkout: Checkout, commit: str, rec: FileRecord) -> str | None:
    """Upstream's license for the vendored file at `commit` when it differs from the lock's (None: it agrees,
    or upstream does not tell one and the lock's came from license=). Re-derived by the rule `add` used."""
    blob = checkout.blob(commit, rec["path"]) if checkout.has_commit(commit) else None
    if blob is None:
        return None
    by = rec["license"]["declared_by"]
    named = by[len(BY_NAMED_FILE):] if by.startswith(BY_NAMED_FILE) else None
    try:
        found, why = derive(checkout, commit, rec["path"], blob.decode("utf-8", "replace"), named)
    except FarmError as exc:  # the license file it was declared by is gone there
        found, why = None, exc.what
    if found is None:
        return None if by == BY_OPTION else f"none it can tell ({why})"
    if found.spdx == vendored.license_id(rec):
        return None
    return f"{found.spdx} (its {found.declared_by})"


def _license_lines(project: Project, checkout: Checkout, head: str, rel: str, rec: FileRecord) -> list[str]:
    """Where the file's license in the lock, its header and upstream disagree."""
    show, have = project.show(rel), vendored.license_id(rec)
    lines = []
    now = upstream_license(checkout, rec["commit"], rec)
    if now is not None:
        lines.append(f"LICENSE CHANGED          {show}: the lock says {have}; upstream at the pinned commit "
                     f"{rec['commit']} says {now}")
    later = upstream_license(checkout, head, rec) if head != rec["commit"] else None
    if later is not None and later != now:
        lines.append(f"LICENSE CHANGED          {show}: the lock says {have}; upstream at the checkout's commit "
                     f"{head} says {later}")
    path = project.kernels_dir / rel
    if path.is_file():
        try:
            top = header.split(path.read_text(encoding="utf-8"), show)[0]
        except (FarmError, UnicodeDecodeError):
            top = None  # compare() reports an unreadable file or header
        said = header.license_of(top) if top is not None else None
        if top is not None and said != have:
            lines.append(f"LICENSE CHANGED          {show}: the lock says {have}; its header says {said or 'none'}")
    return lines


def _print_file(project: Project, rel: str, rec: FileRecord, result: Comparison) -> None:
    print(f"{result.status:24} {project.show(rel)}" + (f": {result.detail}" if result.detail else ""))
    for note in result.notes:
        print(f"  note: {note}")
    if result.hunks:  # line numbers are those of the formatted texts, not of the files
        print(f"--- upstream/{rec['path']} @ {rec['commit']} (ruff format)")
        print(f"+++ {project.show(rel)} (header stripped, ruff format)")
    for hunk, whys, covered in result.hunks:
        if covered:
            mark = f"recorded: {'; '.join(whys)}"
        elif whys:
            mark = f"UNRECORDED (partly recorded: {'; '.join(whys)})"
        else:
            mark = "UNRECORDED"
        print(f"{hunk.header} {mark}")
        for line in hunk.lines:
            print(line)


def diff(project: Project, opts: dict[str, str]) -> int:
    pinned, strict = as_bool("pinned", opts.get("pinned")), as_bool("strict", opts.get("strict"))
    checkout = Checkout(Path(opts["from"]))
    data = vendored.load(project.kernels_dir)
    name = pick_upstream(data, opts.get("upstream"))
    files = {rel: rec for rel, rec in data["files"].items() if rec["upstream"] == name}
    head = checkout.head()
    print(f"upstream {name}: {len(files)} vendored file(s); checkout {checkout.path} at {head}")
    moved, removed = _moved(project, checkout, head, files)
    for line in moved:
        print(line)

    counts = {CLEAN: 0, RECORDED: 0, UNRECORDED: 0, MISSING: 0, MISSING_LOCAL: 0}
    disagree = 0
    for rel, rec in sorted(files.items()):
        result = compare(project, checkout, rel, rec)
        counts[result.status] += 1
        _print_file(project, rel, rec, result)
        lines = _license_lines(project, checkout, head, rel, rec)
        disagree += bool(lines)
        for line in lines:
            print(line)
    print(f"{len(files)} file(s): " + ", ".join(f"{n} {status}" for status, n in counts.items() if n)
          + (f"; {disagree} with a license that disagrees with the lock" if disagree else ""))

    failures = []
    if counts[MISSING]:
        failures.append(f"{counts[MISSING]} vendored file(s) have no upstream counterpart at the pinned commit")
    if removed:
        # Upstream no longer has the file: nothing to follow or send fixes to, so the user must decide.
        failures.append(f"{removed} vendored file(s) were removed upstream by the checkout's commit {head}")
    if counts[MISSING_LOCAL]:
        failures.append(f"{counts[MISSING_LOCAL]} vendored file(s) are missing locally")
    if pinned and moved:
        failures.append("the checkout is not at the pinned commit (pinned=true)")
    if strict and counts[UNRECORDED]:
        failures.append(f"{counts[UNRECORDED]} file(s) have changes no recorded modification covers (strict=true); "
                        "record intended ones with `farm vendor note path=<file> why=... from=<checkout>`")
    if strict and disagree:
        failures.append(f"{disagree} file(s) have a license that upstream or their header states otherwise than the "
                        "lock (strict=true); re-add them with `farm vendor add` to record upstream's license")
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures else 0
