"""Is the toolchain installed here the pinned one? For the commands that only read (plan, check).

`farm build` refuses to compile with a toolchain that differs from the pin; plan and check must say so
too, or a flydsl file edited in place reads as "up to date" until the build that cannot run. Warm, the
answer costs about 0.3 s: every file's SHA256 is remembered per file identity (filehash.FileHashes),
and an edit in place moves the file's ctime, so the edited file is hashed again."""

from __future__ import annotations

from dataclasses import dataclass

from farm.core.private import private_dir
from farm.toolchain.compare import differences, fix_for
from farm.toolchain.installed import installed
from farm.toolchain.shapes import ToolchainPin


@dataclass(frozen=True)
class Mismatch:
    """How the installed toolchain differs from the pin: one line per difference, and the fix."""

    lines: list[str]
    fix: str


def installed_mismatch(pin: ToolchainPin) -> Mismatch | None:
    """What `farm build` would refuse for this machine's toolchain, or None when it is the pinned one."""
    found = installed(private_dir("toolchain-cache"), pin.get("linker"), pin.get("disassembler") or {})
    diff = differences(pin, found)
    return Mismatch(diff, fix_for(pin, diff)) if diff else None
