"""The RDNA4 (gfx12) model: amdgpu_models/isa/gfx12.py's table over the shared core. Programs are assembled by
llvm-mc -mcpu=gfx1200 with the objects' real true16 (tests/gfx12_asm.py); every expected value is worked out here
from the documented semantics (binary32/binary16 bit patterns by hand, 32/64-bit wrap, SCC), never from the model.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from gfx11_asm import instructions as gfx11_instructions
from gfx11_asm import launch_with_output
from gfx12_asm import assemble, decoder, instructions, run

from amdgpu_models.core.instruction import Fields
from amdgpu_models.core.kernel import Descriptor, Kernel, Program
from amdgpu_models.core.memory import Memory
from amdgpu_models.core.wave import NULL, TTMP_FIRST, VGPR_BASE, Unsupported
from amdgpu_models.core.workgroup import Runner
from amdgpu_models.disasm import Undecodable
from amdgpu_models.isa import gfx11, gfx12
from farm.emulate.isa import MATTR

V = VGPR_BASE
M32 = 0xFFFFFFFF
NAN = 0x7FC00000
ONE, TWO = 0x3F800000, 0x40000000


def one(line: str) -> Fields:
    (inst,) = instructions(line)
    return replace(inst.fields, lits=(), lits_y=())


# -- the table and decoding ----------------------------------------------------------------------------------

def test_the_true16_attribute_is_said_once_in_the_gfx12_table() -> None:
    assert gfx12.ISA.mattr == "+real-true16" and MATTR == {"gfx12-generic": gfx12.ISA.mattr}
    assert gfx11.ISA.mattr == "" and not gfx11.ISA.ttmps
    # renamed operations run the core's semantics of the old name; gfx11 keeps its own names
    assert gfx12.ISA.semantics("s_add_co_i32") == ("s_add_i32", "scalar")
    assert gfx12.ISA.semantics("s_wait_alu") == ("s_waitcnt_depctr", "scalar")
    assert gfx12.ISA.semantics("s_waitcnt") is None and gfx12.ISA.semantics("buffer_gl0_inv") is None
    assert gfx11.ISA.semantics("s_wait_loadcnt") is None and gfx11.ISA.semantics("s_add_i32") is not None


def test_true16_operands_name_their_half() -> None:
    f = one("v_mov_b16_e64 v134.h, 0 op_sel:[0,1]")  # the op_sel operand is not a clamp
    assert (f.dst, f.src, f.opsel, f.clamp) == (134, (128,), 0b1000, False)
    f = one("v_cvt_f32_f16_e32 v54, v69.h")
    assert (f.dst, f.src, f.opsel) == (54, (V + 69,), 0b0001)
    f = one("v_cvt_f16_f32_e32 v0.l, v7")
    assert (f.dst, f.src, f.opsel) == (0, (V + 7,), 0)
    f = one("v_cvt_f16_f32_e64 v3.h, -v1")
    assert (f.dst, f.src, f.opsel, f.neg, f.clamp, f.omod) == (3, (V + 1,), 0b1000, 0b1, False, 0)
    f = one("v_cvt_f16_f32_e64 v3.l, v1 mul:2")  # clamp and omod follow the source, as in any VOP3
    assert (f.dst, f.opsel, f.clamp, f.omod) == (3, 0, False, 1)


def test_gfx12_memory_and_scalar_forms() -> None:
    assert one("s_load_b96 s[8:10], s[0:1], 0x28") == Fields(dst=8, base=0, imm=0x28, soffset=NULL)
    assert one("s_load_b32 s16, s[0:1], -0x30").imm == -0x30
    f = one("buffer_load_b128 v[10:13], v10, s[0:3], null offen offset:16")
    assert (f.dst, f.addr, f.base, f.soffset, f.imm, f.offen) == (10, 10, 0, NULL, 16, True)
    f = one("global_store_b32 v2, v1, s[4:5] offset:-0x800000")  # 24-bit signed offsets
    assert (f.addr, f.data, f.base, f.imm) == (2, (1,), 4, -0x800000)
    assert one("global_store_b32 v2, v1, s[4:5] offset:0x7ffff0").imm == 0x7FFFF0
    assert one("global_inv scope:SCOPE_SE") == Fields()
    assert one("s_add_f32 s4, s4, s7") == Fields(dst=4, src=(4, 7))
    assert one("s_fmac_f32 s15, s18, s10") == Fields(dst=15, src=(18, 10, 15))  # the tied addend last
    f = one("v_s_sqrt_f32 s10, -|s7|")
    assert (f.dst, f.src, f.neg, f.abs) == (10, (7,), 1, 1)


def test_only_the_architected_workgroup_id_registers_are_read() -> None:
    assert one("s_mov_b32 s4, ttmp9") == Fields(dst=4, src=(TTMP_FIRST + 9,))
    assert one("s_and_b32 s5, ttmp7, 0xffff").src[0] == TTMP_FIRST + 7
    with pytest.raises(Undecodable, match=r"at 0x4 .*trap register TTMP0"):
        instructions("s_nop 0\ns_mov_b32 s0, ttmp0")
    with pytest.raises(Undecodable, match="trap register TTMP9"):  # gfx11 has no architected ids
        gfx11_instructions("s_mov_b32 s4, ttmp9")


# -- scalar --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "a", "b", "scc_in", "want", "scc"), [
    ("s_add_co_i32", 0x7FFFFFFF, 1, False, 0x80000000, True),  # s_add_i32: SCC the signed overflow
    ("s_add_co_i32", -3 & M32, 1, True, -2 & M32, False),
    ("s_add_co_u32", M32, 2, False, 1, True),  # s_add_u32: SCC the carry
    ("s_add_co_ci_u32", 1, 1, True, 3, False),  # s_addc_u32: + SCC
    ("s_sub_co_ci_u32", 5, 3, True, 1, False),  # s_subb_u32: - SCC, SCC the borrow
    ("s_sub_co_ci_u32", 0, 0, True, M32, True),
])
def test_renamed_integer_operations(line: str, a: int, b: int, scc_in: bool, want: int, scc: bool) -> None:
    wave = run(f"{line} s2, s0, s1", sgpr={0: a, 1: b}, scc=scc_in)
    assert (int(wave.sgpr[2]), wave.scc) == (want, scc)


@pytest.mark.parametrize(("line", "a", "b", "want"), [
    ("s_add_f32", 0x3FC00000, 0x40100000, 0x40700000),  # 1.5 + 2.25 = 3.75
    ("s_sub_f32", 0x3FC00000, 0x40100000, 0xBF400000),  # 1.5 - 2.25 = -0.75
    ("s_mul_f32", 0x3FC00000, 0x40100000, 0x40580000),  # 1.5 * 2.25 = 3.375
    ("s_add_f32", 0x00000001, 0x00000001, 0x00000002),  # denormals kept: 2 * 2^-149
    ("s_mul_f32", 0x3F800001, 0x3F800001, 0x3F800002),  # (1+2^-23)^2 = 1 + 2^-22 + 2^-46: rounds down
])
def test_salu_binary32(line: str, a: int, b: int, want: int) -> None:
    wave = run(f"{line} s2, s0, s1", sgpr={0: a, 1: b}, scc=True)
    assert int(wave.sgpr[2]) == want and wave.scc  # SCC untouched


def test_salu_fmac_rounds_once_and_cvt_rounds_to_nearest_even() -> None:
    # (1 + 2^-12)^2 - (1 + 2^-11) = 2^-24 exactly; rounding the product first would give 1 + 2^-11, then 0
    wave = run("s_fmac_f32 s2, s0, s1", sgpr={0: 0x3F800800, 1: 0x3F800800, 2: 0xBF801000})
    assert int(wave.sgpr[2]) == 0x33800000
    wave = run("s_cvt_f32_i32 s2, s0\ns_cvt_f32_i32 s3, s1", sgpr={0: -7 & M32, 1: 16777217})
    assert [int(v) for v in wave.sgpr[2:4]] == [0xC0E00000, 0x4B800000]  # -7.0; 2^24 + 1 ties to 2^24


@pytest.mark.parametrize(("line", "a", "b", "scc"), [
    ("s_cmp_lt_f32", ONE, TWO, True), ("s_cmp_lt_f32", NAN, TWO, False), ("s_cmp_ge_f32", ONE, TWO, False),
    ("s_cmp_gt_f32", TWO, ONE, True), ("s_cmp_le_f32", ONE, ONE, True), ("s_cmp_le_f32", ONE, NAN, False),
    ("s_cmp_eq_f32", 0x80000000, 0, True),  # -0 == +0
    ("s_cmp_lg_f32", NAN, ONE, False), ("s_cmp_lg_f32", TWO, ONE, True),
    ("s_cmp_neq_f32", NAN, NAN, True), ("s_cmp_neq_f32", ONE, ONE, False),
    ("s_cmp_o_f32", NAN, ONE, False), ("s_cmp_o_f32", ONE, ONE, True), ("s_cmp_u_f32", ONE, NAN, True),
])
def test_salu_binary32_compares(line: str, a: int, b: int, scc: bool) -> None:
    assert run(f"{line} s0, s1", sgpr={0: a, 1: b}, scc=not scc).scc == scc


@pytest.mark.parametrize("scc", [False, True])
def test_64_bit_add_and_multiply_leave_scc(scc: bool) -> None:
    wave = run("s_add_nc_u64 s[4:5], s[0:1], s[2:3]\ns_mul_u64 s[6:7], s[8:9], s[8:9]\n"
               "s_add_nc_u64 s[10:11], s[12:13], s[2:3]",
               sgpr={0: M32, 1: 0, 2: 1, 3: 0, 8: 1, 9: 1, 12: M32, 13: M32}, scc=scc)
    assert [int(v) for v in wave.sgpr[4:8]] == [0, 1, 1, 2]  # carry into the high word; (2^32+1)^2 mod 2^64
    assert [int(v) for v in wave.sgpr[10:12]] == [0, 0] and wave.scc == scc  # 2^64 - 1 + 1 wraps


def test_pseudo_scalar_square_root_and_reciprocal() -> None:
    wave = run("v_s_sqrt_f32 s2, s0\nv_s_sqrt_f32 s3, |s1|\nv_s_rcp_f32 s4, -s5",
               sgpr={0: 0x40100000, 1: 0xC0800000, 5: 0x40800000})
    assert [int(v) for v in wave.sgpr[2:5]] == [0x3FC00000, 0x40000000, 0xBE800000]  # 1.5, sqrt|-4|, -1/4


PACING = """s_wait_loadcnt 0x0
s_wait_storecnt 0x0
s_wait_dscnt 0x0
s_wait_kmcnt 0x0
s_wait_loadcnt_dscnt 0x0
s_wait_storecnt_dscnt 0x0
s_wait_samplecnt 0x0
s_wait_bvhcnt 0x0
s_wait_expcnt 0x0
s_wait_alu depctr_sa_sdst(0)
global_inv scope:SCOPE_SE"""


def test_split_wait_counters_and_cache_invalidates_change_nothing() -> None:
    wave = run(PACING, sgpr={i: 1000 + i for i in range(20)}, vgpr={0: list(range(32))}, scc=True)
    assert [int(v) for v in wave.sgpr[:20]] == [1000 + i for i in range(20)]
    assert wave.vgpr[0].tolist() == list(range(32)) and not wave.vgpr[1:].any() and wave.scc


# -- true16 --------------------------------------------------------------------------------------------------

def test_sixteen_bit_moves_write_only_their_half() -> None:
    wave = run("v_mov_b16_e32 v1.h, 0x1234\nv_mov_b16_e32 v2.l, v3.h\nv_mov_b16_e64 v4.h, 0 op_sel:[0,1]\n"
               "v_mov_b16_e32 v5.l, s0",
               sgpr={0: 0xCAFE7777}, vgpr={1: 0xAAAA5555, 2: 0x11112222, 3: 0xBEEF0000, 4: M32, 5: 0x99998888})
    assert [int(wave.vgpr[r][0]) for r in (1, 2, 4, 5)] == [0x12345555, 0x1111BEEF, 0x0000FFFF, 0x99997777]


def test_half_conversions_read_and_write_the_named_half() -> None:
    # v5: high half 1.0 (0x3c00), low half -2.0 (0xc000)
    wave = run("v_cvt_f32_f16_e32 v4, v5.h\nv_cvt_f32_f16_e32 v6, v5.l\nv_cvt_f16_f32_e32 v7.l, v8\n"
               "v_cvt_f16_f32_e64 v9.h, v8\nv_cvt_f16_f32_e32 v10.l, v11\nv_cvt_f16_f32_e32 v10.h, v12",
               vgpr={5: 0x3C00C000, 7: 0x12345678, 8: 0x3F000000, 9: 0x12345678, 11: 0x3F801000,
                     12: 0x3F803000})
    assert [int(wave.vgpr[r][0]) for r in (4, 6, 7, 9)] == [ONE, 0xC0000000, 0x12343800, 0x38005678]
    # 1 + 2^-11 is halfway between binary16 1.0 and 1 + 2^-10: to even, 0x3c00; 1 + 3*2^-11 to 1 + 2^-9, 0x3c02
    assert int(wave.vgpr[10][0]) == 0x3C023C00


# -- memory and the launch -----------------------------------------------------------------------------------

def test_scalar_loads_of_three_dwords_and_a_buffer_and_a_global_access() -> None:
    memory = Memory()
    data = memory.allocate("data", np.arange(100, 164, dtype=np.uint32).tobytes())
    out = memory.allocate("out", bytes(128))
    raw_word3 = 0x31027000  # OOB_SELECT 3 (raw)
    wave = run("s_load_b96 s[8:10], s[0:1], 0x8\nbuffer_load_b32 v1, v0, s[4:7], null offen offset:8\n"
               "global_store_b32 v0, v1, s[2:3] offset:0",
               sgpr={0: data & M32, 1: data >> 32, 2: out & M32, 3: out >> 32, 4: data & M32, 5: data >> 32,
                     6: 40, 7: raw_word3},
               vgpr={0: (np.arange(32) * 4).tolist()}, memory=memory)
    assert [int(v) for v in wave.sgpr[8:11]] == [102, 103, 104]
    lane = np.arange(32)
    want = np.where(4 * lane + 8 + 4 <= 40, 102 + lane, 0)  # NUM_RECORDS 40: dwords 2..9 are inside
    assert wave.vgpr[1].tolist() == want.tolist() and memory.contents(out).view(np.uint32).tolist() == want.tolist()


def _kernel(source: str, lds_bytes: int, size: int, target: str = "amdgcn-amd-amdhsa--gfx1200",
            ) -> tuple[Program, Kernel]:
    """A hand-made gfx12 descriptor: kernarg pointer in s[0:1], workgroup ids x and y enabled, 16 VGPRs,
    wave32, round to nearest even with denormals kept; GFX12's IEEE_MODE bit is reserved (0)."""
    rsrc1 = 1 | 0xF << 16
    rsrc2 = 2 << 1 | 1 << 7 | 1 << 8
    descriptor = Descriptor(lds_bytes, 0, 16, 0, rsrc1, rsrc2, 0, 1 << 3 | 1 << 10)
    kernel = Kernel("k", 0, descriptor, (), (size, 1, 1), 32)
    return Program(target, assemble(source), 0, {"k": kernel}), kernel


