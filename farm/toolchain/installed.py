"""The toolchain of this process's environment, in the shape of the pin."""

from __future__ import annotations

import sys
from pathlib import Path

from farm.toolchain.distributions import contents, dist_version
from farm.toolchain.linker import installed_linker
from farm.toolchain.shapes import DisassemblerPin, LinkerPin, ToolchainPin

# What a compile worker's bytes depend on; the pin's `disassembler` only verifies, on the driver.
COMPILE_KEYS = ("flydsl", "python", "content", "linker")


def compile_part(pin: ToolchainPin) -> ToolchainPin:
    """The part of a pin a compile worker must match."""
    part = ToolchainPin()
    for key, value in pin.items():
        if key in COMPILE_KEYS:
            part[key] = value  # type: ignore[literal-required]  # key is one of COMPILE_KEYS
    return part


def installed(cache_dir: Path | None = None, linker: LinkerPin | None = None,
              disassembler: DisassemblerPin | None = None, search_path: list[str] | None = None) -> ToolchainPin:
    """The toolchain of this process's environment, in the shape of the pin, for the pin's kind of
    linker (`linker`: the pin's linker entry; None means the ziglang package) and, when given, the
    pin's disassembler entry (the driver verifies with it; workers only compile). `search_path` looks
    for the Python distributions there instead of on sys.path (tests check a copy with it)."""
    found = installed_linker(linker, cache_dir)
    toolchain = ToolchainPin(flydsl=dist_version("flydsl", search_path),
                             python=f"{sys.version_info.major}.{sys.version_info.minor}",
                             content=contents(cache_dir, search_path), linker=found)
    if disassembler is not None:
        # Imported here, not at the top: compile workers load this module, and the farm files the code that
        # prepares a compile references are recorded compile inputs (farm/worker/farm_code.py
        # module_closure); the disassembler only verifies, it must not make objects rebuild.
        from farm.toolchain.disasm import installed as disassembler_installed

        toolchain["disassembler"] = disassembler_installed(disassembler)
    return toolchain
