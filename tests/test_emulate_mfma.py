"""CDNA MFMA (wave64) and AGPRs on programs llvm-mc-22 assembles for gfx90a, gfx942 and gfx950, decoded through the
CDNA tables (amdgpu_models/isa/cdna.py) and run on a wave of the shared core.

Every MFMA form the farm's CDNA objects use (amdgpu_models/core/matrix_ops.py lists them): 16x16x16 and 32x32x8
f16/bf16 on all three targets (gfx90a's spellings v_mfma_f32_16x16x16f16, ..._bf16_1k), gfx950's 16x16x32 and
32x32x16. The test places A, B and C by the layouts written out here from AMD's CDNA3/CDNA4 ISA guides as AMD's
Matrix Instruction Calculator prints them (register and lane of each element; not taken from the model):
- A[i][k] of an M x N x K form with h halves per lane (h = 4, or 8 for gfx950's double-K forms): lane
  i + M * (k // h), register (k % h) // 2, the low half when k is even; B[k][j] the same with j for i.
- D[i][j], 16x16: register i % 4, lane j + 16 * (i // 4); 32x32: register i % 4 + 4 * (i // 8), lane
  j + 32 * ((i // 4) % 2). C likewise.

Precision: with small integers every summation order is exact, so the check is bit-exact; a permutation test
(B selecting one column of A per column of D, A distinct integers) shows each element of A lands where the
layout says, and its transpose each element of B. A permutation of K common to A and B changes no product (only
the order of the sum), so the model's layout tables are also compared with the documented places directly.
Random f16/bf16 inputs: the model's documented arithmetic (exact products, a binary64 sum in K order from C,
one rounding to binary32) is within half a binary32 ulp of the exact value plus (K + 1) * 2^-53 of the sum of
the terms' magnitudes (the binary64 sum's own error); the check allows exactly that. Expected values are exact
rationals (Fraction) rounded here (tests/exact_floats.py).
"""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np
import pytest
from exact_floats import bits as f32_bits
from exact_floats import round_f32
from exact_floats import value as f32_value
from gfx11_asm import assemble, assembler

from amdgpu_models.core import matrix_ops
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Unsupported, Wave
from amdgpu_models.isa import cdna

rng = np.random.default_rng(20261206)
ALL = (1 << 64) - 1


class Form:
    """One MFMA operation: its size (M = N), K, input type, and its mnemonic per target."""

    def __init__(self, size: int, depth: int, kind: str, names: dict[str, str]) -> None:
        self.size, self.depth, self.kind, self.names = size, depth, kind, names
        self.halves = depth * size // 64  # per lane
        self.operand_regs = self.halves // 2
        self.acc_regs = size * size // 64

    def __repr__(self) -> str:
        return f"{self.size}x{self.size}x{self.depth}_{self.kind}"


def _names(gfx90a: str | None, new: str, gfx950_only: bool = False) -> dict[str, str]:
    if gfx950_only:
        return {"gfx950": new}
    return {"gfx90a": gfx90a or new, "gfx942": new, "gfx950": new}


FORMS = [
    Form(16, 16, "f16", _names("v_mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16_f16")),
    Form(16, 16, "bf16", _names("v_mfma_f32_16x16x16bf16_1k", "v_mfma_f32_16x16x16_bf16")),
    Form(32, 8, "f16", _names("v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8_f16")),
    Form(32, 8, "bf16", _names("v_mfma_f32_32x32x8bf16_1k", "v_mfma_f32_32x32x8_bf16")),
    Form(16, 32, "f16", _names(None, "v_mfma_f32_16x16x32_f16", True)),
    Form(16, 32, "bf16", _names(None, "v_mfma_f32_16x16x32_bf16", True)),
    Form(32, 16, "f16", _names(None, "v_mfma_f32_32x32x16_f16", True)),
    Form(32, 16, "bf16", _names(None, "v_mfma_f32_32x32x16_bf16", True)),
]
CASES = [pytest.param(form, mcpu, id=f"{mcpu}-{form.names[mcpu]}") for form in FORMS for mcpu in form.names]


# -- the documented layouts (written out here, see the module's notes) ------------------------------------------

def operand_place(form: Form, outer: int, k: int) -> tuple[int, int, int]:
    """(register, lane, half) of A[outer][k] (or B[k][outer])."""
    return (k % form.halves) // 2, outer + form.size * (k // form.halves), k % 2