BARRIER_KERNEL = """s_load_b64 s[4:5], s[0:1], 0x0
v_lshlrev_b32 v1, 2, v0
ds_store_b32 v1, v0
s_wait_dscnt 0x0
s_barrier_signal -1
s_barrier_wait 0xffff
ds_load_b32 v2, v1 offset:128
s_wait_kmcnt 0x0
s_wait_dscnt 0x0
global_store_b32 v1, v2, s[4:5]
s_endpgm"""  # lane i of wave 0 reads what lane i of wave 1 stored before the barrier


def test_waves_meet_at_the_split_barrier() -> None:
    program, kernel = _kernel(BARRIER_KERNEL, 512, 64)
    memory, out = launch_with_output(program, kernel, decoder, (1, 1, 1), (64, 1, 1), 4 * 64)
    assert memory.contents(out).view(np.uint32).tolist() == list(range(32, 64)) + [0] * 32
    unsignalled = BARRIER_KERNEL.replace("s_barrier_signal -1\n", "")
    program, kernel = _kernel(unsignalled, 512, 64)
    with pytest.raises(Unsupported, match="without this wave's s_barrier_signal"):
        launch_with_output(program, kernel, decoder, (1, 1, 1), (64, 1, 1), 4 * 64)


WORKGROUP_IDS = """s_load_b64 s[4:5], s[0:1], 0x0
s_and_b32 s7, ttmp7, 0xffff
s_mul_i32 s7, s7, 3
s_lshr_b32 s8, ttmp7, 16
s_mul_i32 s8, s8, 6
s_add_co_i32 s6, ttmp9, s7
s_add_co_i32 s6, s6, s8
s_lshl_b32 s6, s6, 3
v_mov_b32 v3, s6
v_mov_b32 v1, ttmp9
v_mov_b32 v2, ttmp7
s_wait_kmcnt 0x0
global_store_b32 v3, v1, s[4:5]
global_store_b32 v3, v2, s[4:5] offset:4
s_endpgm"""  # group (x, y, z) of a 3 x 2 x 2 grid writes ttmp9 and ttmp7 at 8 * (x + 3y + 6z)


