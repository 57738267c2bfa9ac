"""Comparing an installed toolchain with the pin: one human line per difference, and the fix.

Both sides are data (a pin read from YAML, a worker's fingerprint sent back as JSON): every value's type
is checked here before it is used, never assumed from the pin's shape.
"""

from __future__ import annotations

from collections.abc import Mapping

from farm.core.errors import FarmError
from farm.toolchain.shapes import ToolchainPin

LOCK_FILE = "requirements.lock"


def differences(pin: ToolchainPin, found: ToolchainPin) -> list[str]:
    """Human lines naming each field where `found` differs from `pin` (for `content`: each file)."""
    return _differences(pin, found, "")


def _differences(pin: Mapping[str, object], found: Mapping[str, object], prefix: str) -> list[str]:
    lines = []
    for key in sorted(set(pin) | set(found)):
        want, have = pin.get(key), found.get(key)
        if not prefix and key == "content":
            lines += _content_differences(want, have)
        elif isinstance(want, dict) and isinstance(have, dict):
            lines += _differences(want, have, f"{prefix}{key}.")
        elif str(want) != str(have):
            lines.append(f"{prefix}{key}: pinned {want!r}, found {have!r}")
    return lines


def _content_differences(pin: object, found: object) -> list[str]:
    if not isinstance(pin, dict):
        return ["content: the pin has no content digests (it predates them), found "
                + ", ".join(f"{n} {(found or {}).get(n, {}).get('version')}" for n in sorted(found or {}))]
    if not isinstance(found, dict):
        return [f"content: pinned {sorted(pin)}, found none"]
    lines: list[str] = []
    for name in sorted(set(pin) | set(found)):
        lines += _distribution_differences(name, pin.get(name), found.get(name))
    return lines


def _distribution_differences(name: str, want: object, have: object) -> list[str]:
    if not isinstance(want, dict) or not isinstance(have, dict):
        return [] if want == have else [f"content.{name}: pinned {want!r}, found {have!r}"]
    lines = _file_differences(name, want, have)
    if lines:  # the named files are the reason; the overall digest differs with them
        return lines
    return [f"content.{name}.{key}: pinned {want.get(key)!r}, found {have.get(key)!r}"
            for key in sorted(set(want) | set(have)) if str(want.get(key)) != str(have.get(key))]


def _file_differences(name: str, want: Mapping[str, object], have: Mapping[str, object]) -> list[str]:
    """One line per file that is edited, added or missing here and not the same way in the pin."""
    lines = []
    for key in ("edited", "added"):
        pinned, here = want.get(key) or {}, have.get(key) or {}
        if not isinstance(pinned, dict) or not isinstance(here, dict):  # a hand-edited pin: name the field
            lines += [] if pinned == here else [f"content.{name}.{key}: pinned {pinned!r}, found {here!r}"]
            continue
        for rel in sorted(set(pinned) | set(here)):
            if str(pinned.get(rel)) == str(here.get(rel)):
                continue
            lines.append(f"{name} file {rel} differs from the pin ({_why(key, rel, here)})")
    return lines


def _why(key: str, rel: str, here: Mapping[str, object]) -> str:
    """Why one file differs, as this machine sees it."""
    if rel not in here:
        return "the pin recorded another copy of it; this one is as installed"
    found = str(here[rel])
    if found == "missing" or found.startswith("unreadable"):
        return f"{found} here"
    if key == "edited":
        return "edited in place: its bytes are not the ones the distribution's RECORD lists"
    return "not part of the installed distribution: its RECORD does not list it"


def fix_for(pin: ToolchainPin, diff: list[str]) -> str:
    """Reinstalling is the fix for content that moved (pip keeps an edited distribution as 'already
    satisfied', so it must be forced); moving the pin is the other way."""
    content = pin.get("content") or {}
    moved = [n for n in sorted(content) if any(d.startswith((f"{n} file ", f"content.{n}")) for d in diff)]
    if not moved:
        return ("install the pinned toolchain (bash scripts/setup.sh), or move the pin on purpose with "
                "`farm pin` (every object will rebuild; see REGEN.md)")
    named = ", ".join(f"{n}=={(content[n] or {}).get('version')}" for n in moved)
    return (f"reinstall {named} (bash scripts/setup.sh reinstalls a distribution whose files differ from its "
            f"RECORD, from {LOCK_FILE}) or `farm pin` (moves the pin on purpose; every object will rebuild)")


def require_pin(pin: ToolchainPin, found: ToolchainPin, where: str = "this machine") -> None:
    diff = differences(pin, found)
    if diff:
        raise FarmError(
            f"toolchain on {where} differs from the pin (conf/toolchain/pinned.yaml):\n    " + "\n    ".join(diff),
            fix_for(pin, diff))