def accumulator_place(form: Form, i: int, j: int) -> tuple[int, int]:
    """(register, lane) of C[i][j] and D[i][j]."""
    if form.size == 16:
        return i % 4, j + 16 * (i // 4)
    return i % 4 + 4 * (i // 8), j + 32 * ((i // 4) % 2)


def operand_regs(form: Form, halves: list[list[int]], outer_is_row: bool) -> np.ndarray:
    """The registers of A (halves[i][k]) or B (halves[k][j])."""
    regs = np.zeros((form.operand_regs, 64), dtype=np.uint32)
    for outer in range(form.size):
        for k in range(form.depth):
            reg, lane, half = operand_place(form, outer, k)
            value = halves[outer][k] if outer_is_row else halves[k][outer]
            regs[reg, lane] |= np.uint32(value << 16 * half)
    return regs


def accumulator_regs(form: Form, c: list[list[int]]) -> np.ndarray:
    regs = np.zeros((form.acc_regs, 64), dtype=np.uint32)
    for i in range(form.size):
        for j in range(form.size):
            regs[accumulator_place(form, i, j)] = c[i][j]
    return regs


def result_matrix(form: Form, regs: np.ndarray) -> list[list[int]]:
    return [[int(regs[accumulator_place(form, i, j)]) for j in range(form.size)] for i in range(form.size)]


# -- values -------------------------------------------------------------------------------------------------

def f16_bits(x: float) -> int:
    return struct.unpack("<H", struct.pack("<e", x))[0]


def half_bits(form: Form, x: float) -> int:
    """x (exact in the form's type) as its 16-bit pattern."""
    return f16_bits(x) if form.kind == "f16" else f32_bits(x) >> 16


def half_value(form: Form, h: int) -> Fraction:
    if form.kind == "f16":
        return Fraction(struct.unpack("<e", struct.pack("<H", h))[0])
    return f32_value(h << 16)


def exact_product(form: Form, a, b, c) -> list[list[Fraction]]:
    return [[sum((half_value(form, a[i][k]) * half_value(form, b[k][j]) for k in range(form.depth)),
                 f32_value(c[i][j])) for j in range(form.size)] for i in range(form.size)]


# -- running ------------------------------------------------------------------------------------------------

def run(mcpu: str, source: str, vgpr: dict[int, np.ndarray] | None = None, agpr: dict[int, np.ndarray] | None = None,
        exec_mask: int = ALL, vgprs: int = 128, agprs: int = 64, lds: Lds | None = None,
        sgpr: dict[int, int] | None = None, memory: Memory | None = None) -> Wave:
    """`source` assembled for `mcpu`, decoded through the CDNA table and run on a fresh wave64 whose unified
    register file has `vgprs` VGPRs and `agprs` AGPRs; vgpr/agpr: the first register of a block -> its rows."""
    code = assemble(source + "\ns_endpgm", mcpu)
    wave = Wave(vgprs=vgprs, lanes=64, agprs=agprs)
    wave.sgpr[126], wave.sgpr[127] = exec_mask & 0xFFFFFFFF, exec_mask >> 32
    for reg, value in (sgpr or {}).items():
        wave.sgpr[reg] = value
    for file, blocks in ((wave.vgpr, vgpr), (wave.agpr, agpr)):
        for first, rows in (blocks or {}).items():
            file[first:first + len(rows)] = rows
    run_program(wave, cdna.decode(cdna.ISAS[mcpu], code, 0, assembler(), mcpu), memory or Memory(),
                lds or Lds.of_size(0))
    return wave


def run_form(form: Form, mcpu: str, a, b, c, *, b_in_agprs: bool = True) -> list[list[int]]:
    """D = A x B + C with A in v[0:], B in a[0:] (or v[16:]), C in v[32:], D in v[64:] (as the objects' MFMA)."""
    ar, br = operand_regs(form, a, True), operand_regs(form, b, False)
    n, acc = form.operand_regs, form.acc_regs
    b_reg = f"a[0:{n - 1}]" if b_in_agprs else f"v[16:{16 + n - 1}]"
    line = f"{form.names[mcpu]} v[64:{64 + acc - 1}], v[0:{n - 1}], {b_reg}, v[32:{32 + acc - 1}]"
    vgpr = {0: ar, 32: accumulator_regs(form, c), **({} if b_in_agprs else {16: br})}
    wave = run(mcpu, line, vgpr=vgpr, agpr={0: br} if b_in_agprs else {})
    return result_matrix(form, wave.vgpr[64:64 + acc])


def integers(form: Form, low: int, high: int, shape: tuple[int, int]) -> list[list[int]]:
    return [[half_bits(form, float(x)) for x in row] for row in rng.integers(low, high + 1, shape)]


# -- tests --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("form", "mcpu"), CASES)
def test_small_integers_are_multiplied_exactly_in_the_documented_layout(form: Form, mcpu: str) -> None:
    # every row, column and K index different, so an element misplaced anywhere changes the result
    ia, ib = rng.integers(-8, 9, (form.size, form.depth)), rng.integers(-8, 9, (form.depth, form.size))
    ic = rng.integers(-100, 101, (form.size, form.size))
    a = [[half_bits(form, float(x)) for x in row] for row in ia]
    b = [[half_bits(form, float(x)) for x in row] for row in ib]
    c = [[f32_bits(float(x)) for x in row] for row in ic]
    want = [[f32_bits(float(sum(int(ia[i][k]) * int(ib[k][j]) for k in range(form.depth)) + int(ic[i][j])))
             for j in range(form.size)] for i in range(form.size)]
    assert run_form(form, mcpu, a, b, c, b_in_agprs=mcpu != "gfx942") == want


@pytest.mark.parametrize("form", [f for f in FORMS if f.kind == "f16"], ids=repr)
def test_each_element_of_a_and_b_lands_where_the_layout_says(form: Form) -> None:
    """A holds distinct integers, B selects column perm[j % K] of A for column j of D: D[i][j] is A[i][perm[j % K]]
    exactly, for every element of A. Then the transpose: A selects, B's distinct elements land in D."""
    mcpu = "gfx950"
    perm = rng.permutation(form.depth)
    distinct = [[half_bits(form, float(i * form.depth + k)) for k in range(form.depth)] for i in range(form.size)]
    select = [[half_bits(form, float(k == perm[j % form.depth])) for j in range(form.size)] for k in range(form.depth)]
    zero = [[0] * form.size for _ in range(form.size)]
    d = run_form(form, mcpu, distinct, select, zero)
    assert d == [[f32_bits(float(i * form.depth + perm[j % form.depth])) for j in range(form.size)]
                 for i in range(form.size)]
    # B[k][j] distinct, A[i][k] = 1 when k == perm[i % K]: D[i][j] = B[perm[i % K]][j]
    distinct_b = [[half_bits(form, float(k * form.size + j)) for j in range(form.size)] for k in range(form.depth)]
    select_a = [[half_bits(form, float(k == perm[i % form.depth])) for k in range(form.depth)]
                for i in range(form.size)]
    d = run_form(form, mcpu, select_a, distinct_b, zero, b_in_agprs=False)
    assert d == [[f32_bits(float(perm[i % form.depth] * form.size + j)) for j in range(form.size)]
                 for i in range(form.size)]


@pytest.mark.parametrize("form", FORMS, ids=repr)
def test_the_model_reads_each_register_half_as_the_documented_element(form: Form) -> None:
    """The model's layout against the documented one, element by element: a permutation of K shared by A and B
    leaves every product unchanged (only the summation order moves), so no multiply can show it; this can."""
    layout = matrix_ops.MFMA[form.names["gfx950"]].layout
    a = rng.permutation(1 << 16)[:form.size * form.depth].reshape(form.size, form.depth)  # distinct patterns
    assert matrix_ops.gather_operand(operand_regs(form, a.tolist(), True), layout).tolist() == a.tolist()
    c = rng.permutation(1 << 20)[:form.size * form.size].reshape(form.size, form.size)
    regs = accumulator_regs(form, c.tolist())
    assert matrix_ops.gather_accumulator(regs, layout).tolist() == c.tolist()
    assert matrix_ops.scatter_accumulator(c.astype(np.uint32), layout).tolist() == regs.tolist()


def test_c_and_d_layouts_and_an_accumulator_in_agprs_in_place() -> None:
    """A = B = 0, C distinct: D = C element by element, C and D the same AGPRs (the objects' acc_cd form is not
    used, but LLVM encodes it), for both accumulator shapes."""
    for form, mcpu in ((FORMS[0], "gfx90a"), (FORMS[3], "gfx942"), (FORMS[6], "gfx950")):
        c = [[f32_bits(float(i * form.size + j)) for j in range(form.size)] for i in range(form.size)]
        n, acc = form.operand_regs, form.acc_regs
        line = f"{form.names[mcpu]} a[0:{acc - 1}], v[0:{n - 1}], v[8:{8 + n - 1}], a[0:{acc - 1}]"
        wave = run(mcpu, line, agpr={0: accumulator_regs(form, c)})
        assert result_matrix(form, wave.agpr[0:acc]) == c, (form, mcpu)
        # then C = 0 as the inline constant, A = B = 1: every element K
        ones = operand_regs(form, [[half_bits(form, 1.0)] * form.depth] * form.size, True)
        line = f"{form.names[mcpu]} v[32:{32 + acc - 1}], v[0:{n - 1}], a[0:{n - 1}], 0"
        wave = run(mcpu, line, vgpr={0: ones}, agpr={0: ones})
        assert result_matrix(form, wave.vgpr[32:32 + acc]) == [[f32_bits(float(form.depth))] * form.size] * form.size


@pytest.mark.parametrize("form", [FORMS[1], FORMS[2], FORMS[5], FORMS[7]], ids=repr)
def test_powers_of_two_are_rounded_once(form: Form) -> None:
    """Products from 2^-20 to 2^20 (inputs 2^-10 .. 2^10, in both types' normal range): with C's integers their
    sums span at most 46 bits, exact in binary64 but not in binary32; the result is the sum rounded once."""
    exps = rng.integers(-10, 11, (2, form.size, form.depth))
    signs = rng.choice([-1, 1], (2, form.size, form.depth))
    a = [[half_bits(form, float(s) * 2.0 ** int(e)) for s, e in zip(sr, er, strict=True)]
         for sr, er in zip(signs[0], exps[0], strict=True)]
    bt = [[half_bits(form, float(s) * 2.0 ** int(e)) for s, e in zip(sr, er, strict=True)]
          for sr, er in zip(signs[1], exps[1], strict=True)]
    b = [list(row) for row in zip(*bt, strict=True)]  # [k][j]
    c = [[f32_bits(float(i - j)) for j in range(form.size)] for i in range(form.size)]
    exact = exact_product(form, a, b, c)
    assert run_form(form, "gfx950", a, b, c) == [[round_f32(x) for x in row] for row in exact]


def random_halves(form: Form, n: int) -> list[int]:
    """Finite f16 patterns (any sign and mantissa, exponent field 0-30: denormals included), or bf16 of any
    sign and mantissa with exponents 2^-27 .. 2^32."""
    sign = rng.integers(0, 2, n)
    if form.kind == "f16":
        return [int(s) << 15 | int(e) << 10 | int(m)
                for s, e, m in zip(sign, rng.integers(0, 31, n), rng.integers(0, 1 << 10, n), strict=True)]
    return [int(s) << 15 | int(e) << 7 | int(m)
            for s, e, m in zip(sign, rng.integers(100, 160, n), rng.integers(0, 1 << 7, n), strict=True)]


@pytest.mark.parametrize(("form", "mcpu"), [(f, "gfx950") for f in FORMS], ids=repr)
def test_random_inputs_are_within_the_documented_precision(form: Form, mcpu: str) -> None:
    flat_a, flat_b = random_halves(form, form.size * form.depth), random_halves(form, form.size * form.depth)
    a = [flat_a[form.depth * i:form.depth * (i + 1)] for i in range(form.size)]
    b = [flat_b[form.size * k:form.size * (k + 1)] for k in range(form.depth)]
    c = [[f32_bits(float(x)) for x in row] for row in rng.standard_normal((form.size, form.size))]
    exact = exact_product(form, a, b, c)
    got = run_form(form, mcpu, a, b, c)
    for i in range(form.size):
        for j in range(form.size):
            magnitude = sum(abs(half_value(form, a[i][k]) * half_value(form, b[k][j])) for k in range(form.depth)) \
                + abs(f32_value(c[i][j]))
            nearest = round_f32(exact[i][j])
            half_ulp = abs(f32_value(nearest + 1) - f32_value(nearest)) / 2
            allowed = half_ulp + Fraction(form.depth + 1, 2**53) * magnitude
            assert abs(f32_value(got[i][j]) - exact[i][j]) <= allowed, (i, j)


@pytest.mark.parametrize("mcpu", ["gfx90a", "gfx942", "gfx950"])
def test_accvgpr_moves_between_the_two_files(mcpu: str) -> None:
    lanes = np.arange(64, dtype=np.uint32)
    source = ("v_accvgpr_write_b32 a5, v3\nv_accvgpr_read_b32 v7, a5\nv_accvgpr_mov_b32 a6, a5\n"
              "v_accvgpr_write_b32 a1, 7\nv_accvgpr_read_b32 v8, a6")
    old = np.full(64, 0xDEAD, dtype=np.uint32)
    half = (1 << 32) - 1 << 32  # the upper 32 lanes only
    wave = run(mcpu, source, vgpr={3: [lanes * 3 + 1], 7: [old], 8: [old]}, agpr={1: [old], 5: [old], 6: [old]},
               exec_mask=half)
    upper = lanes >= 32
    moved = np.where(upper, lanes * 3 + 1, 0xDEAD)
    assert wave.agpr[5].tolist() == moved.tolist()
    assert wave.vgpr[7].tolist() == moved.tolist() and wave.agpr[6].tolist() == moved.tolist()
    assert wave.vgpr[8].tolist() == moved.tolist()
    assert wave.agpr[1].tolist() == np.where(upper, 7, 0xDEAD).tolist()
    assert wave.vgpr[5].tolist() == [0] * 64  # the VGPR with a5's number is another register


def test_the_file_is_the_descriptors_split_and_agprs_are_bounded() -> None:
    wave = Wave(vgprs=12, lanes=64, agprs=4)  # e.g. ACCUM_OFFSET 12 of a 16-register allocation
    assert wave.registers.shape == (16, 64)
    wave.agpr[0] = 5
    assert wave.registers[12].tolist() == [5] * 64  # AGPR 0 follows the last VGPR
    with pytest.raises(Unsupported, match="a4 is beyond the 4 AGPRs"):
        run("gfx942", "v_accvgpr_write_b32 a4, v0", vgprs=12, agprs=4)
    with pytest.raises(Unsupported, match=r"a0\.\.a1 \(B\) is beyond the kernel.s 1 AGPRs"):
        run("gfx942", "v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], a[0:1], v[0:3]", vgprs=12, agprs=1)


def test_modifiers_and_exec_that_the_model_does_not_run_stop_it() -> None:
    line = "v_mfma_f32_16x16x16_f16 v[0:3], v[4:5], v[6:7], v[0:3]"
    with pytest.raises(Unsupported, match="cbsz/abid/blgp"):
        run("gfx942", line + " cbsz:1 abid:1")
    with pytest.raises(Unsupported, match="blgp"):
        run("gfx90a", "v_mfma_f32_16x16x16f16 v[0:3], v[4:5], v[6:7], v[0:3] blgp:2")
    with pytest.raises(Unsupported, match="EXEC"):
        run("gfx950", line, exec_mask=ALL >> 1)


@pytest.mark.parametrize("mcpu", ["gfx90a", "gfx950"])
def test_agprs_as_lds_data(mcpu: str) -> None:
    """ds_write_b128 from AGPRs and ds_read_b128 / ds_read2_b64 into AGPRs (gfx950's sdpa_cdna), a round trip."""
    lanes = np.arange(64, dtype=np.uint32)
    rows = [lanes * 4 + i for i in range(4)]
    source = ("ds_write_b128 v0, a[4:7] offset:16\nds_read_b128 a[8:11], v0 offset:16\n"
              "ds_read2_b64 a[12:15], v0 offset0:2 offset1:3")
    wave = run(mcpu, source, vgpr={0: [lanes * 64]}, agpr={4: rows}, lds=Lds.of_size(64 * 64))
    assert [r.tolist() for r in wave.agpr[8:12]] == [r.tolist() for r in rows]
    assert [r.tolist() for r in wave.agpr[12:16]] == [r.tolist() for r in rows]


@pytest.mark.parametrize(("mcpu", "dwords"), [("gfx90a", 2), ("gfx942", 2), ("gfx950", 4)])
def test_a_buffer_load_into_agprs(mcpu: str, dwords: int) -> None:
    """buffer_load_dwordx2 (gfx90a, gfx942) and _dwordx4 (gfx950) into AGPRs, as sdpa_cdna loads K: lane l reads
    dwords dwords * l .. + dwords - 1 of the buffer."""
    memory = Memory()
    data = (np.arange(64 * dwords, dtype=np.uint32) * 7 + 1)
    base = memory.allocate("k", data.view(np.uint8))
    descriptor = {4: base & 0xFFFFFFFF, 5: base >> 32, 6: data.nbytes, 7: 0x00027000}  # stride 0, NUM_RECORDS
    lanes = np.arange(64, dtype=np.uint32)
    source = f"buffer_load_dwordx{dwords} a[2:{1 + dwords}], v0, s[4:7], 0 offen"
    wave = run(mcpu, source, vgpr={0: [lanes * 4 * dwords]}, sgpr=descriptor, memory=memory)
    assert [wave.agpr[2 + i].tolist() for i in range(dwords)] == \
        [data[dwords * lanes + i].tolist() for i in range(dwords)]
    assert not wave.vgpr[2:2 + dwords].any()  # the VGPRs of the same numbers are other registers
