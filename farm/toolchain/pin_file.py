"""conf/toolchain/pinned.yaml as `farm pin` writes it: fixed key order, written with a YAML library."""

from __future__ import annotations

import yaml

from farm.toolchain.shapes import DisassemblerPin, DistributionPin, LinkerPin, ToolchainPin

DEFAULT_DISASSEMBLER = DisassemblerPin(path="/usr/bin/llvm-objdump-22")

PIN_HEADER = """\
# The toolchain pin. Every object's bytes depend on these; every manifest records them and
# `farm build` refuses to build when the installed toolchain differs.
# Move the pin with `farm pin` (see REGEN.md): it rewrites this file from what is installed.
# content: per Python distribution that decides the bytes, a SHA256 over every installed file's path and
# bytes on disk (bytecode, metadata and scripts outside site-packages excluded), its file count, and any
# file whose bytes differ from the distribution's RECORD (edited) or that RECORD does not list (added).
"""
DISASSEMBLER_HEADER = "# Verification only (instruction classes in the manifest); it never touches an object's bytes.\n"


def _dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=False)


def pin_text(found: ToolchainPin) -> str:
    """conf/toolchain/pinned.yaml for `found` (used by `farm pin`): the same `found` always gives the same
    text (fixed key order, sorted file names). The disassembler block comes last."""
    text = PIN_HEADER + _dump({"flydsl": found["flydsl"], "python": str(found["python"]),
                               "content": _content(found), "linker": _linker(found["linker"])})
    entry = found.get("disassembler")
    if entry:
        text += DISASSEMBLER_HEADER + _dump({"disassembler": {"path": entry["path"], "version": entry["version"]}})
    return text


def _linker(link: LinkerPin) -> dict[str, str]:
    """The linker entry: its kind (`path` or `package`) first, then what it is."""
    linker = {"path": link["path"]} if "path" in link else {"package": link["package"]}
    return linker | {"version": link["version"], "sha256": link["sha256"]}


def _content(found: ToolchainPin) -> dict[str, dict[str, object]]:
    return {name: _sorted_entry(entry) for name, entry in sorted((found.get("content") or {}).items())}


def _sorted_entry(entry: DistributionPin) -> dict[str, object]:
    out: dict[str, object] = {key: entry[key] for key in ("version", "files", "sha256")  # type: ignore[literal-required]
                              if key in entry}
    for key in ("edited", "added"):
        if key in entry:
            out[key] = dict(sorted(entry[key].items()))  # type: ignore[literal-required]
    return out
