"""The RDNA3 instructions the attention objects (sdpa_rdna, sdpa_rdna_decode on gfx11-generic) use beyond
RMSNorm's, on programs LLVM's assembler encoded for gfx1100. Expected values come from the ISA guide's
descriptions, worked out here with Python ints and exact rationals (never from the model or numpy floats)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from exact_floats import bits, round_f32, value
from gfx11_asm import instructions, run

from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Wave

LANES = 32
M32 = 0xFFFFFFFF
rng = np.random.default_rng(20261207)


def s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def words(n: int = LANES) -> list[int]:
    return [int(x) for x in rng.integers(0, 1 << 32, n, dtype=np.uint64)]


# -- vector integer ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "fn"), [
    ("v_sub_nc_u32 v2, v0, v1", lambda a, b: a - b),
    ("v_subrev_nc_u32 v2, v0, v1", lambda a, b: b - a),
    ("v_xor_b32 v2, v0, v1", lambda a, b: a ^ b),
    ("v_ashrrev_i32 v2, v0, v1", lambda a, b: s32(b) >> (a & 31)),
    ("v_max_i32 v2, v0, v1", lambda a, b: max(s32(a), s32(b))),
    ("v_min_i32 v2, v0, v1", lambda a, b: min(s32(a), s32(b))),
    ("v_mul_lo_u32 v2, v0, v1", lambda a, b: a * b),
    ("v_mul_hi_u32 v2, v0, v1", lambda a, b: a * b >> 32),
    ("v_mul_u32_u24 v2, v0, v1", lambda a, b: (a & 0xFFFFFF) * (b & 0xFFFFFF)),
])
def test_integer_two_operand(line: str, fn) -> None:
    a, b = words(), words()
    wave = run(line, vgpr={0: a, 1: b})
    assert wave.vgpr[2].tolist() == [fn(x, y) & M32 for x, y in zip(a, b, strict=True)]


@pytest.mark.parametrize(("line", "fn"), [
    ("v_and_or_b32 v3, v0, v1, v2", lambda a, b, c: (a & b) | c),
    ("v_or3_b32 v3, v0, v1, v2", lambda a, b, c: a | b | c),
    ("v_mad_u32_u24 v3, v0, v1, v2", lambda a, b, c: (a & 0xFFFFFF) * (b & 0xFFFFFF) + c),
    ("v_med3_i32 v3, v0, v1, v2", lambda a, b, c: sorted([s32(a), s32(b), s32(c)])[1]),
])
def test_integer_three_operand(line: str, fn) -> None:
    a, b, c = words(), words(), words()
    wave = run(line, vgpr={0: a, 1: b, 2: c})
    assert wave.vgpr[3].tolist() == [fn(x, y, z) & M32 for x, y, z in zip(a, b, c, strict=True)]
    # the kernels' clamp: v_med3_i32 v, s, 0, 32
    wave = run("v_med3_i32 v1, s0, 0, 32", sgpr={0: -5 & M32})
    assert int(wave.vgpr[1][0]) == 0


def test_mad_u64_u32_writes_a_pair_and_the_carry() -> None:
    a, b = words(), words()
    c = [x << 32 | y for x, y in zip(words(), words(), strict=True)]
    c[0], a[0], b[0] = (1 << 64) - 1, M32, M32  # overflows: carry out
    wave = run("v_mad_u64_u32 v[4:5], s0, v0, v1, v[2:3]",
               vgpr={0: a, 1: b, 2: [x & M32 for x in c], 3: [x >> 32 for x in c]})
    totals = [x * y + z for x, y, z in zip(a, b, c, strict=True)]
    assert wave.vgpr[4].tolist() == [t & M32 for t in totals]
    assert wave.vgpr[5].tolist() == [t >> 32 & M32 for t in totals]
    assert int(wave.sgpr[0]) == sum(1 << i for i, t in enumerate(totals) if t >> 64)
    wave = run("v_mad_u64_u32 v[9:10], null, s28, 48, v[25:26]", sgpr={28: 1000}, vgpr={25: 7, 26: 1})
    assert (int(wave.vgpr[9][0]), int(wave.vgpr[10][0])) == (48007, 1)


def test_sub_with_borrow_in_and_out() -> None:
    a, b = words(), words()
    borrow_in = int(rng.integers(0, 1 << 32))
    wave = run("v_sub_co_ci_u32_e64 v3, s1, v0, v1, s0", sgpr={0: borrow_in}, vgpr={0: a, 1: b})
    diffs = [x - y - (borrow_in >> i & 1) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    assert wave.vgpr[3].tolist() == [d & M32 for d in diffs]
    assert int(wave.sgpr[1]) == sum(1 << i for i, d in enumerate(diffs) if d < 0)


# -- vector float ----------------------------------------------------------------------------------------------

QNAN, SNAN, INF = 0x7FC00000, 0x7F800001, 0x7F800000


def ieee_max(a: int, b: int) -> int:
    """v_max_f32 in IEEE mode as the guide's pseudocode gives it: a signalling NaN (src0 first) comes back
    quieted, a quiet NaN yields the other operand, +0 counts as greater than -0."""
    def nan(x: int) -> bool:
        return x >> 23 & 0xFF == 0xFF and x & 0x7FFFFF != 0

    def signalling(x: int) -> bool:
        return nan(x) and not x & 0x400000
    if signalling(a):
        return a | 0x400000
    if signalling(b):
        return b | 0x400000
    if nan(b):
        return a
    if nan(a):
        return b
    fa, fb = (struct.unpack("<f", struct.pack("<I", x))[0] for x in (a, b))  # exact, infinities included
    if fa == fb == 0:
        return b if a >> 31 else a  # a is +0: a; a is -0: b (+0 or -0)
    return a if fa > fb else b


SPECIAL = [QNAN, SNAN, INF, INF | 1 << 31, 0, 1 << 31, bits(1.5), bits(-2.0), 1, bits(3.0e38)]


def test_max_f32_forms_follow_the_ieee_mode_rules() -> None:
    pairs = [(x, y) for x in SPECIAL for y in SPECIAL]
    for start in range(0, len(pairs), LANES):
        chunk = pairs[start:start + LANES]
        chunk += [chunk[0]] * (LANES - len(chunk))
        a, b = [p[0] for p in chunk], [p[1] for p in chunk]
        wave = run("v_max_f32 v2, v0, v1\nv_dual_max_f32 v3, v0, v1 :: v_dual_max_f32 v4, v1, v0",
                   vgpr={0: a, 1: b})
        assert wave.vgpr[2].tolist() == [ieee_max(x, y) for x, y in chunk]
        assert wave.vgpr[3].tolist() == [ieee_max(x, y) for x, y in chunk]
        assert wave.vgpr[4].tolist() == [ieee_max(y, x) for x, y in chunk]
    a, b, c = ([bits(float(x)) for x in rng.standard_normal(LANES)] for _ in range(3))
    wave = run("v_max3_f32 v3, v0, v1, v2\nv_max3_f32 v4, -v0, |v1|, v2", vgpr={0: a, 1: b, 2: c})
    assert wave.vgpr[3].tolist() == [ieee_max(ieee_max(x, y), z) for x, y, z in zip(a, b, c, strict=True)]
    assert wave.vgpr[4].tolist() == [ieee_max(ieee_max(x ^ 1 << 31, y & M32 >> 1), z)
                                     for x, y, z in zip(a, b, c, strict=True)]


def test_exp_and_log_are_exact_where_the_result_is_representable_and_within_one_ulp_elsewhere() -> None:
    ints = list(range(-149, 128, 9))[:LANES]
    ints += [0] * (LANES - len(ints))
    wave = run("v_exp_f32 v1, v0", vgpr={0: [bits(float(i)) for i in ints]})
    assert wave.vgpr[1].tolist() == [round_f32(Fraction(2) ** i) for i in ints]  # 2^-149: the smallest denormal
    wave = run("v_log_f32 v1, v0", vgpr={0: [round_f32(Fraction(2) ** i) for i in ints]})
    assert wave.vgpr[1].tolist() == [bits(float(i)) for i in ints]
    wave = run("v_exp_f32 v1, v0\nv_log_f32 v2, v3", vgpr={0: [0xFF800000, INF, QNAN] + [0] * 29,
                                                           3: [0, bits(-1.0), INF, 1 << 31] + [bits(1.0)] * 28})
    exp, log = wave.vgpr[1].tolist(), wave.vgpr[2].tolist()
    assert (exp[0], exp[1], exp[2] & QNAN) == (0, INF, QNAN)  # 2^-inf, 2^inf, a NaN
    assert (log[0], log[1] & QNAN, log[2], log[3]) == (0xFF800000, QNAN, INF, 0xFF800000)  # log2(-0) = -inf
    xs = [bits(float(x)) for x in rng.uniform(-100, 100, LANES)]
    got = run("v_exp_f32 v1, v0", vgpr={0: xs}).vgpr[1].tolist()
    for x, g in zip(xs, got, strict=True):  # documented to 1 ulp: against 2^x in binary64, far tighter
        assert abs(g - round_f32(Fraction(2.0 ** float(value(x))))) <= 1
    xs = [bits(float(x)) for x in rng.uniform(1e-30, 1e30, LANES)]
    got = run("v_log_f32 v1, v0", vgpr={0: xs}).vgpr[1].tolist()
    for x, g in zip(xs, got, strict=True):
        assert abs(value(g) - Fraction(math.log2(float(value(x))))) <= abs(value(g)) * Fraction(1, 2**23)


def test_conversions_between_u32_and_f32_and_from_u16() -> None:
    ints = [0, 1, 16777217, 16777219, M32, 2**31 + 1, 123456789] + words(25)
    wave = run("v_cvt_f32_u32 v1, v0", vgpr={0: ints})
    assert wave.vgpr[1].tolist() == [round_f32(Fraction(i)) for i in ints]  # nearest even
    floats = [bits(3.7), bits(-1.0), QNAN, bits(1e10), bits(4294967040.0), 1 << 31, INF, bits(0.999)]
    floats += [bits(float(x)) for x in rng.uniform(0, 4e9, LANES - len(floats))]
    wave = run("v_cvt_u32_f32 v1, v0", vgpr={0: floats})

    def to_u32(b: int) -> int:  # truncated toward zero; NaN and negatives 0, 2^32 and above saturate
        if b >> 23 & 0xFF == 0xFF:
            return 0 if b & 0x7FFFFF or b >> 31 else M32
        return min(max(math.trunc(value(b)), 0), M32)
    assert wave.vgpr[1].tolist() == [to_u32(f) for f in floats]
    wave = run("v_cvt_u32_u16 v1, v0.l\nv_cvt_u32_u16 v2, v0.h", vgpr={0: 0xBEEF1234})
    assert (int(wave.vgpr[1][0]), int(wave.vgpr[2][0])) == (0x1234, 0xBEEF)


def test_sixteen_bit_integer_halves() -> None:
    """true16 operands (.l/.h) in VOP3 forms with op_sel, as the kernels write them; the other half of the
    destination is kept."""
    program = """v_and_b16 v4.l, 0xff, v1.h
