"""Vector ALU semantics on programs LLVM's assembler encoded. Expected values are worked out here from the ISA
guide's descriptions: binary32 results from exact rational arithmetic rounded to nearest even by
`round_f32` below (never from numpy's float32 or the model), integers with Python's unbounded ints."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from exact_floats import bits, round_f32, value
from gfx11_asm import run

LANES = 32
rng = np.random.default_rng(20261202)


def lanes(values: list[int]) -> list[int]:
    return [v & 0xFFFFFFFF for v in values]


def random_f32(n: int) -> list[int]:
    """Finite binary32 patterns of mixed sign and nearby exponents (so sums cancel and round)."""
    mantissa = rng.integers(0, 1 << 23, n)
    exponent = rng.integers(120, 134, n)
    sign = rng.integers(0, 2, n)
    return [int(s) << 31 | int(e) << 23 | int(m) for s, e, m in zip(sign, exponent, mantissa, strict=True)]


@pytest.mark.parametrize(("line", "exact"), [
    ("v_add_f32 v2, v0, v1", lambda a, b: a + b),
    ("v_sub_f32 v2, v0, v1", lambda a, b: a - b),
    ("v_mul_f32 v2, v0, v1", lambda a, b: a * b),
])
def test_binary32_arithmetic_rounds_once_to_nearest_even(line: str, exact) -> None:
    for _ in range(8):
        a, b = random_f32(LANES), random_f32(LANES)
        wave = run(line, vgpr={0: a, 1: b})
        assert wave.vgpr[2].tolist() == [round_f32(exact(value(x), value(y))) for x, y in zip(a, b, strict=True)]


def test_fused_multiply_add_rounds_once() -> None:
    one_up, one_down = bits(1 + 2**-23), bits(1 - 2**-23)
    # (1+2^-23)(1-2^-23) - 1 = -2^-46 exactly: a separate multiply would round the product to 1 and give 0.
    wave = run("v_fma_f32 v3, v0, v1, v2\nv_mul_f32 v4, v0, v1\nv_add_f32 v4, v4, v2",
               vgpr={0: one_up, 1: one_down, 2: bits(-1.0)})
    assert int(wave.vgpr[3][0]) == bits(-(2**-46))
    assert int(wave.vgpr[4][0]) == 0
    for _ in range(8):
        a, b, c = random_f32(LANES), random_f32(LANES), random_f32(LANES)
        want = [round_f32(value(x) * value(y) + value(z)) for x, y, z in zip(a, b, c, strict=True)]
        assert run("v_fma_f32 v3, v0, v1, v2", vgpr={0: a, 1: b, 2: c}).vgpr[3].tolist() == want
        assert run("v_fmac_f32 v2, v0, v1", vgpr={0: a, 1: b, 2: c}).vgpr[2].tolist() == want  # addend: dst


def test_denormals_are_kept() -> None:
    tiny = bits(2.0**-140)  # a binary32 subnormal
    wave = run("v_mul_f32 v2, v0, v1\nv_add_f32 v3, v0, v0", vgpr={0: tiny, 1: bits(0.5)})
    assert int(wave.vgpr[2][0]) == bits(2.0**-141)
    assert int(wave.vgpr[3][0]) == bits(2.0**-139)


def test_vop3_modifiers_and_constants() -> None:
    wave = run("v_fma_f32 v3, -v0, |v1|, 0.5\nv_mul_f32 v4, 2.0, v0\nv_add_f32 v5, 0x40400000, v0",
               vgpr={0: bits(3.0), 1: bits(-2.0)})
    assert int(wave.vgpr[3][0]) == bits(-3.0 * 2.0 + 0.5)
    assert int(wave.vgpr[4][0]) == bits(6.0)
    assert int(wave.vgpr[5][0]) == bits(6.0)
    with pytest.raises(Exception, match="clamp"):
        run("v_add_f32_e64 v2, v0, v1 clamp", vgpr={0: 0, 1: 0})


def test_exec_mask_leaves_inactive_lanes_alone() -> None:
    wave = run("v_mov_b32 v1, 7", vgpr={1: 99}, exec_mask=0x0000000F)
    assert wave.vgpr[1].tolist() == [7] * 4 + [99] * 28


@pytest.mark.parametrize(("line", "fn"), [
    ("v_add_nc_u32 v2, v0, v1", lambda a, b: a + b),
    ("v_and_b32 v2, v0, v1", lambda a, b: a & b),
    ("v_or_b32 v2, v0, v1", lambda a, b: a | b),
    ("v_lshlrev_b32 v2, v0, v1", lambda a, b: b << (a & 31)),
    ("v_lshrrev_b32 v2, v0, v1", lambda a, b: b >> (a & 31)),
])
def test_integer_two_operand(line: str, fn) -> None:
    a = [int(x) for x in rng.integers(0, 1 << 32, LANES, dtype=np.uint64)]
    b = [int(x) for x in rng.integers(0, 1 << 32, LANES, dtype=np.uint64)]
    wave = run(line, vgpr={0: a, 1: b})
    assert wave.vgpr[2].tolist() == lanes([fn(x, y) for x, y in zip(a, b, strict=True)])


@pytest.mark.parametrize(("line", "fn"), [
    ("v_bfe_u32 v3, v0, v1, v2", lambda a, b, c: (a >> (b & 31)) & ((1 << (c & 31)) - 1)),
    ("v_lshl_add_u32 v3, v0, v1, v2", lambda a, b, c: (a << (b & 31)) + c),
    ("v_add_lshl_u32 v3, v0, v1, v2", lambda a, b, c: ((a + b) & 0xFFFFFFFF) << (c & 31)),
    ("v_add3_u32 v3, v0, v1, v2", lambda a, b, c: a + b + c),
    ("v_lshl_or_b32 v3, v0, v1, v2", lambda a, b, c: (a << (b & 31)) | c),
])
def test_integer_three_operand(line: str, fn) -> None:
    a, c = ([int(x) for x in rng.integers(0, 1 << 32, LANES, dtype=np.uint64)] for _ in range(2))
    b = [int(x) for x in rng.integers(0, 40, LANES)]
    wave = run(line, vgpr={0: a, 1: b, 2: c})
    assert wave.vgpr[3].tolist() == lanes([fn(x, y, z) for x, y, z in zip(a, b, c, strict=True)])


def test_conversions() -> None:
    ints = [0, 1, -1, 16777217, -16777219, 2**31 - 1] + list(range(26))
    wave = run("v_cvt_f32_i32 v1, v0", vgpr={0: lanes(ints)})
    assert wave.vgpr[1].tolist() == [round_f32(Fraction(i)) for i in ints]  # 16777217 rounds to even
    halves = [0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000] + [0x3555] * 27  # 1, -2, smallest subnormal, max, -0
    wave = run("v_cvt_f32_f16 v1, v0\nv_cvt_f32_f16 v2, v0.h",
               vgpr={0: [h | 0x4200 << 16 for h in halves]})
    want = [1.0, -2.0, 2.0**-24, 65504.0, -0.0] + [float(np.float16(np.uint16(0x3555).view(np.float16)))] * 27
    assert wave.vgpr[1].tolist() == [bits(x) for x in want]
    assert wave.vgpr[2].tolist() == [bits(3.0)] * LANES  # 0x4200 is 3.0 in binary16
    # binary32 to binary16, rounded to nearest even, into one half of the destination, the other half kept
    wave = run("v_cvt_f16_f32 v1.l, v0\nv_cvt_f16_f32 v2.h, v0",
               vgpr={0: bits(1 + 2**-11), 1: 0xAAAA0000, 2: 0x0000BBBB})  # a tie: rounds down to 1.0
    assert (int(wave.vgpr[1][0]), int(wave.vgpr[2][0])) == (0xAAAA3C00, 0x3C00BBBB)
    wave = run("v_mov_b16 v1.h, v0.l", vgpr={0: 0x12345678, 1: 0x9ABCDEF0})
    assert int(wave.vgpr[1][0]) == 0x5678DEF0


def test_reciprocal_and_square_root_are_within_one_ulp() -> None:
    xs = random_f32(LANES)
    xs = [x & 0x7FFFFFFF for x in xs]  # square roots of positive values
    wave = run("v_rcp_f32 v1, v0\nv_sqrt_f32 v2, v0", vgpr={0: xs})
    for x, r, s in zip(xs, wave.vgpr[1].tolist(), wave.vgpr[2].tolist(), strict=True):
        assert abs(r - round_f32(1 / value(x))) <= 1
        exact = float(value(x)) ** 0.5
        assert abs(s - bits(exact)) <= 1


def test_compares_write_a_lane_mask() -> None:
    a = [bits(float(i)) for i in range(LANES)]
    wave = run("v_cmp_lt_f32 vcc_lo, v0, v1\nv_cmp_gt_f32_e64 s4, v0, v1\nv_cmp_u_f32_e64 s5, v0, v2\n"
               "v_cmp_ge_f32_e64 s6, v0, v1",
               vgpr={0: a, 1: bits(10.0), 2: [0x7FC00000] + [0] * 31}, exec_mask=0x7FFFFFFF)
    assert int(wave.sgpr[106]) == (1 << 10) - 1
    assert int(wave.sgpr[6]) == 0x7FFFFFFF & ~((1 << 10) - 1)
    assert int(wave.sgpr[4]) == 0x7FFFFFFF & ~((1 << 11) - 1)  # lane 31 is inactive: its bit is 0
    assert int(wave.sgpr[5]) == 1
    wave = run("v_cmp_le_i32 vcc_lo, v0, v1\nv_cmp_eq_u32_e64 s4, 3, v1",
               vgpr={0: lanes(list(range(-16, 16))), 1: 3})
    assert int(wave.sgpr[106]) == (1 << 20) - 1  # -16..3
    assert int(wave.sgpr[4]) == 0xFFFFFFFF
    wave = run("v_cmpx_eq_u32 v0, v1", vgpr={0: list(range(LANES)), 1: 5})
    assert int(wave.sgpr[126]) == 1 << 5


def test_class_test() -> None:
    samples = [0x7F800001, 0x7FC00000, 0xFF800000, bits(-1.5), 0x80000001, 0x80000000, 0, 1, bits(2.0),
               0x7F800000]
    for bit in range(10):
        wave = run("v_cmp_class_f32 vcc_lo, v0, v1", vgpr={0: samples + [0x3F800000] * 22, 1: 1 << bit})
        mask = int(wave.sgpr[106])
        assert mask & 0x3FF == 1 << bit, (bit, hex(mask))  # sample i is of class i
        assert mask >> 10 == (0x3FFFFF if bit == 8 else 0), (bit, hex(mask))  # 1.0: a positive normal


def test_cndmask_and_readfirstlane() -> None:
    wave = run("v_cndmask_b32 v2, v0, v1, vcc_lo\nv_cndmask_b32_e64 v3, v0, v1, s4",
               sgpr={106: 0x0000FFFF, 4: 0xFFFF0000}, vgpr={0: 1, 1: 2})
    assert wave.vgpr[2].tolist() == [2] * 16 + [1] * 16
    assert wave.vgpr[3].tolist() == [1] * 16 + [2] * 16
    wave = run("v_readfirstlane_b32 s0, v0", vgpr={0: list(range(100, 132))}, exec_mask=0xFFFFFF00)
    assert int(wave.sgpr[0]) == 108


def test_dpp_lane_selection() -> None:
    ids = list(range(LANES))
    wave = run("v_add_f32_dpp v2, v0, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v3, v0 row_ror:8 row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v4, v0 row_xmask:4 row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v5, v0 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1\n"
               "v_mov_b32_dpp v6, v0 row_shr:1 row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v7, v0 quad_perm:[0,0,0,0] row_mask:0x1 bank_mask:0xf",
               vgpr={0: [bits(float(i)) for i in ids], 1: bits(0.5), 6: 77, 7: 77})
    assert wave.vgpr[2].tolist() == [bits(float(i ^ 1) + 0.5) for i in ids]
    assert wave.vgpr[3].tolist() == [bits(float((i & 16) + ((i - 8) & 15))) for i in ids]
    assert wave.vgpr[4].tolist() == [bits(float(i ^ 4)) for i in ids]
    assert wave.vgpr[5].tolist() == [0 if i % 16 == 0 else bits(float(i - 1)) for i in ids]  # bound_ctrl: 0
    assert wave.vgpr[6].tolist() == [77 if i % 16 == 0 else bits(float(i - 1)) for i in ids]  # not written
    assert wave.vgpr[7].tolist() == [bits(float(i & ~3)) for i in ids[:16]] + [77] * 16  # row 1 masked off


def test_permlanex16_reads_the_other_half() -> None:
    wave = run("v_permlanex16_b32 v1, v0, s0, s1", sgpr={0: 0x76543210, 1: 0xFEDCBA98},
               vgpr={0: list(range(100, 132))})
    assert wave.vgpr[1].tolist() == list(range(116, 132)) + list(range(100, 116))
    wave = run("v_permlanex16_b32 v1, v0, s0, s1", sgpr={0: 0, 1: 0}, vgpr={0: list(range(100, 132))})
    assert wave.vgpr[1].tolist() == [116] * 16 + [100] * 16


def test_dual_issue_reads_before_it_writes() -> None:
    wave = run("v_dual_mul_f32 v0, v1, v2 :: v_dual_add_f32 v3, v0, v5",
               vgpr={0: bits(10.0), 1: bits(3.0), 2: bits(2.0), 5: bits(2.0)})
    assert (int(wave.vgpr[0][0]), int(wave.vgpr[3][0])) == (bits(6.0), bits(12.0))  # Y saw v0's old 10
    wave = run("v_dual_fmac_f32 v4, v1, v2 :: v_dual_cndmask_b32 v5, v6, v7",
               sgpr={106: 1}, vgpr={1: bits(3.0), 2: bits(2.0), 4: bits(1.0), 6: bits(3.0), 7: bits(2.0)})
    assert int(wave.vgpr[4][0]) == bits(7.0)
    assert wave.vgpr[5].tolist() == [bits(2.0)] + [bits(3.0)] * 31
    wave = run("v_dual_mov_b32 v6, 0x3e800000 :: v_dual_lshlrev_b32 v7, 2, v1", vgpr={1: 5})
    assert (int(wave.vgpr[6][0]), int(wave.vgpr[7][0])) == (bits(0.25), 20)
    wave = run("v_dual_sub_f32 v6, v1, v2 :: v_dual_add_nc_u32 v9, 7, v3\n"
               "v_dual_mov_b32 v10, v1 :: v_dual_and_b32 v11, 3, v3",
               vgpr={1: bits(3.0), 2: bits(2.0), 3: bits(3.0)})
    assert [int(wave.vgpr[r][0]) for r in (6, 9, 10, 11)] == [bits(1.0), bits(3.0) + 7, bits(3.0), 0]


def test_fma_mix_widens_halves_and_rounds_once() -> None:
    # v0 = (hi 2.0, lo 3.0) in binary16; v1 = 0.25 in binary32
    wave = run("v_fma_mix_f32 v2, v0, v0, v1 op_sel:[0,1,0] op_sel_hi:[1,1,0]\n"
               "v_fma_mixlo_f16 v3, v0, v1, v1 op_sel_hi:[1,0,0]\n"
               "v_fma_mixhi_f16 v4, v0, v1, v1 op_sel:[1,0,0] op_sel_hi:[1,0,0]",
               vgpr={0: 0x4000 << 16 | 0x4200, 1: bits(0.25), 3: 0xAAAA0000, 4: 0x0000BBBB})
    assert int(wave.vgpr[2][0]) == bits(3.0 * 2.0 + 0.25)
    assert int(wave.vgpr[3][0]) == 0xAAAA0000 | 0x3C00  # 3*0.25+0.25 = 1.0
    assert int(wave.vgpr[4][0]) == 0x3A00 << 16 | 0xBBBB  # 2*0.25+0.25 = 0.75


DIVISION = """v_div_scale_f32 v2, null, v1, v1, v0
v_div_scale_f32 v3, vcc_lo, v0, v1, v0
v_rcp_f32 v4, v2
v_fma_f32 v5, -v2, v4, 1.0
v_fmac_f32 v4, v5, v4
v_mul_f32 v5, v3, v4
v_fma_f32 v6, -v2, v5, v3
v_fmac_f32 v5, v6, v4
v_fma_f32 v2, -v2, v5, v3
v_div_fmas_f32 v2, v2, v4, v5
v_div_fixup_f32 v7, v2, v1, v0"""  # LLVM's binary32 division with denormals kept: v7 = v0 / v1


def test_division_sequence_gives_the_correctly_rounded_quotient() -> None:
    for _ in range(8):
        a, b = random_f32(LANES), random_f32(LANES)
        wave = run(DIVISION, vgpr={0: a, 1: b})
        assert wave.vgpr[7].tolist() == [round_f32(value(x) / value(y)) for x, y in zip(a, b, strict=True)]
    # numerators whose quotient is tiny or a denormal: v_div_scale scales them and says so in VCC
    for a, b in (([bits(2.0**-126 * (1 + i / 64)) for i in range(LANES)], [bits(3.0 + i) for i in range(LANES)]),
                 # exponents 96 or more apart: the denominator is scaled instead
                 ([bits(2.0**100 * (1 + i / 64)) for i in range(LANES)], [bits(3.0 * 2.0**-8)] * LANES)):
        wave = run(DIVISION, vgpr={0: a, 1: b})
        assert wave.vgpr[7].tolist() == [round_f32(value(x) / value(y)) for x, y in zip(a, b, strict=True)]


def test_division_special_values() -> None:
    nan, inf = 0x7FC00000, 0x7F800000
    num = [bits(1.0), 0, bits(-1.0), inf, bits(2.0), 0x80000000] + [bits(1.0)] * 26
    den = [0, 0, bits(0.0), inf, inf, bits(5.0)] + [bits(4.0)] * 26
    wave = run(DIVISION, vgpr={0: num, 1: den})
    got = wave.vgpr[7].tolist()
    assert got[0] == inf  # 1/0
    assert got[1] & 0x7FC00000 == nan  # 0/0 is a NaN
    assert got[2] == 0x80000000 | inf  # -1/+0
    assert got[3] & 0x7FC00000 == nan  # inf/inf
    assert got[4] == 0  # 2/inf
    assert got[5] == 0x80000000  # -0/5
    assert got[6:] == [bits(0.25)] * 26


def test_row_shift_left_reads_the_next_lanes_of_its_row() -> None:
    wave = run("v_mov_b32_dpp v1, v0 row_shl:2 row_mask:0xf bank_mask:0xf bound_ctrl:1",
               vgpr={0: list(range(1, 33))})
    assert wave.vgpr[1].tolist() == [0 if i % 16 >= 14 else i + 3 for i in range(LANES)]
