"""RDNA3 WMMA (v_wmma_f32_16x16x16_f16 / _bf16, wave32) on programs LLVM's assembler encoded.

The test places A, B and C in the VGPRs by the layout AMD's RDNA3 ISA guide documents (written out here,
not taken from the model): A and B in 8 VGPRs each, lane l holding row l % 16 of A (column l % 16 of B),
VGPR r's low half K index 2r, its high half 2r + 1, lanes 16-31 a copy of lanes 0-15; C and D in 8 VGPRs,
lane l, VGPR v holding row 2v + l / 16, column l % 16. Expected values are exact rationals (Fraction)
rounded to binary32 here.

Precision: with inputs whose products and partial sums are all exact in binary32 (small integers, powers of
two) every summation order gives the same exact result, so the check is bit-exact. For random f16/bf16
inputs the model's documented arithmetic (exact products, binary64 sum in K order, one rounding to
binary32) is within half a binary32 ulp of the exact value plus 17 * 2^-53 of the sum of the terms'
magnitudes (the binary64 sum's own error); the check allows exactly that.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest
from exact_floats import bits as f32_bits
from exact_floats import round_f32
from exact_floats import value as f32_value
from gfx11_asm import run

from amdgpu_models.core import matrix_ops
from amdgpu_models.core.wave import Unsupported

F16 = "v_wmma_f32_16x16x16_f16 v[16:23], v[0:7], v[8:15], v[16:23]"
BF16 = "v_wmma_f32_16x16x16_bf16 v[24:31], v[0:7], v[8:15], v[16:23]"
rng = np.random.default_rng(20261206)


def f16_bits(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f16_value(h: int) -> Fraction:
    return Fraction(struct.unpack("<e", struct.pack("<H", h))[0])


def bf16_value(h: int) -> Fraction:
    return f32_value(h << 16)


def operand_vgprs(halves: list[list[int]], outer_is_row: bool) -> dict[int, list[int]]:
    """8 VGPRs (numbered from 0) of an A (outer_is_row: halves[m][k]) or B (halves[k][n]) operand."""
    regs = {}
    for r in range(8):
        lanes = []
        for lane in range(32):
            i = lane % 16
            lo, hi = (halves[i][2 * r], halves[i][2 * r + 1]) if outer_is_row else \
                (halves[2 * r][i], halves[2 * r + 1][i])
            lanes.append(hi << 16 | lo)
        regs[r] = lanes
    return regs


def accumulator_vgprs(c: list[list[int]]) -> dict[int, list[int]]:
    return {v: [c[2 * v + lane // 16][lane % 16] for lane in range(32)] for v in range(8)}


def result_matrix(wave, first: int) -> list[list[int]]:
    d = [[0] * 16 for _ in range(16)]
    for v in range(8):
        for lane in range(32):
            d[2 * v + lane // 16][lane % 16] = int(wave.vgpr[first + v][lane])
    return d


def run_wmma(line: str, a: list[list[int]], b: list[list[int]], c: list[list[int]], exec_mask: int = 0xFFFFFFFF):
    vgpr = {**operand_vgprs(a, True), **{8 + r: v for r, v in operand_vgprs(b, False).items()},
            **{16 + r: v for r, v in accumulator_vgprs(c).items()}}
    return run(line, vgpr=vgpr, exec_mask=exec_mask)


def exact_product(a, b, c, value) -> list[list[Fraction]]:
    return [[sum((value(a[m][k]) * value(b[k][n]) for k in range(16)), f32_value(c[m][n])) for n in range(16)]
            for m in range(16)]


def test_small_integers_are_multiplied_exactly_in_the_documented_layout() -> None:
    # every row, column and K index different, so a lane, half or row misplaced anywhere changes the result
    ia = rng.integers(-8, 9, (16, 16))
    ib = rng.integers(-8, 9, (16, 16))
    ic = rng.integers(-100, 101, (16, 16))
    a = [[f16_bits(float(x)) for x in row] for row in ia]
    b = [[f16_bits(float(x)) for x in row] for row in ib]
    c = [[f32_bits(float(x)) for x in row] for row in ic]
    wave = run_wmma(F16, a, b, c)
    want = [[f32_bits(float(sum(int(ia[m][k]) * int(ib[k][n]) for k in range(16)) + int(ic[m][n])))
             for n in range(16)] for m in range(16)]
    assert result_matrix(wave, 16) == want


def test_bf16_powers_of_two_and_an_accumulator_in_place() -> None:
    exps = rng.integers(-10, 11, (2, 16, 16))
    signs = rng.choice([-1, 1], (2, 16, 16))
    a = [[f32_bits(float(s) * 2.0 ** int(e)) >> 16 for s, e in zip(srow, erow, strict=True)]
         for srow, erow in zip(signs[0], exps[0], strict=True)]
    b = [[f32_bits(float(s) * 2.0 ** int(e)) >> 16 for s, e in zip(srow, erow, strict=True)]
         for srow, erow in zip(signs[1], exps[1], strict=True)]
    c = [[f32_bits(float(m - n)) for n in range(16)] for m in range(16)]
    # products from 2^-20 to 2^20 and C below 2^4: their sums need at most 46 bits, exact in binary64 (so the
    # model's order cannot matter) but not in binary32
    exact = exact_product(a, b, c, bf16_value)
    wave = run_wmma(BF16, a, b, c)
    assert result_matrix(wave, 24) == [[round_f32(x) for x in row] for row in exact]
    # D = C (F16's destination is its accumulator): C is read before D is written
    wave = run_wmma(F16, [[f16_bits(1.0)] * 16] * 16, [[f16_bits(0.5)] * 16] * 16, [[f32_bits(3.0)] * 16] * 16)
    assert result_matrix(wave, 16) == [[f32_bits(11.0)] * 16] * 16


def random_f16(n: int) -> list[int]:
    """Finite binary16 patterns: any sign and mantissa, exponent field 0-30 (denormals included)."""
    return [int(s) << 15 | int(e) << 10 | int(m) for s, e, m in
            zip(rng.integers(0, 2, n), rng.integers(0, 31, n), rng.integers(0, 1 << 10, n), strict=True)]


def random_bf16(n: int) -> list[int]:
    """bfloat16 patterns of any sign and mantissa, exponents 2^-27 .. 2^32."""
    return [int(s) << 15 | int(e) << 7 | int(m) for s, e, m in
            zip(rng.integers(0, 2, n), rng.integers(100, 160, n), rng.integers(0, 1 << 7, n), strict=True)]


@pytest.mark.parametrize(("line", "first", "halves", "value"), [
    (F16, 16, random_f16, f16_value),
    (BF16, 24, random_bf16, bf16_value),
])
def test_random_inputs_are_within_the_documented_precision(line, first, halves, value) -> None:
    def finite(n: int) -> list[list[int]]:
        flat = halves(n)
        return [flat[16 * i:16 * i + 16] for i in range(16)]
    a, b = finite(256), finite(256)
    c = [[f32_bits(float(x)) for x in row] for row in rng.standard_normal((16, 16))]
    exact = exact_product(a, b, c, value)
    got = result_matrix(run_wmma(line, a, b, c), first)
    for m in range(16):
        for n in range(16):
            magnitude = sum(abs(value(a[m][k]) * value(b[k][n])) for k in range(16)) + abs(f32_value(c[m][n]))
            nearest = round_f32(exact[m][n])
            half_ulp = abs(f32_value(nearest + 1 if nearest & 0x7FFFFFFF != 0x7F7FFFFF else nearest)
                           - f32_value(nearest)) / 2
            assert abs(f32_value(got[m][n]) - exact[m][n]) <= half_ulp + Fraction(17, 2**53) * magnitude, (m, n)


def test_lane_halves_that_disagree_and_a_partial_exec_stop_the_run() -> None:
    one = [[f16_bits(1.0)] * 16] * 16
    zero = [[0] * 16] * 16
    vgpr = {**operand_vgprs(one, True), **{8 + r: v for r, v in operand_vgprs(one, False).items()}}
    vgpr[3] = vgpr[3][:16] + [f16_bits(2.0)] * 16  # lanes 16-31 of A are no copy of lanes 0-15
    with pytest.raises(Unsupported, match="differently"):
        run(F16, vgpr=vgpr)
    with pytest.raises(Unsupported, match="EXEC"):
        run_wmma(F16, one, one, zero, exec_mask=0xFFFF)


def test_special_values_give_the_canonical_nan_and_infinities() -> None:
    a = [[f16_bits(1.0)] * 16 for _ in range(16)]
    b = [[f16_bits(1.0)] * 16 for _ in range(16)]
    a[0][0] = 0x7C00  # +inf in row 0
    b[0][1] = 0  # ... times 0 in column 1: NaN
    c = [[0] * 16 for _ in range(16)]
    c[5][5] = 0xFF800000  # -inf
    d = result_matrix(run_wmma(F16, a, b, c), 16)
    assert d[0][0] == 0x7F800000 and d[0][1] == 0x7FC00000 and d[5][5] == 0xFF800000
    assert d[1][1] == f32_bits(15.0)


def test_a_layout_is_a_separate_piece() -> None:
    """Another generation's layout (8 halves per lane, lane l holding K indices 8 * (l / 16) .. + 7, the
    accumulator's row v + 8 * (l / 16)) plugs into the same gather and multiply."""
    rdna4 = matrix_ops.Layout("8 halves per lane", operand_registers=4,
                              operand=lambda reg, lane, half: (lane % 16, 8 * (lane // 16) + 2 * reg + half),
                              accumulator=lambda reg, lane: (reg + 8 * (lane // 16), lane % 16))
    halves = rng.integers(0, 1 << 16, (16, 16))
    regs = np.zeros((4, 32), dtype=np.uint32)
    for r in range(4):
        for lane in range(32):
            k = 8 * (lane // 16) + 2 * r
            regs[r, lane] = int(halves[lane % 16][k + 1]) << 16 | int(halves[lane % 16][k])
    assert matrix_ops.gather_operand(regs, rdna4).tolist() == halves.tolist()
    acc = rng.integers(0, 1 << 32, (8, 32), dtype=np.uint64).astype(np.uint32)
    matrix = matrix_ops.gather_accumulator(acc, rdna4)
    assert all(matrix[r + 8 * (lane // 16), lane % 16] == acc[r, lane] for r in range(8) for lane in range(32))
    assert matrix_ops.scatter_accumulator(matrix, rdna4).tolist() == acc.tolist()
    with pytest.raises(ValueError, match="leaves elements out"):
        _ = matrix_ops.Layout("broken", 4, lambda reg, lane, half: (lane % 16, 2 * reg + half),
                              lambda reg, lane: (reg, lane % 16)).operand_index
