"""amdgpu_models/isa/gfx11.py: each form's operands, from the MCInst LLVM's disassembler decodes for instructions
LLVM's assembler encoded (the fields the shared semantics read)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gfx11_asm import instructions

from amdgpu_models.core.instruction import Fields
from amdgpu_models.core.wave import NULL, VGPR_BASE
from amdgpu_models.disasm import Undecodable

V = VGPR_BASE
VCC_LO, S_LITERAL = 106, 255


def one(line: str) -> Fields:
    """The fields, literal values aside (test_literals checks those)."""
    (inst,) = instructions(line)
    return replace(inst.fields, lits=(), lits_y=())


def test_literals() -> None:
    (inst,) = instructions("v_mov_b32 v7, 0x3f800001")
    assert (inst.fields.src, inst.fields.lits) == ((S_LITERAL,), (0x3F800001,))
    (inst,) = instructions("v_fma_f32 v1, 1.0, v2, 0x40490fdb")  # a float inline constant: LLVM gives its bits
    assert (inst.fields.src, inst.fields.lits) == ((S_LITERAL, V + 2, S_LITERAL), (0x3F800000, None, 0x40490FDB))
    (inst,) = instructions("v_dual_mov_b32 v3, 0x1234 :: v_dual_add_f32 v8, 0x1234, v4")
    assert (inst.fields.lits, inst.fields.lits_y) == ((0x1234,), (0x1234, None))
    (inst,) = instructions("s_add_u32 s5, s6, -3")
    assert (inst.fields.src, inst.fields.lits) == ((6, 192 + 3), (None, None))


def test_scalar_formats() -> None:
    assert one("s_add_u32 s5, s6, 7") == Fields(dst=5, src=(6, 128 + 7))
    assert one("s_mov_b32 s9, vcc_lo") == Fields(dst=9, src=(VCC_LO,))
    assert one("s_cmp_lt_i32 s3, -2") == Fields(src=(3, 194))
    assert one("s_movk_i32 s4, 0x1234") == Fields(dst=4, imm=0x1234)
    assert one("s_cbranch_scc1 5").imm == 5
    assert one("s_load_b128 s[8:11], s[2:3], 0x28") == Fields(dst=8, base=2, imm=0x28, soffset=NULL)
    assert one("s_load_b32 s8, s[0:1], -0x10").imm == -0x10


def test_vector_formats() -> None:
    assert one("v_mul_f32 v1, s2, v3") == Fields(dst=1, src=(2, V + 3))
    assert one("v_mov_b32 v7, 0x3f800001").src == (S_LITERAL,)
    assert one("v_cmp_lt_f32 vcc_lo, v4, v5") == Fields(src=(V + 4, V + 5))
    f = one("v_fma_f32 v1, -v2, |v3|, s4 clamp mul:2")
    assert (f.dst, f.src, f.neg, f.abs, f.clamp, f.omod) == (1, (V + 2, V + 3, 4), 0b001, 0b010, True, 1)
    f = one("v_div_scale_f32 v5, vcc_lo, v6, v7, v6")
    assert (f.dst, f.sdst, f.src, f.abs, f.opsel) == (5, VCC_LO, (V + 6, V + 7, V + 6), 0, 0)
    f = one("v_cmp_gt_f32_e64 s12, v1, -v2")
    assert (f.sdst, f.src[:2], f.neg) == (12, (V + 1, V + 2), 0b010)
    f = one("v_fma_mix_f32 v1, v2, -v3, v4 op_sel:[1,0,0] op_sel_hi:[1,1,0]")
    assert (f.dst, f.src, f.opsel, f.opsel_hi, f.neg) == (1, (V + 2, V + 3, V + 4), 0b001, 0b011, 0b010)
    f = one("v_dual_fmac_f32 v10, v11, v12 :: v_dual_mul_f32 v13, s14, v15")
    assert (f.dst, f.src, f.dst_y, f.src_y) == (10, (V + 11, V + 12), 13, (14, V + 15))
    f = one("v_dual_mov_b32 v3, v1 :: v_dual_add_f32 v8, v2, v4")
    assert (f.dst, f.src[0], f.dst_y, f.src_y) == (3, V + 1, 8, (V + 2, V + 4))


def test_memory_formats() -> None:
    f = one("ds_load_2addr_b32 v[2:3], v4 offset0:3 offset1:7")
    assert (f.dst, f.addr, f.offsets) == (2, 4, (3, 7))
    f = one("ds_store_b32 v9, v10 offset:64")
    assert (f.addr, f.data[0], f.offsets[0] | f.offsets[1] << 8) == (9, 10, 64)
    f = one("buffer_load_b128 v[4:7], v8, s[12:15], s3 offen offset:16")
    assert (f.dst, f.addr, f.base, f.soffset, f.imm, f.offen, f.idxen) == (4, 8, 12, 3, 16, True, False)
    f = one("buffer_store_b16 v5, v6, s[16:19], 0 offen")
    assert (f.data, f.addr, f.base, f.soffset, f.offen) == ((5,), 6, 16, 128, True)
    f = one("global_store_b32 v1, v2, s[4:5] offset:-8")
    assert (f.addr, f.data, f.base, f.imm) == (1, (2,), 4, -8)


def test_operands_the_model_does_not_know_stop_decoding_at_their_address() -> None:
    with pytest.raises(Undecodable, match=r"at 0x4 .*trap register TTMP0"):  # a trap register is not the kernel's
        instructions("s_nop 0\ns_mov_b32 s0, ttmp0")
