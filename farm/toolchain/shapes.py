"""The toolchain pin's shape (conf/toolchain/*.yaml): what a toolchain is, field by field.

These are YAML/JSON data: the config schema (farm/table/schema.py) checks a pin's keys where it is read,
and `farm.toolchain.compare` never trusts a value's type (a hand-edited pin may hold anything).
"""

from __future__ import annotations

from typing import TypedDict


class DistributionPin(TypedDict, total=False):
    """One Python distribution by content (farm/toolchain/distributions.py)."""

    version: str | None
    files: int
    sha256: str  # over {path: SHA256} of every counted file; or why there is none
    edited: dict[str, str]  # recorded files whose bytes differ from RECORD (path -> SHA256 or why none)
    added: dict[str, str]  # files RECORD does not list (path -> SHA256 or why none)


class LinkerPin(TypedDict, total=False):
    """The linker: the ziglang wheel's LLD (`package`) or any ld.lld binary (`path`)."""

    package: str
    path: str
    version: str
    sha256: str


class DisassemblerPin(TypedDict, total=False):
    """The disassembler that verifies (never touches an object's bytes)."""

    path: str
    version: str


class ToolchainPin(TypedDict, total=False):
    """A whole pin, or what is installed in its shape."""

    flydsl: str | None
    python: str
    content: dict[str, DistributionPin]
    linker: LinkerPin
    disassembler: DisassemblerPin
