"""RDNA4 (gfx12, wave32): the table of LLVM mnemonics the model runs, over the same shared semantics
(`amdgpu_models.core`) and the same LLVM decoding (`amdgpu_models.isa.operands`) as RDNA3's table.

What differs from gfx11, as LLVM's gfx12 disassembler names it:
- renamed operations the core already has (ALIASES): s_add_co_i32 is s_add_i32, s_sub_co_i32 s_sub_i32,
  s_sub_co_ci_u32 s_subb_u32, s_addk_co_i32 s_addk_i32, v_mad_co_u64_u32 v_mad_u64_u32, s_wait_alu
  s_waitcnt_depctr; and WMMA, whose gfx12 mnemonics are gfx11's but whose operand layout is RDNA4's (8 halves
  per lane: core.matrix_ops.RDNA4, the core's `..._gfx12` WMMA);
- operations only RDNA4 has here (ONLY): the split wait counters (s_wait_loadcnt, s_wait_dscnt, s_wait_kmcnt, ...:
  no effect in a model that completes every access at once), the split barrier (s_barrier_signal,
  s_barrier_wait), global_inv, SALU binary32 arithmetic, conversions and compares, 64-bit s_add_nc_u64 and
  s_mul_u64, s_load_b96, the pseudo-scalar v_s_sqrt_f32 / v_s_rcp_f32, IEEE 754-2019 maximumNumber
  (v_max_num_f32, v_max3_num_f32, v_dual_max_num_f32: gfx12 has no IEEE-mode v_max_f32);
- gfx11 names gfx12 does not print (GFX11_ONLY): s_waitcnt, s_barrier, buffer_gl0_inv, SOPK compares,
  v_max_f32 and its forms, the old names of the renamed operations;
- the objects are compiled with real true16 (16-bit operands in either half of a VGPR, `v12.h` / `v12.l`): LLVM
  decodes none of their 16-bit instructions without `+real-true16` (MATTR, read by farm/emulate/isa.py too);
- the workgroup ids are architected (ttmp9: x; ttmp7: y | z << 16; `core.kernel.Program.architected_workgroup_ids`),
  so the decoder lets a kernel read those two trap registers;
- global offsets are 24-bit signed.
"""

from __future__ import annotations

from pathlib import Path

from amdgpu_models.core import matrix_ops, scalar_ops
from amdgpu_models.core.instruction import Instruction
from amdgpu_models.isa import cdna, operands
from amdgpu_models.isa.operands import CORE, Isa

MCPU = "gfx12-generic"
MATTR = "+real-true16"
ALIASES = {"s_add_co_i32": "s_add_i32", "s_add_co_u32": "s_add_u32", "s_add_co_ci_u32": "s_addc_u32",
           "s_sub_co_i32": "s_sub_i32", "s_sub_co_ci_u32": "s_subb_u32", "s_addk_co_i32": "s_addk_i32",
           "v_mad_co_u64_u32": "v_mad_u64_u32", "s_wait_alu": "s_waitcnt_depctr",
           **{name.removesuffix("_gfx12"): name for name in matrix_ops.WMMA if name.endswith("_gfx12")}}
SALU_FLOAT = frozenset({"s_add_f32", "s_sub_f32", "s_mul_f32", "s_fmac_f32", "s_cvt_f32_i32", "s_cvt_f32_u32",
                        "s_cvt_u32_f32", *(name for name in scalar_ops.SOPC if name.endswith("_f32"))})
ONLY = frozenset({*(name for name in scalar_ops.NO_EFFECT if name.startswith("s_wait_")), "s_barrier_signal",
                  "s_barrier_wait", *SALU_FLOAT, *scalar_ops.SOP64, "s_load_b96", "global_inv",
                  *scalar_ops.PSEUDO_SCALAR, "v_max_num_f32", "v_max3_num_f32", "v_dual_max_num_f32",
                  *(name for name in matrix_ops.WMMA if name.endswith("_gfx12"))})
GFX11_ONLY = frozenset({"s_waitcnt", "s_waitcnt_vscnt", "s_barrier", "buffer_gl0_inv", "s_cmpk_lt_i32",
                        "s_set_inst_prefetch_distance", "v_max_f32", "v_max3_f32", "v_dual_max_f32",
                        *ALIASES.values()})
assert ONLY <= set(CORE) and GFX11_ONLY <= set(CORE)
ISA = Isa("gfx12 (RDNA4)", MCPU, lanes=32, mnemonics=frozenset(CORE) - GFX11_ONLY - cdna.CDNA_ONLY | set(ALIASES),
          aliases=ALIASES, flat_offset_bits=24, mattr=MATTR, ttmps=frozenset({7, 9}))
SEMANTICS = {name: ISA.semantics(name) for name in ISA.mnemonics}  # LLVM mnemonic -> (core name, kind)


def decode(code: bytes, address: int, llvm_mc: Path, mcpu: str = MCPU) -> list[Instruction]:
    """Every instruction of `code` (loaded at `address`) as the model runs it (see operands.decode)."""
    return operands.decode(ISA, code, address, llvm_mc, mcpu)
