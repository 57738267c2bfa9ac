"""Small CDNA programs (gfx90a, gfx942, gfx950) assembled by LLVM's own assembler (llvm-mc beside the pinned
llvm-objdump), decoded by the CDNA tables and run on a wave64, for the CDNA model's unit tests: the bytes come
from LLVM, never from the model under test."""

from __future__ import annotations

import gfx11_asm
import numpy as np
from gfx11_asm import assembler

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Wave
from amdgpu_models.isa import cdna

MCPUS = ("gfx90a", "gfx942", "gfx950")
LANES = 64
ALL = (1 << LANES) - 1


def instructions(source: str, mcpu: str = "gfx942") -> list[Instruction]:
    """The model's instructions, as the CDNA table of `mcpu` decodes LLVM's assembly of `source`."""
    return cdna.decode(cdna.ISAS[mcpu], gfx11_asm.assemble(source, mcpu), 0, assembler(), mcpu)


def run(source: str, mcpu: str = "gfx942", sgpr: dict[int, int] | None = None,
        vgpr: dict[int, list[int] | np.ndarray | int] | None = None, exec_mask: int = ALL, scc: bool = False,
        memory: Memory | None = None, lds: Lds | None = None) -> Wave:
    """`source` assembled for `mcpu` and run on a fresh wave64 with the given registers (an SGPR value of 64
    bits fills the pair from that register; a VGPR: one value per lane or one for all lanes)."""
    wave = Wave(lanes=LANES)
    wave.write_mask(126, exec_mask)
    wave.scc = scc
    for reg, value in (sgpr or {}).items():
        wave.sgpr[reg] = value & 0xFFFFFFFF
        if value >> 32:
            wave.sgpr[reg + 1] = value >> 32
    for reg, values in (vgpr or {}).items():
        wave.vgpr[reg] = np.asarray(values, dtype=np.uint64).astype(np.uint32) if not isinstance(values, int) \
            else values & 0xFFFFFFFF
    run_program(wave, instructions(source + "\ns_endpgm", mcpu), memory or Memory(), lds or Lds.of_size(0))
    return wave


def pair(wave: Wave, reg: int) -> int:
    """An SGPR pair as one 64-bit value."""
    return int(wave.sgpr[reg]) | int(wave.sgpr[reg + 1]) << 32
