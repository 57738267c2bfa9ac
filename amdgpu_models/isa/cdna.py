"""CDNA (GFX9, wave64): one table of LLVM mnemonics for gfx90a (CDNA2), gfx942 (CDNA3) and gfx950 (CDNA4), over
the same shared semantics (`amdgpu_models.core`) and LLVM decoding (`amdgpu_models.isa.operands`) as RDNA's
tables. The three targets differ only by the small ONLY sets below; each has its module (gfx90a.py, gfx942.py,
gfx950.py) with its `decode`.

What differs from RDNA3, as LLVM's gfx9 disassembler names and encodes it:
- GFX9 names for operations the core has under RDNA's names (ALIASES): memory by dwords (buffer_load_dword,
  global_store_dwordx4, s_load_dwordx8, ds_read_b32, ds_write2_b32, ds_read2st64_b32, ...), v_add_u32 (the core's
  v_add_nc_u32), v_addc_co_u32 (v_add_co_ci_u32), s_andn2_b64 (s_and_not1_b64);
- VOP3-only opcodes carry no _e64 in LLVM's names (Isa.vop3_without_suffix); SDWA (the `_sdwa` forms, whose
  word and dword selects the decoder turns into op_sel) and GFX9's DPP controls (wave shifts and rotates,
  row_bcast:15/31: core.wave.dpp_lanes);
- buffers: GFX9's range check (Isa.gfx9_buffers, core.memory_ops): no OOB_SELECT, soffset not counted;
- a wave64 wave: EXEC and VCC are register pairs, and the 64-bit scalar mask operations (s_and_saveexec_b64,
  s_cselect_b64, ...) work on them; the workgroup ids are system SGPRs after the user SGPRs (no architected ids);
- v_cmpx_* also writes VCC (or its SGPR pair) on GFX9, which the core's RDNA v_cmpx does not: refused here
  (not in the table) until modelled.
"""

from __future__ import annotations

from pathlib import Path

from amdgpu_models.core import matrix_ops, scalar_ops
from amdgpu_models.core.instruction import Instruction
from amdgpu_models.isa import operands
from amdgpu_models.isa.operands import CORE, Isa

