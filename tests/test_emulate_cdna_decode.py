"""sdpa_cdna_decode (kernels_src/sdpa_decode, the CDNA build) on the CDNA models.

Fast: the operations only these objects use among the CDNA families (a listing of every CDNA object: scalar bit
tests and shifted adds, 64-bit compares, v_med3_i32, v_subb_co_u32's borrow through VCC as a register pair, ...),
on programs llvm-mc-22 assembles for gfx90a, gfx942 and gfx950, expected values worked out here from the
operations' documented behaviour (GFX9's buffer range check itself: tests/test_emulate_gfx9.py). Slow: built
objects of the three targets within tolerance through sdpa_rdna_decode's check
(farm/emulate/attention/decode_check.py), source mutations built for gfx942 reported outside (among them the V
staging rows back in soffset, which GFX9's range check does not count), and a corrupted instruction. The objects
are built in copies of this checkout (only the rows these tests run)."""

from __future__ import annotations

from pathlib import Path

import gfx9_asm
import numpy as np
import pytest
from conftest import copy_project, run_farm
from corrupt import assert_stopped_or_outside, vop1_as
from gfx9_asm import MCPUS as CDNA
from gfx9_asm import assembler, pair
from object_runs import run_object

from amdgpu_models.core.wave import Wave
from amdgpu_models.isa import cdna
from farm.emulate.attention import tolerance

OP = "sdpa_cdna_decode"
SOURCE = "sdpa_decode/sdpa_decode.py"
# One object per CDNA target, between them both dtypes, both masks, every head dim and chunk 32 / 64 / 128.
BUILT = [
    ("gfx90a", "sdpa_cdna_decode_f16_d64_causal_c128_m16"),
    ("gfx942", "sdpa_cdna_decode_bf16_d128_none_c64_m16"),
    ("gfx950", "sdpa_cdna_decode_bf16_d256_causal_c32_m16"),
]
# The V staging rows back in the SGPR offset, as the kernel was before (GFX9 does not count soffset in the range
# check: a run of keys crossing seqlen_k reads past V).
ROWS_IN_SOFFSET = ('        self.row_in_voffset = m.family == "cdna"\n', '        self.row_in_voffset = False\n')
# (source text, its replacement, the output reported outside): each built for gfx942
MUTATIONS = {
    "V rows in the SGPR offset": (*ROWS_IN_SOFFSET, "o"),
    "LSE's log dropped": ("lse_val = has.select((ref + _log2(wsum)) * LN2", "lse_val = has.select((ref + wsum) * LN2",
                          "lse"),
}
MUTATED = ("gfx942", "sdpa_cdna_decode_f16_d64_none_c64_m16")


LANES = np.arange(64, dtype=np.int64)
VCC = 106
U32 = 0xFFFFFFFF


def run64(mcpu: str, source: str, vgpr: dict[int, np.ndarray] | None = None, sgpr: dict[int, int] | None = None,
          ) -> Wave:
    """gfx9_asm.run with signed values given as their 32-bit two's complement."""
    return gfx9_asm.run(source, mcpu, sgpr={reg: value & U32 for reg, value in (sgpr or {}).items()},
                        vgpr={reg: np.asarray(values, dtype=np.int64) & U32 for reg, values in (vgpr or {}).items()})


def bits(values) -> int:
    return sum(1 << lane for lane, on in enumerate(values) if on)


@pytest.mark.parametrize("mcpu", CDNA)
def test_subtract_with_borrow_reads_and_writes_vcc_as_a_pair(mcpu: str) -> None:
    """v_subb_co_u32: D = S0 - S1 - borrow-in (the lane's VCC bit), borrow out (S0 < S1 + borrow-in) to VCC; lanes
    32-63 take theirs from VCC_HI (the 64-bit halves' subtraction the kernel does with v_sub_co_u32 first)."""
    a = (LANES * 0x0100_0001) & U32
    b = np.where(LANES % 3 == 0, a, np.where(LANES % 3 == 1, a + 1, a - 1)) & U32  # equal, larger, smaller
    c = ((LANES % 2 == 1) | (LANES >= 48)).astype(np.int64)
    borrow_in = bits(c)
    wave = run64(mcpu, "v_subb_co_u32_e32 v2, vcc, v0, v1, vcc", {0: a, 1: b},
                 {VCC: borrow_in & U32, VCC + 1: borrow_in >> 32})
    assert wave.vgpr[2].tolist() == ((a - b - c) & U32).tolist()
    assert pair(wave, VCC) == bits(a < b + c)