def test_workgroup_ids_are_in_the_architected_trap_registers() -> None:
    program, kernel = _kernel(WORKGROUP_IDS, 0, 32)
    memory, out = launch_with_output(program, kernel, decoder, (3, 2, 2), (32, 1, 1), 8 * 12)
    want = [[x, y | z << 16] for z in range(2) for y in range(2) for x in range(3)]  # x in ttmp9; y, z in ttmp7
    assert memory.contents(out).view(np.uint32).reshape(12, 2).tolist() == want
    assert program.generation == 12 and _kernel("s_endpgm", 0, 32, "amdgcn-amd-amdhsa-unknown-gfx12-generic")[
        0].architected_workgroup_ids
    gfx11_target = replace(program, target="amdgcn-amd-amdhsa--gfx1100")
    with pytest.raises(Unsupported, match="IEEE"):  # gfx11 has the bit, and the kernels set it
        Runner(gfx11_target, kernel, decoder)


# -- what the attention objects use -----------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "a", "b", "want", "scc"), [
    ("s_sub_co_i32 s2, s0, s1", 5, 7, -2 & M32, False),  # s_sub_i32: SCC the signed overflow
    ("s_sub_co_i32 s2, s0, s1", 0x80000000, 1, 0x7FFFFFFF, True),
    ("s_addk_co_i32 s0, 0x100", 5, 0, 261, False),  # s_addk_i32: D += signext(simm16)
    ("s_addk_co_i32 s0, 0xfff0", 5, 0, -11 & M32, False),
    ("s_mulk_i32 s0, 0x4a00", 3, 0, 56832, None),  # D *= signext(simm16), SCC unchanged
    ("s_mulk_i32 s0, 0xfffe", 7, 0, -14 & M32, None),
    ("s_cvt_f32_u32 s2, s0", M32, 0, 0x4F800000, None),  # 2^32 - 1 rounds to 2^32
    ("s_cvt_u32_f32 s2, s0", 0x40700000, 0, 3, None),  # 3.75 truncates to 3
    ("s_cvt_u32_f32 s2, s0", 0xBF800000, 0, 0, None),  # negative: 0
    ("s_cvt_u32_f32 s2, s0", NAN, 0, 0, None),
    ("s_cvt_u32_f32 s2, s0", 0x4F800000, 0, M32, None),  # 2^32 saturates
    ("s_cvt_u32_f32 s2, s0", 0x7F800000, 0, M32, None),  # +inf saturates
])
def test_attention_scalar_operations(line: str, a: int, b: int, want: int, scc: bool | None) -> None:
    wave = run(line, sgpr={0: a, 1: b}, scc=True)
    assert int(wave.sgpr[0 if line.startswith(("s_addk", "s_mulk")) else 2]) == want
    assert wave.scc == (True if scc is None else scc)


