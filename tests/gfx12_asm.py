"""Small gfx12 programs assembled by LLVM's own assembler (llvm-mc -mcpu=gfx1200 with the objects' real true16,
beside the pinned llvm-objdump), for the RDNA4 model's unit tests: the bytes come from LLVM, never from the model
under test."""

from __future__ import annotations

import gfx11_asm
from gfx11_asm import assembler

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.memory import Memory
from amdgpu_models.core.wave import Wave
from amdgpu_models.isa import gfx12

MCPU = "gfx1200"


def assemble(source: str) -> bytes:
    """The .text bytes of `source` (one instruction per line) assembled for gfx1200 with gfx12's -mattr."""
    return gfx11_asm.assemble(source, MCPU, gfx12.ISA.mattr)


def instructions(source: str) -> list[Instruction]:
    """The model's instructions, as amdgpu_models decodes them through llvm-mc -mcpu=gfx1200."""
    return gfx12.decode(assemble(source), 0, assembler(), MCPU)


def decoder(code: bytes, address: int) -> list[Instruction]:
    """The decoder a Runner takes, for gfx1200 code."""
    return gfx12.decode(code, address, assembler(), MCPU)


def run(source: str, sgpr: dict[int, int] | None = None, vgpr: dict[int, list[int] | int] | None = None,
        exec_mask: int = 0xFFFFFFFF, scc: bool = False, memory: Memory | None = None) -> Wave:
    """`source` assembled for gfx1200 and run on a fresh wave with the given registers (a VGPR: one value per
    lane or one for all lanes)."""
    return gfx11_asm.run_decoded(instructions(source + "\ns_endpgm"), sgpr, vgpr, exec_mask, scc, memory)
