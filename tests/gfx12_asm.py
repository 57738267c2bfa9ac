"""Small gfx12 programs assembled by LLVM's own assembler (llvm-mc -mcpu=gfx1200 with the objects' real true16,
beside the pinned llvm-objdump), for the RDNA4 model's unit tests: the bytes come from LLVM, never from the model
under test."""

from __future__ import annotations

import io
import subprocess

import numpy as np
from elftools.elf.elffile import ELFFile
from gfx11_asm import assembler

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Wave
from amdgpu_models.isa import gfx12

MCPU = "gfx1200"


def assemble(source: str) -> bytes:
    """The .text bytes of `source` (one instruction per line) assembled for gfx1200 with gfx12's -mattr."""
    proc = subprocess.run([str(assembler()), "-arch=amdgcn", f"-mcpu={MCPU}", f"-mattr={gfx12.ISA.mattr}",
                           "-filetype=obj", "-o", "-"], input=source.encode(), capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return ELFFile(io.BytesIO(proc.stdout)).get_section_by_name(".text").data()


def instructions(source: str) -> list[Instruction]:
    """The model's instructions, as amdgpu_models decodes them through llvm-mc -mcpu=gfx1200."""
    return gfx12.decode(assemble(source), 0, assembler(), MCPU)


def decoder(code: bytes, address: int) -> list[Instruction]:
    """The decoder a Runner takes, for gfx1200 code."""
    return gfx12.decode(code, address, assembler(), MCPU)


def run(source: str, sgpr: dict[int, int] | None = None, vgpr: dict[int, list[int] | int] | None = None,
        exec_mask: int = 0xFFFFFFFF, scc: bool = False, memory: Memory | None = None) -> Wave:
    """`source` assembled and run on a fresh wave with the given registers (a VGPR: one value per lane or one
    for all lanes)."""
    wave = Wave()
    wave.sgpr[126] = exec_mask
    wave.scc = scc
    for reg, value in (sgpr or {}).items():
        wave.sgpr[reg] = value & 0xFFFFFFFF
    for reg, values in (vgpr or {}).items():
        wave.vgpr[reg] = np.array(values, dtype=np.uint64).astype(np.uint32) if isinstance(values, list) \
            else values & 0xFFFFFFFF
    run_program(wave, instructions(source + "\ns_endpgm"), memory or Memory(), Lds.of_size(0))
    return wave