@pytest.mark.parametrize("mcpu", CDNA)
def test_integer_valu_operations_of_the_decode_objects(mcpu: str) -> None:
    """v_med3_i32 (the middle of three signed values), v_and_or_b32 ((S0 & S1) | S2), v_ashrrev_i32 (S1 >> S0,
    arithmetic), v_max_i32 (signed), in the forms the objects have them."""
    x = (LANES - 20) * 3  # -60 .. 129
    wave = run64(mcpu, "v_med3_i32 v1, s1, 0, 16\nv_med3_i32 v2, v0, 0, 16\nv_and_or_b32 v3, v0, 48, v4\n"
                 "v_ashrrev_i32_e32 v5, 31, v0\nv_ashrrev_i32_e32 v6, 2, v0\nv_max_i32_e32 v7, v0, v8",
                 {0: x, 4: LANES << 8, 8: -LANES}, {1: -7})
    signed = [int(v) for v in wave.vgpr[2].view(np.int32)]
    assert wave.vgpr[1].tolist() == [0] * 64 and signed == np.clip(x, 0, 16).tolist()
    assert wave.vgpr[3].tolist() == (((x & U32) & 48) | (LANES << 8)).tolist()
    assert wave.vgpr[5].view(np.int32).tolist() == np.where(x < 0, -1, 0).tolist()
    assert wave.vgpr[6].view(np.int32).tolist() == (x >> 2).tolist()  # numpy's >> on signed is arithmetic
    assert wave.vgpr[7].view(np.int32).tolist() == np.maximum(x, -LANES).tolist()


@pytest.mark.parametrize("mcpu", CDNA)
def test_compares_write_a_64_lane_mask(mcpu: str) -> None:
    """v_cmp_gt_i64 (signed 64-bit, here of SGPR pairs against 0 into SGPR pairs: every lane alike),
    v_cmp_le_u32 (unsigned: an SGPR against each lane), v_cmp_ne_u32."""
    values = (5, 0, -(1 << 40), 1 << 40)
    y = np.where(LANES % 4 == 0, 0xFFFFFFF0, LANES * 7)
    source = "\n".join(f"v_cmp_gt_i64_e64 s[{20 + 2 * i}:{21 + 2 * i}], s[{40 + 2 * i}:{41 + 2 * i}], 0"
                       for i in range(len(values)))
    sgpr = {reg: value for i, v in enumerate(values) for reg, value in ((40 + 2 * i, v), (41 + 2 * i, v >> 32))}
    wave = run64(mcpu, source + "\nv_cmp_le_u32_e32 vcc, s0, v6\nv_cmp_ne_u32_e64 s[10:11], v3, v6",
                 {6: y, 3: np.where(LANES < 40, y, 1)}, {0: 100, **sgpr})
    assert [pair(wave, 20 + 2 * i) for i in range(len(values))] == [bits([v > 0] * 64) for v in values]
    assert pair(wave, VCC) == bits(100 <= y)
    assert pair(wave, 10) == bits((LANES >= 40) & (y != 1))


