"""What the config declares, once validated: targets and ops (with their groups and tuning)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from farm.table.schema import TargetFile

SAFE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
MAX_NAME = 100  # characters in an op or target name (its file's name)


@dataclass(frozen=True)
class Target:
    """One compile target: what the object must say it is, and how to lower for it."""

    name: str
    family: str
    elf_machine: int
    generic_version: int
    members: tuple[str, ...]
    wave_size: int
    mlir_chipset: str
    python_arch: str
    lds_bytes: int

    def as_dict(self) -> TargetFile:
        """The target as plain data (its digest is part of every input record: keep the shape)."""
        return {
            "name": self.name,
            "family": self.family,
            "elf_machine": self.elf_machine,
            "generic_version": self.generic_version,
            "members": list(self.members),
            "wave_size": self.wave_size,
            "mlir_chipset": self.mlir_chipset,
            "python_arch": self.python_arch,
            "lds_bytes": self.lds_bytes,
        }


@dataclass(frozen=True)
class Group:
    name: str
    axes: dict[str, list[Any]]
    name_format: str
    allow: dict[str, bool]
    targets: tuple[str, ...]  # the op's targets this group is built for
    symbols: tuple[str, ...] | None = None  # this group's kernels when they differ from the op's


@dataclass(frozen=True)
class Tuning:
    """Knob settings for the rows that match, without renaming them (e.g. one row's block size)."""

    match: dict[str, Any]
    targets: tuple[str, ...]
    set: dict[str, Any]


class OpIdentity(TypedDict):
    """What of an op decides its objects' bytes or their acceptance (its digest is in every input record)."""

    name: str
    family: str
    generator: str
    symbols: list[str]
    require_instructions: list[str]
    group_symbols: NotRequired[dict[str, list[str]]]  # only when a group declares its own symbols


@dataclass(frozen=True)
class Op:
    """One kernel family as the config declares it."""

    name: str
    family: str
    generator: str
    spec: str
    symbols: tuple[str, ...]
    targets: tuple[str, ...]
    groups: tuple[Group, ...]
    tuning: tuple[Tuning, ...] = ()
    require_instructions: tuple[str, ...] = ()  # instruction classes (farm.toolchain.disasm) every object must contain

    def compile_identity(self) -> OpIdentity:
        """The op-level fields that decide an object's bytes or its acceptance (part of every input digest).
        Group symbol sets join it only when a group declares one, so ops without them keep their digest."""
        identity: OpIdentity = {
            "name": self.name, "family": self.family, "generator": self.generator,
            "symbols": list(self.symbols), "require_instructions": list(self.require_instructions)}
        group_symbols = {g.name: list(g.symbols) for g in self.groups if g.symbols is not None}
        if group_symbols:
            identity["group_symbols"] = group_symbols
        return identity
