"""gfx950 (CDNA4, wave64): the CDNA table (amdgpu_models/isa/cdna.py) for -mcpu=gfx950."""

from __future__ import annotations

from pathlib import Path

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.isa import cdna

MCPU = "gfx950"
ISA = cdna.ISAS[MCPU]


def decode(code: bytes, address: int, llvm_mc: Path, mcpu: str = MCPU) -> list[Instruction]:
    return cdna.decode(ISA, code, address, llvm_mc, mcpu)