_DWORDS = {"dword": "b32", "dwordx2": "b64", "dwordx4": "b128"}
ALIASES = {
    **{f"{space}_{kind}_{size}": f"{space}_{kind}_{core}" for space in ("buffer", "global")
       for kind in ("load", "store") for size, core in _DWORDS.items()},
    "buffer_load_ushort": "buffer_load_u16", "buffer_store_short": "buffer_store_b16",
    "s_load_dword": "s_load_b32", "s_load_dwordx2": "s_load_b64", "s_load_dwordx4": "s_load_b128",
    "s_load_dwordx8": "s_load_b256", "s_load_dwordx16": "s_load_b512",
    "ds_read_b32": "ds_load_b32", "ds_read_b64": "ds_load_b64", "ds_read_b96": "ds_load_b96",
    "ds_read_b128": "ds_load_b128", "ds_read2_b32": "ds_load_2addr_b32",
    "ds_read2st64_b32": "ds_load_2addr_stride64_b32", "ds_write_b32": "ds_store_b32", "ds_write_b64": "ds_store_b64",
    "ds_write_b128": "ds_store_b128", "ds_write2_b32": "ds_store_2addr_b32", "ds_write2_b64": "ds_store_2addr_b64",
    "ds_write_b16": "ds_store_b16", "ds_write_b16_d16_hi": "ds_store_b16_d16_hi",
    "s_andn2_b64": "s_and_not1_b64", "s_andn2_b32": "s_and_not1_b32",
    "v_add_u32": "v_add_nc_u32", "v_sub_u32": "v_sub_nc_u32", "v_subrev_u32": "v_subrev_nc_u32",
    "v_addc_co_u32": "v_add_co_ci_u32", "v_subb_co_u32": "v_sub_co_ci_u32",
    # GFX9's 16-bit results zero-extended (core/vector_ops.py), ds_read2_b64
    "v_mul_lo_u16": "v_mul_lo_u16_gfx9", "v_lshrrev_b16": "v_lshrrev_b16_gfx9", "ds_read2_b64": "ds_load_2addr_b64",
}
# Core names GFX9 does not have (RDNA's), or has with other semantics
RDNA_ONLY = frozenset({
    *(name for name in CORE if name.startswith(("v_dual_", "s_wait_", "v_cmpx_", "v_s_"))),
    *matrix_ops.WMMA, *scalar_ops.SOP64, "s_and_saveexec_b32", "s_sendmsg", "s_barrier_signal", "s_barrier_wait",
    "s_waitcnt_vscnt", "s_waitcnt_depctr", "s_delay_alu", "s_clause", "s_set_inst_prefetch_distance", "s_code_end",
    "buffer_gl0_inv", "global_inv", "v_permlanex16_b32", "v_max_num_f32", "v_max3_num_f32", "s_load_b96",
    "s_add_f32", "s_sub_f32", "s_mul_f32", "s_fmac_f32", "s_cvt_f32_i32", "s_cvt_f32_u32", "s_cvt_u32_f32",
    *(name for name in scalar_ops.SOPC if name.endswith("_f32")),
    "v_mov_b16", "v_cvt_u32_u16", "v_and_b16", "v_or_b16", "v_lshrrev_b16", "v_mul_lo_u16", "v_sub_nc_u16",
    *ALIASES.values(),
})
# MFMA (core/matrix_ops.py): the core names them as gfx942 and gfx950 print them; gfx90a prints the same four
# operations under older names (GFX90A_MFMA); the double-K forms are gfx950's
GFX90A_MFMA = matrix_ops.GFX90A_SPELLINGS
GFX940_ONLY = frozenset({"v_mov_b64", *matrix_ops.CDNA3})  # gfx942 and gfx950, not gfx90a
GFX950_ONLY = frozenset({*matrix_ops.CDNA4_ONLY,
                         "v_cvt_pk_f16_f32", "v_cvt_pk_bf16_f32", "v_permlane16_swap_b32", "v_permlane32_swap_b32"})
# Core operations no RDNA target has, which the RDNA tables (isa/gfx11.py, isa/gfx12.py) leave out
CDNA_ONLY = frozenset({*GFX940_ONLY, *GFX950_ONLY, *GFX90A_MFMA.values(), "v_accvgpr_read_b32",
                       "v_accvgpr_write_b32", "v_accvgpr_mov_b32", "v_pk_add_f32", "v_pk_mul_f32", "v_pk_fma_f32",
                       "v_pk_mov_b32", "v_sub_u16", "v_mul_lo_u16_gfx9", "v_lshrrev_b16_gfx9"})
assert RDNA_ONLY <= set(CORE) and GFX940_ONLY | GFX950_ONLY | CDNA_ONLY <= set(CORE)
_COMMON = frozenset(CORE) - RDNA_ONLY - GFX940_ONLY - GFX950_ONLY | set(ALIASES)


def _isa(mcpu: str, name: str, only: frozenset[str], aliases: dict[str, str] | None = None) -> Isa:
    return Isa(f"{mcpu} ({name}, wave64)", mcpu, lanes=64, mnemonics=_COMMON | only, aliases=aliases or ALIASES,
               flat_offset_bits=13, vop3_without_suffix=True, gfx9_buffers=True)


ISAS = {"gfx90a": _isa("gfx90a", "CDNA2", frozenset(GFX90A_MFMA), ALIASES | GFX90A_MFMA),
        "gfx942": _isa("gfx942", "CDNA3", GFX940_ONLY),
        "gfx950": _isa("gfx950", "CDNA4", GFX940_ONLY | GFX950_ONLY)}


def decode(isa: Isa, code: bytes, address: int, llvm_mc: Path, mcpu: str = "") -> list[Instruction]:
    """Every instruction of `code` (loaded at `address`) as the model runs it (see operands.decode)."""
    return operands.decode(isa, code, address, llvm_mc, mcpu)
