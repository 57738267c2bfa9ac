"""gfx942 (CDNA3, wave64): only the plain VALU operations whose semantics the shared core already has, so that
the core's wave64 (64 lanes, EXEC and VCC as register pairs) runs on code LLVM assembles for a wave64 target.
This is not a CDNA model: no MFMA, no AGPRs, no CDNA memory or scalar forms, and the launch (Runner) still
refuses wave64 kernels. LLVM's gfx9 names differ from gfx11's for some operations (`v_add_u32` is the core's
`v_add_nc_u32`): the aliases say so.
"""

from __future__ import annotations

from pathlib import Path

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.isa import operands
from amdgpu_models.isa.operands import Isa

MCPU = "gfx942"
ALIASES = {"v_add_u32": "v_add_nc_u32"}
VALU = frozenset({"v_mov_b32", "v_add_f32", "v_sub_f32", "v_mul_f32", "v_fma_f32", "v_fmac_f32", "v_and_b32",
                  "v_or_b32", "v_lshlrev_b32", "v_lshrrev_b32", "v_cndmask_b32", "v_cmp_lt_f32", "v_cmp_gt_f32",
                  "v_cmp_eq_u32", "v_cvt_f32_i32", "v_add_u32"})
ISA = Isa("gfx942 (CDNA3 wave64, plain VALU only)", MCPU, lanes=64, mnemonics=VALU | {"s_endpgm", "s_nop"},
          aliases=ALIASES, flat_offset_bits=13, vop3_without_suffix=True)


def decode(code: bytes, address: int, llvm_mc: Path, mcpu: str = MCPU) -> list[Instruction]:
    return operands.decode(ISA, code, address, llvm_mc, mcpu)
