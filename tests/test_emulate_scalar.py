"""Scalar ALU and branch semantics on programs LLVM's assembler encoded; every expected value is worked out
here from the ISA guide's description (32-bit wrap, SCC as carry, borrow, overflow or result != 0)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gfx11_asm import run

from amdgpu_models.core.wave import Unsupported
from amdgpu_models.isa import cdna, gfx11, gfx12

M32 = 0xFFFFFFFF


@pytest.mark.parametrize(("line", "a", "b", "want", "scc"), [
    ("s_add_u32", 0xFFFFFFFF, 2, 1, True),
    ("s_add_u32", 5, 7, 12, False),
    ("s_add_i32", 0x7FFFFFFF, 1, 0x80000000, True),
    ("s_add_i32", -3 & M32, 1, -2 & M32, False),
    ("s_lshl_b32", 0x80000001, 1, 2, True),
    ("s_lshl_b32", 0x80000000, 33, 0, False),  # only the shift's low five bits count: 33 is 1
    ("s_lshr_b32", 0x80000000, 31, 1, True),
    ("s_ashr_i32", 0x80000000, 31, M32, True),
    ("s_and_b32", 0xF0F0, 0x0F0F, 0, False),
    ("s_or_b32", 0xF000, 0x000F, 0xF00F, True),
    ("s_xor_b32", 0xFF, 0xFF, 0, False),
    ("s_mul_i32", -7 & M32, 6, -42 & M32, None),
    ("s_mul_hi_i32", 0x40000000, 8, 2, None),
    ("s_mul_hi_i32", -1 & M32, 1, M32, None),
])
def test_sop2(line: str, a: int, b: int, want: int, scc: bool | None) -> None:
    wave = run(f"{line} s2, s0, s1", sgpr={0: a, 1: b}, scc=not scc if scc is not None else True)
    assert int(wave.sgpr[2]) == want
    if scc is not None:
        assert wave.scc == scc
    else:
        assert wave.scc  # untouched


def test_carry_chain_and_select() -> None:
    wave = run("s_add_u32 s4, s0, s2\ns_addc_u32 s5, s1, s3", sgpr={0: M32, 1: 1, 2: 1, 3: 2})
    assert (int(wave.sgpr[4]), int(wave.sgpr[5])) == (0, 4)  # 0x1_FFFFFFFF + 0x2_00000001
    wave = run("s_subb_u32 s4, s0, s1", sgpr={0: 0, 1: 0}, scc=True)
    assert (int(wave.sgpr[4]), wave.scc) == (M32, True)
    assert int(run("s_cselect_b32 s4, s0, s1", sgpr={0: 10, 1: 20}, scc=True).sgpr[4]) == 10
    assert int(run("s_cselect_b32 s4, s0, s1", sgpr={0: 10, 1: 20}).sgpr[4]) == 20
    wave = run("s_lshl_b64 s[4:5], s[0:1], 4", sgpr={0: 0x80000001, 1: 0})
    assert (int(wave.sgpr[4]), int(wave.sgpr[5])) == (0x10, 0x8)


def test_moves_constants_and_compares() -> None:
    wave = run("s_mov_b32 s0, -16\ns_mov_b32 s1, 64\ns_mov_b32 s2, 0x12345678\ns_mov_b32 s3, 1.0\n"
               "s_movk_i32 s4, 0x8000")
    assert [int(v) for v in wave.sgpr[:5]] == [-16 & M32, 64, 0x12345678, 0x3F800000, 0xFFFF8000]
    assert run("s_cmp_lt_i32 s0, s1", sgpr={0: -1 & M32, 1: 0}).scc
    assert not run("s_cmp_lt_u32 s0, s1", sgpr={0: -1 & M32, 1: 0}).scc
    assert run("s_cmp_ge_i32 s0, s1", sgpr={0: 3, 1: 3}).scc
    assert run("s_cmp_lg_u32 s0, s1", sgpr={0: 3, 1: 4}).scc
    assert run("s_bitcmp1_b32 s0, 5", sgpr={0: 0x20}).scc
    assert run("s_cmpk_lt_i32 s0, 0x10", sgpr={0: -5 & M32}).scc


def test_saveexec_and_branches() -> None:
    wave = run("s_and_saveexec_b32 s4, s0", sgpr={0: 0x0000FF00}, exec_mask=0x00FFFFFF)
    assert (int(wave.sgpr[4]), int(wave.sgpr[126]), wave.scc) == (0x00FFFFFF, 0x0000FF00, True)
    program = "s_cmp_eq_u32 s0, 0\ns_cbranch_scc1 1\ns_mov_b32 s1, 7\ns_add_u32 s2, s1, 1"
    assert int(run(program, sgpr={0: 0}).sgpr[2]) == 1  # the branch skips the move
    assert int(run(program, sgpr={0: 1}).sgpr[2]) == 8
    loop = "s_mov_b32 s1, 0\ns_add_u32 s1, s1, 3\ns_add_i32 s0, s0, -1\ns_cmp_lg_u32 s0, 0\ns_cbranch_scc1 -4"
    assert int(run(loop, sgpr={0: 4}).sgpr[1]) == 12  # four times round the loop
    with pytest.raises(Unsupported, match="s_bcnt1_i32_b32 at 0x0 is not implemented"):  # not in the gfx11 table
        run("s_bcnt1_i32_b32 s0, s1")
    vcc = "s_cbranch_vccz 1\ns_mov_b32 s3, 9\ns_endpgm"
    assert int(run(vcc, sgpr={106: 0}).sgpr[3]) == 0
    assert int(run(vcc, sgpr={106: 4}).sgpr[3]) == 9


def test_every_branch_kind() -> None:
    skip = "{}\ns_mov_b32 s3, 9\ns_endpgm"  # the branch, when taken, skips the move
    cases = [("s_branch 1", {}, 0, True),
             ("s_cbranch_scc0 1", {}, 0, True), ("s_cbranch_scc0 1", {}, 1, False),
             ("s_cbranch_vccnz 1", {106: 2}, 0, True), ("s_cbranch_vccnz 1", {106: 0}, 0, False),
             ("s_cbranch_execz 1", {126: 0}, 0, True), ("s_cbranch_execz 1", {}, 0, False)]
    for branch, sgpr, scc, taken in cases:
        wave = run(skip.format(branch), sgpr=sgpr, scc=bool(scc), exec_mask=sgpr.get(126, 0xFFFFFFFF))
        assert int(wave.sgpr[3]) == (0 if taken else 9), branch


PACING = """s_nop 3
s_clause 0x2
s_delay_alu instid0(VALU_DEP_1)
s_waitcnt_depctr 0xfffe
s_waitcnt_vscnt null, 0x0
s_waitcnt vmcnt(0) lgkmcnt(0)
s_set_inst_prefetch_distance 0x1
buffer_gl0_inv
s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)"""


def test_instructions_that_only_pace_execution_change_nothing() -> None:
    wave = run(PACING, sgpr={i: 1000 + i for i in range(20)}, vgpr={0: list(range(32))}, scc=True)
    assert [int(v) for v in wave.sgpr[:20]] == [1000 + i for i in range(20)]
    assert wave.vgpr[0].tolist() == list(range(32)) and not wave.vgpr[1:].any() and wave.scc
    with pytest.raises(Exception, match="s_sendmsg 0x1"):  # any other message: not modelled
        run("s_sendmsg sendmsg(MSG_INTERRUPT)")
    with pytest.raises(Exception, match="s_code_end"):  # padding after the code is never executed
        run("s_code_end")


def test_every_known_mnemonic_has_a_unit_test() -> None:
    """The ISA tables are the list of what the model implements; each core operation must be run by a test
    under one of the names a table gives it (the RDNA tests here and test_emulate_gfx12.py; CDNA's GFX9 names
    in test_emulate_gfx9.py, test_emulate_cdna_ops.py, test_emulate_mfma.py)."""
    spellings: dict[str, set[str]] = {}  # core operation -> the mnemonics that run it
    for isa in (gfx11.ISA, gfx12.ISA, *cdna.ISAS.values()):
        for name in isa.mnemonics:
            spellings.setdefault(isa.aliases.get(name, name), set()).add(name)
    here = Path(__file__).parent
    files = ("scalar", "vector", "memory", "matrix", "attention_ops", "gfx12", "gfx9", "cdna_ops", "mfma")
    text = "".join(path.read_text() for n in files if (path := here / f"test_emulate_{n}.py").is_file())
    text = text.replace("\\n", " ")
    run_by = lambda n: re.search(rf"(?<![a-z0-9_]){n}(_e32|_e64|_dpp|_sdwa)?(?![a-z0-9_])", text)  # noqa: E731
    untested = sorted(core for core, names in spellings.items() if not any(run_by(n) for n in names))
    assert not untested, untested


@pytest.mark.parametrize(("mcpu", "isa"), [("gfx1100", gfx11.ISA), ("gfx1200", gfx12.ISA),
                                           *((mcpu, isa) for mcpu, isa in cdna.ISAS.items())])
def test_every_table_names_only_mnemonics_llvm_knows_for_its_target(mcpu: str, isa) -> None:
    """A table lists what LLVM prints for its target: llvm-mc-22 takes each of its mnemonics for that -mcpu (it
    then only misses operands). VOPD halves (v_dual_*) are not instructions of their own and are left out."""
    from gfx11_asm import assembler

    names = sorted(name for name in isa.mnemonics if not name.startswith("v_dual_"))
    command = [str(assembler()), "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"]
    proc = subprocess.run([*command, *([f"-mattr={isa.mattr}"] if isa.mattr else [])], input="\n".join(names),
                          capture_output=True, text=True, timeout=60)
    unknown = [names[int(line.split(":")[1]) - 1] for line in proc.stderr.splitlines()
               if "error:" in line and ("not supported on this GPU" in line or "invalid instruction" in line)]
    assert not unknown, unknown
