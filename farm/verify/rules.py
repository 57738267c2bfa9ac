"""Verify a code object against its row before it is written, and describe it for the manifest.

The checks read plain values (`Rules`), never the config's objects: each value is one a row's inputs record
(the op's compile identity and the target's fields by digest, the resource rules as they are), so the code
that loads the config and expands rows is not part of what a manifest records as the verifier
(farm/plan/code_closure.py), and a change to any value the checks read is a changed input all the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from farm.elf.code_object import ELFOSABI_AMDGPU_HSA, EM_AMDGPU, CodeObject
from farm.toolchain.listing import CLASS_NAMES, EXAMPLES


@dataclass(frozen=True)
class Rules:
    """What one row's object must be."""

    op: str
    symbols: tuple[str, ...]  # the kernels it must hold, exactly
    require_instructions: tuple[str, ...]  # instruction classes (farm.toolchain.listing) it must contain
    target: str
    elf_machine: int
    generic_version: int
    wave_size: int
    lds_bytes: int
    allow: Mapping[str, bool]  # resource rules: scratch, vgpr_spill, sgpr_spill
    linker: str | None = None  # the pinned linker's version: the object's .comment must name it

    @classmethod
    def of(cls, op: Mapping[str, Any], target: Mapping[str, Any], group: str, allow: Mapping[str, bool],
           linker: str | None = None) -> Rules:
        """From the values a row's inputs record: `op` as the op's compile identity (name, symbols,
        require_instructions, group_symbols when a group declares its own kernels), `target` as the target's
        fields, the row's group and its resource rules, and the toolchain pin's linker version."""
        symbols = op.get("group_symbols", {}).get(group, op["symbols"])
        return cls(op=op["name"], symbols=tuple(symbols), require_instructions=tuple(op["require_instructions"]),
                   target=target["name"], elf_machine=target["elf_machine"],
                   generic_version=target["generic_version"], wave_size=target["wave_size"],
                   lds_bytes=target["lds_bytes"], allow=dict(allow), linker=linker)


def target_processor(amdhsa_target: str) -> str:
    """'amdgcn-amd-amdhsa-unknown-gfx11-generic:xnack+' -> 'gfx11-generic' (the processor follows the
    fourth dash of the triple, and may itself contain dashes)."""
    parts = amdhsa_target.split("-", 4)
    return parts[4].split(":")[0] if len(parts) == 5 else ""


def object_totals(functions: dict[str, dict[str, int]]) -> dict[str, int]:
    """Instruction classes summed over every function in the object."""
    return {name: sum(counts.get(name, 0) for counts in functions.values()) for name in CLASS_NAMES}


def _kernel_record(kernel: dict[str, Any], functions: dict[str, dict[str, int]]) -> dict[str, Any]:
    args = [{k.lstrip("."): v for k, v in sorted(arg.items())} for arg in kernel.get(".args", [])]
    return {
        "name": kernel.get(".name"),
        "symbol": kernel.get(".symbol"),
        "kernarg_segment_size": kernel.get(".kernarg_segment_size"),
        "kernarg_segment_align": kernel.get(".kernarg_segment_align"),
        "args": args,
        "lds_bytes": kernel.get(".group_segment_fixed_size"),
        "scratch_bytes": kernel.get(".private_segment_fixed_size"),
        "uses_dynamic_stack": kernel.get(".uses_dynamic_stack"),
        "sgpr_count": kernel.get(".sgpr_count"),
        "vgpr_count": kernel.get(".vgpr_count"),
        "agpr_count": kernel.get(".agpr_count", 0),
        "sgpr_spill_count": kernel.get(".sgpr_spill_count"),
        "vgpr_spill_count": kernel.get(".vgpr_spill_count"),
        "wavefront_size": kernel.get(".wavefront_size"),
        "max_flat_workgroup_size": kernel.get(".max_flat_workgroup_size"),
        "instructions": functions.get(str(kernel.get(".name"))),
    }


def describe(co: CodeObject, functions: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What the manifest records about an object, derived only from its bytes (`functions`: the
    instruction classes of each function in its disassembly, from disasm)."""
    return {
        "code_object": {
            "amdhsa_target": co.amdhsa_target,
            "e_flags": f"0x{co.e_flags:08x}",
            "elf_machine": f"0x{co.mach:03x}",
            "generic_version": co.generic_version,
            "elf_abi_version": co.abi_version,
            "linker": co.comment,
            "instructions": object_totals(functions),
        },
        "kernels": sorted((_kernel_record(k, functions) for k in co.kernels), key=lambda k: str(k["name"])),
    }


def problems(co: CodeObject, rules: Rules, functions: dict[str, dict[str, int]]) -> list[str]:
    """Every way the object fails its row's rules; empty means it may be written."""
    found: list[str] = []
    totals = object_totals(functions)
    for name in rules.require_instructions:
        if not totals.get(name):
            found.append(f"no {name} instructions ({EXAMPLES.get(name, name)}) in the disassembly; "
                         f"op {rules.op} requires them (require_instructions)")
    if co.e_machine != EM_AMDGPU or co.os_abi != ELFOSABI_AMDGPU_HSA:
        found.append(f"not an AMDGPU HSA object (e_machine {co.e_machine}, OS/ABI {co.os_abi})")
    # The linker writes its identity into .comment: an object another linker linked is not the pin's build,
    # whatever its worker reported (a warm server started for one linker once linked for another).
    if rules.linker is not None and f"Linker: {rules.linker}" not in co.comment.splitlines():
        found.append(f"linked by {co.comment!r} (.comment), the pinned linker is {rules.linker!r}")
    if target_processor(co.amdhsa_target) != rules.target:
        found.append(f"amdhsa.target is {co.amdhsa_target!r}, expected one for {rules.target}")
    if co.mach != rules.elf_machine:
        found.append(f"e_flags machine is 0x{co.mach:03x}, {rules.target} is 0x{rules.elf_machine:03x}")
    if co.generic_version != rules.generic_version:
        found.append(f"e_flags generic version is {co.generic_version}, {rules.target} needs {rules.generic_version}")
    if rules.generic_version and co.abi_version < 4:
        found.append(f"generic targets need code object v6 (ELF ABI version 4), got {co.abi_version}")
    names = sorted(str(k.get(".name")) for k in co.kernels)
    symbols = sorted(rules.symbols)  # a group may declare its own kernels
    if names != symbols or co.kernel_symbols != symbols:
        found.append(f"kernels are {names} (symbols {co.kernel_symbols}), op {rules.op} declares {symbols}")
    for k in co.kernels:
        name = k.get(".name")
        if k.get(".wavefront_size") != rules.wave_size:
            found.append(f"{name}: wavefront size {k.get('.wavefront_size')}, {rules.target} is wave{rules.wave_size}")
        if (k.get(".group_segment_fixed_size") or 0) > rules.lds_bytes:
            found.append(f"{name}: LDS {k.get('.group_segment_fixed_size')} B exceeds {rules.lds_bytes} B")
        scratch = k.get(".private_segment_fixed_size") or 0
        if not rules.allow.get("scratch") and (scratch or k.get(".uses_dynamic_stack")):
            found.append(f"{name}: uses scratch ({scratch} B) and the row does not allow it")
        if not rules.allow.get("vgpr_spill") and (k.get(".vgpr_spill_count") or 0):
            found.append(f"{name}: spills {k.get('.vgpr_spill_count')} VGPRs and the row does not allow it")
        if not rules.allow.get("sgpr_spill") and (k.get(".sgpr_spill_count") or 0):
            found.append(f"{name}: spills {k.get('.sgpr_spill_count')} SGPRs and the row does not allow it")
    return found