def test_signed_compare_less_or_equal() -> None:
    assert run("s_cmp_le_i32 s0, s1", sgpr={0: -1 & M32, 1: 0}).scc
    assert not run("s_cmp_le_i32 s0, s1", sgpr={0: 1, 1: 0}, scc=True).scc


def test_64_bit_multiply_add_with_its_carry() -> None:
    # (2^32 - 1)^2 + 2^64 - 1 = 2^65 - 2^33: the low 64 bits 0xfffffffe_00000000, a carry out of bit 63
    wave = run("v_mad_co_u64_u32 v[2:3], s10, s0, v1, v[4:5]", sgpr={0: M32},
               vgpr={1: [M32] * 16 + [1] * 16, 4: M32, 5: M32}, exec_mask=0x7FFFFFFF)
    lane = np.arange(31)
    assert wave.vgpr[2][:31].tolist() == np.where(lane < 16, 0, M32 - 1).tolist()  # lanes 16+: 2^64 - 1 + 2^32 - 1
    assert wave.vgpr[3][:31].tolist() == [M32 - 1] * 16 + [0] * 15
    assert int(wave.sgpr[10]) == 0x7FFFFFFF  # every active lane carried (lanes 16+: 2^64 + 2^32 - 2)


SNAN, SNAN2 = 0x7F800001, 0x7F800002


