"""The provenance header at the top of each vendored Python file: rendered, and stripped exactly.

Below the header the upstream text is kept byte for byte (an upstream `# SPDX-License-Identifier:`
line stays where upstream had it), so stripping the header gives back what was vendored plus any
local edits, and nothing else.
"""

from __future__ import annotations

from farm.core.errors import FarmError
from farm.store.vendored import FileRecord

BEGIN = "# --- vendored by `farm vendor`: provenance of this file (rewritten by farm vendor, do not edit) ---"
END = "# --- end of vendored header ---"


def render(upstream: str, url: str, rec: FileRecord) -> str:
    """The header of one vendored file, from its own lock record (its own license included)."""
    reasons = [m["why"] for m in rec.get("modifications", [])]
    lines = [
        BEGIN,
        f"# upstream: {upstream}",
        f"# repository: {url}",
        f"# commit: {rec['commit']}",
        f"# path: {rec['path']}",
        f"# license: {rec['license']['id']}",
        "# Local modifications:",
        *([f"# - {why}" for why in reasons] or ["# - none"]),
        END,
    ]
    return "\n".join(lines) + "\n"


def split(text: str, where: str) -> tuple[str, str]:
    """(header, body) of a vendored file's text; a FarmError when the header is missing or broken."""
    if not text.startswith(BEGIN + "\n"):
        raise FarmError(f"{where}: no vendored header (its first line is not the `farm vendor` header)",
                        "re-add it with farm vendor add (force=true), or restore the header from git")
    end = text.find("\n" + END + "\n")
    if end < 0:
        raise FarmError(f"{where}: the vendored header has no end line ({END!r})",
                        "restore the header from git, or re-add the file with farm vendor add force=true")
    cut = end + len(END) + 2
    return text[:cut], text[cut:]


def license_of(top: str) -> str | None:
    """The license a rendered header names (None: no license line)."""
    prefix = "# license: "
    return next((line[len(prefix):] for line in top.splitlines() if line.startswith(prefix)), None)


def body(text: str, where: str) -> str:
    return split(text, where)[1]



def restamped(text: str, where: str, upstream: str, url: str, rec: FileRecord) -> str:
    """A vendored file's text with its header rendered anew from its record, the body kept."""
    return render(upstream, url, rec) + body(text, where)
