"""RDNA3 (gfx11, wave32): the table of LLVM mnemonics the model runs, each by the shared semantics of the same
name (`amdgpu_models.core`), decoded through LLVM (`amdgpu_models.isa.operands`).

Per-ISA differences live in tables like this one: an RDNA4 (gfx12) table names its own mnemonics (and aliases
for operations the core already has under another name) over the same core and the same decoder.
"""

from __future__ import annotations

from pathlib import Path

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.isa import cdna, gfx12, operands
from amdgpu_models.isa.operands import CORE, Isa

MCPU = "gfx11-generic"
ISA = Isa("gfx11 (RDNA3)", MCPU, lanes=32, mnemonics=frozenset(CORE) - gfx12.ONLY - cdna.CDNA_ONLY,
          flat_offset_bits=13)
SEMANTICS = {name: CORE[name] for name in ISA.mnemonics}  # LLVM mnemonic -> which semantics run it


def decode(code: bytes, address: int, llvm_mc: Path, mcpu: str = MCPU) -> list[Instruction]:
    """Every instruction of `code` (loaded at `address`) as the model runs it (see operands.decode)."""
    return operands.decode(ISA, code, address, llvm_mc, mcpu)