def test_maximum_number_ignores_nans_and_orders_zeros() -> None:
    pairs = [(ONE, NAN), (NAN, ONE), (SNAN, TWO), (TWO, SNAN), (SNAN, SNAN2), (0x80000000, 0), (0, 0x80000000),
             (0xC0400000, 0xC0A00000)]  # -3 vs -5
    want = [ONE, ONE, TWO, TWO, SNAN | 0x400000, 0, 0, 0xC0400000]
    a = [x for x, _ in pairs] + [0] * (32 - len(pairs))
    b = [y for _, y in pairs] + [0] * (32 - len(pairs))
    wave = run("v_max_num_f32_e32 v2, v0, v1\nv_max3_num_f32 v3, v0, v1, v4\n"
               "v_dual_max_num_f32 v5, v0, v1 :: v_dual_subrev_f32 v6, v1, v0",
               vgpr={0: a, 1: b, 4: [0xC1000000] * 32})  # -8: below every pair's maximum
    assert wave.vgpr[2][:8].tolist() == want and wave.vgpr[5][:8].tolist() == want
    assert wave.vgpr[3][:8].tolist() == [*want[:4], 0xC1000000, *want[5:]]  # max(quiet NaN, -8) is -8
    subrev = run("v_subrev_f32_e32 v4, s3, v4\nv_min_u32_e32 v1, 0x17f, v2", sgpr={3: ONE},
                 vgpr={4: 0x40700000, 2: [M32, 5] * 16})
    assert int(subrev.vgpr[4][0]) == 0x40300000  # 3.75 - 1 = 2.75
    assert subrev.vgpr[1][:2].tolist() == [0x17F, 5]  # unsigned: 0xffffffff is the larger
    assert int(wave.vgpr[6][7]) == TWO  # v0 - v1: -3 - (-5) = 2


