"""Which files a published tree holds, remembered per pointer, so that a build whose rows that tree cannot
hold (a width or tile added since it was published) does not open DVC at all: importing DVC and opening the
repository cost ~1 s of a small rebuild, for rows that then compile anyway.

A pointer (`outputs.dvc`) names its tree by content (the MD5 of the tree's listing), so the file names once
listed for a pointer's bytes hold as long as those bytes do: the record is kept under the SHA256 of the
pointer file. Only listings actually read are remembered; "nothing published yet" and an unreachable remote
can change without the pointer changing, and are never remembered.

The record is data, in the user's private directory (farm/core/private.py), used only to look up names the
build made itself. It decides whether DVC is opened, never what is restored: every restored object is read
from DVC and verified each time. A wrong record can cost a compile, never wrong bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from farm.core.private import private_dir, read_private_text, write_private_text
from farm.plan.decide import Decision


class PublishedNames:
    """The file names of each published <op>/<target>/ directory of one pointer, as far as listed so far."""

    def __init__(self, pointer: Path) -> None:
        self.pointer = pointer
        self.digest = _digest(pointer)
        # None: nothing remembered (an unreadable pointer: DVC is opened as before and names the problem)
        self.record = private_dir("published") / f"{self.digest}.json" if self.digest else None
        self.listed: dict[str, set[str]] = _load(self.record)
        self.changed = False

    def holds_none_of(self, todo: Iterable[Decision]) -> bool:
        """True when every row's directory was listed before and none of them holds the row's file."""
        todo = list(todo)
        return bool(todo) and all(
            (names := self.listed.get(f"{d.row.op}/{d.row.target}")) is not None and d.row.file_name not in names
            for d in todo)

    def remember(self, op: str, target: str, names: Iterable[str]) -> None:
        key = f"{op}/{target}"
        found = set(names)
        if self.listed.get(key) != found:
            self.listed[key] = found
            self.changed = True

    def save(self) -> None:
        """Keep what was listed, unless the pointer changed meanwhile (a checkout while DVC read it): then the
        names may be another tree's."""
        if self.record is None or not self.changed or _digest(self.pointer) != self.digest:
            return
        try:
            write_private_text(self.record, json.dumps({k: sorted(v) for k, v in sorted(self.listed.items())}))
        except OSError:
            pass  # a record that cannot be written only costs the next build DVC's opening


def _digest(pointer: Path) -> str | None:
    try:
        return hashlib.sha256(pointer.read_bytes()).hexdigest()
    except OSError:
        return None


def _load(record: Path | None) -> dict[str, set[str]]:
    """The record, or nothing when it is absent or not the shape this module writes."""
    if record is None:
        return {}
    try:
        data = json.loads(read_private_text(record) or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: set(names) for key, names in data.items()
            if isinstance(key, str) and isinstance(names, list) and all(isinstance(n, str) for n in names)}
