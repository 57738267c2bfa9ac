"""Normalise Python text with `ruff format`, and split the differences of two texts into changes and hunks.

Both sides go through the same formatter (isolated from any project's ruff settings), so a file that
was only reformatted compares equal. A change is one replaced run of lines (the lines it removes
and adds, without context): that is what a recorded modification stores, so it still matches after
unrelated edits move it or change the context around it.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
from dataclasses import dataclass

from farm.core.errors import FarmError
from farm.store.vendored import ChangeRecord

CONTEXT = 3


def _ruff() -> str:
    try:
        from ruff.__main__ import find_ruff_bin  # the lookup `python -m ruff` itself uses

        return str(find_ruff_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("ruff")
        if found:
            return found
    raise FarmError("ruff is not installed (farm vendor normalises sources with `ruff format`)",
                    "run scripts/setup.sh (it installs the pinned ruff into .venv)")


def normalise(text: str) -> tuple[str, str | None]:
    """(formatted text, None), or (the text as is, why) when ruff cannot parse it."""
    text = text.replace("\r\n", "\n")
    proc = subprocess.run([_ruff(), "format", "--isolated", "--quiet", "--stdin-filename", "vendored.py", "-"],
                          input=text, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["ruff format failed"])[-1]
        return (text if text.endswith("\n") or not text else text + "\n"), reason
    return proc.stdout, None


@dataclass(frozen=True)
class Change:
    removed: tuple[str, ...]
    added: tuple[str, ...]

    def as_json(self) -> ChangeRecord:
        return {"removed": list(self.removed), "added": list(self.added)}

    @staticmethod
    def from_json(data: ChangeRecord) -> Change:
        return Change(tuple(data.get("removed", [])), tuple(data.get("added", [])))


@dataclass(frozen=True)
class Hunk:
    header: str
    lines: tuple[str, ...]
    changes: tuple[Change, ...]


def _range(start: int, length: int) -> str:
    # Unified-diff line ranges: 1-based; an empty range names the line before it.
    first = start + 1 if length else start
    return f"{first},{length}" if length != 1 else f"{first}"


def hunks(old: str, new: str) -> list[Hunk]:
    """The unified-diff hunks from `old` to `new`, each with the changes it is made of."""
    a, b = old.splitlines(), new.splitlines()
    out = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(CONTEXT):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines: list[str] = []
        changes: list[Change] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + line for line in a[a1:a2]]
                continue
            lines += ["-" + line for line in a[a1:a2]] + ["+" + line for line in b[b1:b2]]
            changes.append(Change(tuple(a[a1:a2]), tuple(b[b1:b2])))
        out.append(Hunk(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@", tuple(lines), tuple(changes)))
    return out