def _rdna4_operand(matrix: np.ndarray) -> dict[int, list[int]]:
    """A 16x16 matrix of 16-bit patterns ([outer][k]) in RDNA4's operand layout, as the ISA describes it: lane
    l holds outer index l % 16 and K indices 8 * (l / 16) .. + 7; VGPR r the pair 2r, 2r + 1 (low half first)."""
    lane = np.arange(32)
    regs = {}
    for r in range(4):
        k = 8 * (lane // 16) + 2 * r
        regs[r] = (matrix[lane % 16, k].astype(np.uint32) | matrix[lane % 16, k + 1].astype(np.uint32) << 16).tolist()
    return regs


@pytest.mark.parametrize("name", ["v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"])
def test_rdna4_wmma_layout(name: str) -> None:
    kind = name.rsplit("_", 1)[1]
    rng = np.random.default_rng(12)
    a, b = rng.integers(-8, 9, (16, 16)), rng.integers(-8, 9, (16, 16))  # small integers: every sum exact
    c = rng.integers(-64, 65, (16, 16))
    if kind == "f16":
        bits = lambda m: m.astype(np.float16).view(np.uint16)  # noqa: E731
    else:
        bits = lambda m: (m.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    vgpr: dict[int, list[int] | int] = {}
    vgpr |= {8 + r: v for r, v in _rdna4_operand(bits(a)).items()}  # A: [m][k]
    vgpr |= {12 + r: v for r, v in _rdna4_operand(bits(b.T)).items()}  # B: lane l holds column n = l % 16
    lane = np.arange(32)
    for v in range(8):  # C and D: VGPR v, lane l is row v + 8 * (l / 16), column l % 16
        vgpr[16 + v] = c[v + 8 * (lane // 16), lane % 16].astype(np.float32).view(np.uint32).tolist()
    wave = run(f"{name} v[0:7], v[8:11], v[12:15], v[16:23]\n{name} v[24:31], v[8:11], v[12:15], 0", vgpr=vgpr)
    for base, addend in ((0, c), (24, 0)):
        want = (a @ b + addend).astype(np.float32)
        got = np.array([wave.vgpr[base + v] for v in range(8)]).view(np.float32)
        for v in range(8):
            assert got[v].tolist() == want[v + 8 * (lane // 16), lane % 16].tolist(), (kind, base, v)


def test_every_gfx12_only_mnemonic_and_alias_is_run_here() -> None:
    text = Path(__file__).read_text().replace("\\n", " ")
    names = gfx12.ONLY & gfx12.ISA.mnemonics | set(gfx12.ALIASES)
    untested = sorted(n for n in names if not re.search(rf"(?<![a-z0-9_]){n}(_e32|_e64)?(?![a-z0-9_])", text))
    assert not untested, untested