v_or_b16 v5.h, 0x180, v0.l
v_lshrrev_b16 v6.l, 9, v1.l
v_mul_lo_u16 v7.l, v1.h, 12
v_sub_nc_u16 v8.h, v0.h, v1.h
v_sub_nc_u16 v9.l, v0.l, v1.l"""
    a, b = words(), words()
    keep = 0xA5A55A5A
    wave = run(program, vgpr={0: a, 1: b, **{r: keep for r in range(4, 10)}})

    def low(x: int, result: int) -> int:
        return (x & 0xFFFF0000) | result & 0xFFFF

    def high(x: int, result: int) -> int:
        return (x & 0xFFFF) | (result & 0xFFFF) << 16
    assert wave.vgpr[4].tolist() == [low(keep, 0xFF & y >> 16) for y in b]
    assert wave.vgpr[5].tolist() == [high(keep, 0x180 | x & 0xFFFF) for x in a]
    assert wave.vgpr[6].tolist() == [low(keep, (y & 0xFFFF) >> 9) for y in b]
    assert wave.vgpr[7].tolist() == [low(keep, (y >> 16) * 12) for y in b]
    assert wave.vgpr[8].tolist() == [high(keep, (x >> 16) - (y >> 16)) for x, y in zip(a, b, strict=True)]
    assert wave.vgpr[9].tolist() == [low(keep, (x & 0xFFFF) - (y & 0xFFFF)) for x, y in zip(a, b, strict=True)]


def test_compares_of_the_attention_kernels() -> None:
    a = [s32(x) for x in words()]
    a[:3] = [0, -1, 1]
    b = [s32(x) for x in words()]
    b[:3] = [0, -1, 2]
    wave = run("v_cmp_lt_i32_e64 s0, v0, v1\nv_cmp_gt_i32 vcc_lo, v0, v1\nv_cmp_le_u32_e64 s1, v0, v1\n"
               "v_cmp_ne_u32_e64 s2, v0, v1\nv_cmp_lt_i32_e64 s3, 0, v0",
               vgpr={0: [x & M32 for x in a], 1: [x & M32 for x in b]}, exec_mask=0x7FFFFFFF)

    def mask(pred) -> int:
        return sum(1 << i for i in range(31) if pred(a[i], b[i]))
    assert int(wave.sgpr[0]) == mask(lambda x, y: x < y)
    assert int(wave.sgpr[106]) == mask(lambda x, y: x > y)
    assert int(wave.sgpr[1]) == mask(lambda x, y: x & M32 <= y & M32)
    assert int(wave.sgpr[2]) == mask(lambda x, y: x != y)
    assert int(wave.sgpr[3]) == mask(lambda x, _: 0 < x)
    floats = [QNAN, bits(1.0), 0xFF800000, 0, 1 << 31] + [bits(2.0)] * 27
    wave = run("v_cmp_neq_f32 vcc_lo, 0xff800000, v0", vgpr={0: floats})
    assert int(wave.sgpr[106]) == M32 & ~(1 << 2)  # true for NaN, false only for -inf; -0 == +0 elsewhere
    wave = run("v_cmp_neq_f32 vcc_lo, 0, v0", vgpr={0: floats})
    assert int(wave.sgpr[106]) == M32 & ~(1 << 3 | 1 << 4)
    pairs = [(x << 32 | y) for x, y in zip(words(), words(), strict=True)]
    pairs[:4] = [0, 1, (1 << 64) - 1, 1 << 63]
    wave = run("v_cmp_gt_i64_e64 s4, v[0:1], 0\nv_cmp_gt_i64_e64 s5, s[8:9], v[0:1]",
               sgpr={8: 5, 9: 0}, vgpr={0: [p & M32 for p in pairs], 1: [p >> 32 for p in pairs]})

    def i64(x: int) -> int:
        return x - (1 << 64) if x >> 63 else x
    assert int(wave.sgpr[4]) == sum(1 << i for i, p in enumerate(pairs) if i64(p) > 0)
    assert int(wave.sgpr[5]) == sum(1 << i for i, p in enumerate(pairs) if 5 > i64(p))


# -- scalar ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "a", "b", "want", "scc"), [
    ("s_sub_i32", 0x80000000, 1, 0x7FFFFFFF, True),
    ("s_sub_i32", 5, 7, -2 & M32, False),
    ("s_mul_hi_u32", M32, M32, 0xFFFFFFFE, None),
    ("s_min_i32", -3 & M32, 2, -3 & M32, True),
    ("s_min_i32", 4, 2, 2, False),
    ("s_max_i32", 4, 4, 4, True),
    ("s_max_i32", -4 & M32, 2, 2, False),
    ("s_and_not1_b32", 0xFF, 0x0F, 0xF0, True),
    ("s_and_not1_b32", 0x0F, 0xFF, 0, False),
    ("s_xnor_b32", 0xF0F0F0F0, 0x0F0F0F0F, 0, False),
    ("s_xnor_b32", 0, 1, 0xFFFFFFFE, True),
    ("s_lshl1_add_u32", 0x80000000, 5, 5, True),
    ("s_lshl2_add_u32", 3, 4, 16, False),
    ("s_lshl3_add_u32", 0x20000000, 0, 0, True),
])
def test_sop2(line: str, a: int, b: int, want: int, scc: bool | None) -> None:
    wave = run(f"{line} s2, s0, s1", sgpr={0: a, 1: b}, scc=not scc if scc is not None else True)
    assert int(wave.sgpr[2]) == want
    assert wave.scc == (scc if scc is not None else True)


def test_sop1_and_sopk() -> None:
    wave = run("s_abs_i32 s1, s0\ns_not_b32 s2, s0\ns_brev_b32 s3, s0", sgpr={0: -6 & M32})
    assert [int(v) for v in wave.sgpr[1:4]] == [6, 5, int(f"{-6 & M32:032b}"[::-1], 2)]
    assert wave.scc  # s_not_b32's result is not 0
    wave = run("s_abs_i32 s1, s0", sgpr={0: 0x80000000})
    assert (int(wave.sgpr[1]), wave.scc) == (0x80000000, True)  # |-2^31| wraps
    wave = run("s_brev_b32 s39, -2")
    assert int(wave.sgpr[39]) == 0x7FFFFFFF
    wave = run("s_bitset1_b32 s2, 9\ns_bitset1_b32 s3, s4", sgpr={2: 1, 3: 0, 4: 35}, scc=True)
    assert (int(wave.sgpr[2]), int(wave.sgpr[3]), wave.scc) == (0x201, 8, True)  # 35: bit 3; SCC untouched
    wave = run("s_addk_i32 s1, 0x100\ns_addk_i32 s2, 0xfff0", sgpr={1: 5, 2: 0x80000000})
    assert (int(wave.sgpr[1]), int(wave.sgpr[2]), wave.scc) == (0x105, 0x7FFFFFF0, True)  # -16: overflow
    wave = run("s_lshr_b64 s[0:1], s[34:35], 23", sgpr={34: 0x12345678, 35: 0x9ABCDEF0})
    whole = (0x9ABCDEF0 << 32 | 0x12345678) >> 23
    assert (int(wave.sgpr[0]), int(wave.sgpr[1]), wave.scc) == (whole & M32, whole >> 32, True)


def test_sopc_and_execnz() -> None:
    assert run("s_cmp_ge_u32 s0, s1", sgpr={0: M32, 1: 1}).scc
    assert not run("s_cmp_ge_u32 s0, s1", sgpr={0: 0, 1: 1}).scc
    assert run("s_cmp_gt_i32 s0, 0", sgpr={0: 1}).scc
    assert not run("s_cmp_gt_i32 s0, 0", sgpr={0: M32}).scc
    assert run("s_bitcmp0_b32 s5, 2", sgpr={5: 0xFB}).scc
    assert not run("s_bitcmp0_b32 s5, 2", sgpr={5: 0x04}).scc
    skip = "s_cbranch_execnz 1\ns_mov_b32 s3, 9\ns_endpgm"
    assert int(run(skip, exec_mask=0x100).sgpr[3]) == 0  # taken
    assert int(run(skip, exec_mask=0).sgpr[3]) == 9


# -- memory ----------------------------------------------------------------------------------------------------

def wave_with(sgpr: dict[int, int], vgpr: dict[int, list[int] | int] | None = None) -> Wave:
    wave = Wave()
    wave.sgpr[126] = M32
    for reg, v in sgpr.items():
        wave.sgpr[reg] = v & M32
    for reg, values in (vgpr or {}).items():
        wave.vgpr[reg] = np.array(values, dtype=np.uint64).astype(np.uint32) if isinstance(values, list) else values
    return wave


def lds_words(lds: Lds) -> list[int]:
    return lds.data.view(np.uint32).tolist()


def test_lds_stores_of_every_width() -> None:
    lane = list(range(LANES))
    data = {1 + i: [1000 * (i + 1) + j for j in lane] for i in range(4)}
    cases = [
        ("ds_store_b128 v0, v[1:4] offset:16", 16, lambda w: {4 + 4 * j + i: data[1 + i][j] for j in lane
                                                             for i in range(4)}),
        ("ds_store_b64 v0, v[1:2] offset:8", 8, lambda w: {2 + 2 * j + i: data[1 + i][j] for j in lane
                                                          for i in range(2)}),
        ("ds_store_2addr_b32 v0, v1, v2 offset1:64", 4, lambda w: {**{j: data[1][j] for j in lane},
                                                                   **{64 + j: data[2][j] for j in lane}}),
        ("ds_store_2addr_b64 v0, v[1:2], v[3:4] offset0:1 offset1:40", 8,
         lambda w: {**{2 + 2 * j + i: data[1 + i][j] for j in lane for i in range(2)},
                    **{80 + 2 * j + i: data[3 + i][j] for j in lane for i in range(2)}}),
    ]
    for line, step, want in cases:
        lds = Lds.of_size(1024)
        wave = wave_with({}, {0: [step * j for j in lane], **data})
        run_program(wave, instructions(line + "\ns_endpgm"), Memory(), lds)
        expected = [0] * 256
        for at, v in want(wave).items():
            expected[at] = v
        assert lds_words(lds) == expected, line
    lds = Lds.of_size(256)
    wave = wave_with({}, {0: [2 * j for j in lane], 1: [0xAAAA0000 + j for j in lane]})
    run_program(wave, instructions("ds_store_b16 v0, v1\nds_store_b16_d16_hi v0, v1 offset:80\ns_endpgm"),
                Memory(), lds)
    halves = lds.data.view(np.uint16).tolist()
    assert halves[:32] == lane and halves[40:72] == [0xAAAA] * 32 and not any(halves[32:40] + halves[72:])


def descriptor(base: int, records: int, oob_select: int = 3) -> dict[int, int]:
    return {4: base & M32, 5: base >> 32, 6: records, 7: 0x01027000 | oob_select << 28}


def test_buffer_b64_checks_each_dword_and_soffset_counts_against_num_records() -> None:
    memory = Memory()
    at = memory.allocate("buf", np.arange(100, 164, dtype=np.uint32).tobytes())
    lane = np.arange(LANES)
    # NUM_RECORDS 44 bytes: dwords 0-10 in range; each lane's pair is at byte 8*lane + 4 (instruction offset)
    wave = wave_with(descriptor(at, 44), {0: [8 * j for j in range(LANES)]})
    run_program(wave, instructions("buffer_load_b64 v[1:2], v0, s[4:7], 0 offen offset:4\ns_endpgm"), memory,
                Lds.of_size(0))
    first, second = 2 * lane + 1, 2 * lane + 2
    assert wave.vgpr[1].tolist() == np.where(first < 11, 100 + first, 0).tolist()
    assert wave.vgpr[2].tolist() == np.where(second < 11, 100 + second, 0).tolist()
    # soffset moves the address and counts against NUM_RECORDS (offset + size <= NUM_RECORDS - soffset):
    # s0 = 16, NUM_RECORDS 28: lane j's pair at 8j + 16 is in range while 8j + 4i + 4 <= 12
    wave = wave_with({**descriptor(at, 28), 0: 16}, {0: [8 * j for j in range(LANES)]})
    run_program(wave, instructions("buffer_load_b64 v[1:2], v0, s[4:7], s0 offen\ns_endpgm"), memory,
                Lds.of_size(0))
    assert wave.vgpr[1].tolist() == [104, 106] + [0] * 30 and wave.vgpr[2].tolist() == [105, 0] + [0] * 30
    wave = wave_with({**descriptor(at, 8), 0: 16}, {0: 0, 1: 55})  # soffset past NUM_RECORDS: nothing in range
    run_program(wave, instructions("buffer_load_b32 v1, v0, s[4:7], s0 offen\ns_endpgm"), memory, Lds.of_size(0))
    assert wave.vgpr[1].tolist() == [0] * 32
    wave = wave_with(descriptor(at, 12), {0: [8 * j for j in range(LANES)], 1: 7, 2: 9})
    run_program(wave, instructions("buffer_store_b64 v[1:2], v0, s[4:7], 0 offen\ns_endpgm"), memory,
                Lds.of_size(0))
    assert memory.contents(at).view(np.uint32)[:5].tolist() == [7, 9, 7, 103, 104]  # dword 3 is past 12 bytes
    # OOB_SELECT 2: no range check while NUM_RECORDS is not 0; NUM_RECORDS 0: nothing is in range
    wave = wave_with(descriptor(at, 4, oob_select=2), {0: [4 * j for j in range(LANES)]})
    run_program(wave, instructions("buffer_load_b32 v1, v0, s[4:7], 0 offen\ns_endpgm"), memory, Lds.of_size(0))
    assert wave.vgpr[1].tolist() == [7, 9, 7] + list(range(103, 132))
    wave = wave_with(descriptor(at, 0, oob_select=2), {0: 0, 1: 55})
    run_program(wave, instructions("buffer_load_b32 v1, v0, s[4:7], 0 offen\ns_endpgm"), memory, Lds.of_size(0))
    assert wave.vgpr[1].tolist() == [0] * 32


def test_scalar_load_of_sixteen_dwords() -> None:
    memory = Memory()
    at = memory.allocate("kernarg", np.arange(1, 21, dtype=np.uint32).tobytes())
    wave = wave_with({0: at & M32, 1: at >> 32})
    run_program(wave, instructions("s_load_b512 s[36:51], s[0:1], null\ns_endpgm"), memory, Lds.of_size(0))
    assert [int(v) for v in wave.sgpr[36:52]] == list(range(1, 17))