@pytest.mark.parametrize("mcpu", CDNA)
def test_scalar_bit_tests_shifts_and_shifted_adds(mcpu: str) -> None:
    """s_bitcmp0_b32 (SCC = bit S1 of S0 is 0), s_bitset1_b32 (D |= 1 << S0), s_cmp_gt_i32 (signed),
    s_lshl1_add_u32 / s_lshl2_add_u32 ((S0 << n) + S1, SCC = the carry out of 32 bits), s_lshr_b64; each SCC
    kept by s_cselect_b32."""
    tests = ("s_bitcmp0_b32 s14, 2", "s_bitcmp0_b32 s14, 3", "s_cmp_gt_i32 s34, 0", "s_cmp_gt_i32 s35, 0",
             "s_lshl2_add_u32 s5, s3, s33", "s_lshl2_add_u32 s6, s36, s37", "s_lshl1_add_u32 s4, s3, s33")
    source = "\n".join(f"{test}\ns_cselect_b32 s{60 + i}, 1, 0" for i, test in enumerate(tests))
    wave = run64(mcpu, source + "\ns_bitset1_b32 s2, 9\ns_lshr_b64 s[0:1], s[38:39], 24",
                 sgpr={14: 0b1011, 34: 1, 35: -1, 3: 0x4000_0001, 33: 0x10, 36: 0x3FFF_FFFF, 37: 3, 2: 0x11,
                       38: 0x89AB_CDEF, 39: 0x0123_4567})
    assert wave.sgpr[60:60 + len(tests)].tolist() == [1, 0, 1, 0, 1, 0, 0]  # (2^30 + 1) << 2 carries, << 1 not
    assert wave.sgpr[5] == (0x4000_0001 * 4 + 0x10) & U32 and wave.sgpr[6] == 0xFFFF_FFFF
    assert wave.sgpr[4] == 0x8000_0012
    assert wave.sgpr[2] == 0x211 and pair(wave, 0) == 0x0123_4567_89AB_CDEF >> 24


def _build(project: Path, rows: list[tuple[str, str]]) -> Path:
    targets = ",".join(sorted({target for target, _ in rows}))
    names = ",".join(f"{OP}/{target}/{name}" for target, name in rows)
    run_farm(project, "build", f"ops=[{OP}]", f"targets=[{targets}]", f"names=[{names}]", check=True)
    return project / "outputs" / OP


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """outputs/sdpa_cdna_decode of a copy of this checkout with the objects these tests run built."""
    return _build(copy_project(tmp_path_factory.mktemp("cdna_decode")), sorted({*BUILT, MUTATED}))


@pytest.mark.slow
@pytest.mark.parametrize(("target", "name"), BUILT)
def test_built_objects_are_within_tolerance(objects: Path, target: str, name: str) -> None:
    outcomes = run_object((objects / target / f"{name}.hsaco").read_bytes(), OP, target, name)
    assert outcomes and all(o.within for o in outcomes), [(o.case.facts(), o.measures) for o in outcomes]
    criteria = {m.criterion for o in outcomes for m in o.measures}
    assert {tolerance.LOWP, tolerance.ELEMENTWISE, tolerance.LSE_RULE, tolerance.MASKED_LSE} <= criteria
    assert any(o.case.name == "ragged" for o in outcomes)  # a launch whose last step is partial


@pytest.mark.slow
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_mutated_kernel_source_built_for_gfx942_is_outside(objects: Path, mutation: str, tmp_path: Path) -> None:
    old, new, output = MUTATIONS[mutation]
    target, name = MUTATED
    project = copy_project(tmp_path / "p")
    path = project / "kernels_src" / SOURCE
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {SOURCE}"
    path.write_text(text.replace(old, new))
    data = (_build(project, [MUTATED]) / target / f"{name}.hsaco").read_bytes()
    original_data = (objects / target / f"{name}.hsaco").read_bytes()
    assert data != original_data  # the mutation reached the object
    original, mutated = run_object(original_data, OP, target, name), run_object(data, OP, target, name)

    def within(outcome) -> bool:
        return all(m.within for m in outcome.measures if m.output == output)

    # a case whose `output` the original object gets right and the mutated one does not
    caught = [o.case.name for o, m in zip(original, mutated, strict=True) if within(o) and not within(m)]
    assert caught, [(o.case.name, o.measures) for o in mutated]
    if mutation == "V rows in the SGPR offset":  # only the launch whose last step is partial reads past V
        assert caught == ["ragged"], caught


@pytest.mark.slow
def test_a_corrupted_instruction_stops_the_run_or_is_outside(objects: Path) -> None:
    """Every v_exp_f32 (VOP1, opcode field bits 9-16) of a built gfx942 object turned into v_mov_b32 (opcode 1):
    the scores pass through unexponentiated."""
    target, name = MUTATED
    data = vop1_as((objects / target / f"{name}.hsaco").read_bytes(),
                   lambda text, address: cdna.decode(cdna.ISAS[target], text, address, assembler()), "v_exp_f32")
    # the merge kernel's weights are v_exp_f32 too (Sk = 0 included)
    assert_stopped_or_outside(lambda: run_object(data, OP, target, name))
