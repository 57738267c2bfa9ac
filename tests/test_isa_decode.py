"""amdgpu_models.disasm (instructions as llvm-mc decodes them) and farm/emulate/decode_agreement.py (the same
instructions as llvm-objdump lists them). The programs are assembled by LLVM's own assembler (llvm-mc
-show-encoding) for each of the five targets; each source line is written as LLVM prints it back, so the
decoded mnemonic and operand text must reproduce it exactly (but for a backward branch: the disassembler
prints its offset as the unsigned 16-bit field, `s_cbranch_scc0 -2` as `s_cbranch_scc0 65534`)."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from conftest import REPO

from amdgpu_models.disasm import FPImm, Imm, Reg, ToolFailed, ToolMissing, Undecodable, disassemble
from farm.elf import image
from farm.emulate import decode_agreement, objdump_listing
from farm.emulate.isa import Tools, tools
from farm.table.config import load as load_config

BASE = 0x1700
LITERAL = "v_add_f32_e32 v0, 0x40490fdb, v1"  # a 32-bit literal follows the instruction word
VOP3_MODIFIERS = "v_fma_f32 v0, -v1, |v2|, v3 clamp"
DPP = "v_add_f32_dpp v0, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf"
# (mcpu, -mattr, [(source line = expected text, size in bytes)])
PROGRAMS: list[tuple[str, str, list[tuple[str, int]]]] = [
    ("gfx11-generic", "", [
        (LITERAL, 8), (VOP3_MODIFIERS, 8), (DPP, 8),
        ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:15], v[16:23], v[0:7]", 8),
        ("v_dual_mul_f32 v0, v1, v2 :: v_dual_add_f32 v3, v4, v5", 8),
        ("s_cbranch_scc0 65534", 4), ("s_endpgm", 4)]),
    ("gfx12-generic", "+real-true16", [
        (LITERAL, 8), (VOP3_MODIFIERS, 8), (DPP, 8),
        ("v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7]", 8),
        ("v_mov_b16_e32 v12.h, 0", 4), ("s_cbranch_scc0 65534", 4), ("s_endpgm", 4)]),
    ("gfx90a", "", [
        (LITERAL, 8), (VOP3_MODIFIERS, 8), (DPP, 8),
        ("v_mfma_f32_32x32x8bf16_1k a[0:15], v[16:17], v[18:19], a[0:15]", 8),
        ("s_branch 3", 4), ("s_endpgm", 4)]),
    ("gfx942", "", [
        (LITERAL, 8), (VOP3_MODIFIERS, 8), (DPP, 8),
        ("v_mfma_f32_32x32x8_bf16 v[0:15], v[16:17], v[18:19], v[0:15]", 8),
        ("s_branch 3", 4), ("s_endpgm", 4)]),
    ("gfx950", "", [
        (LITERAL, 8), (VOP3_MODIFIERS, 8), (DPP, 8),
        ("v_mfma_f32_16x16x32_bf16 v[0:3], v[4:7], v[8:11], v[0:3]", 8),
        ("s_branch 65535", 4), ("s_endpgm", 4)]),
]


@cache
def found_tools() -> Tools:
    return tools(load_config(REPO, []).toolchain_pin.get("disassembler"))


def assemble(lines: list[str], mcpu: str, mattr: str = "") -> bytes:
    """The bytes LLVM's assembler gives the program (its -show-encoding listing)."""
    command = [str(found_tools().llvm_mc), "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-show-encoding",
               *([f"-mattr={mattr}"] if mattr else [])]
    proc = subprocess.run(command, input="\n".join(lines) + "\n", capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    encodings = re.findall(r"; encoding: \[([0-9a-fx,]+)\]", proc.stdout)
    assert len(encodings) == len(lines)
    return bytes(int(b, 16) for e in encodings for b in e.split(","))


@pytest.mark.parametrize(("mcpu", "mattr", "program"), PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_a_program_decodes_as_it_was_written(mcpu: str, mattr: str, program: list[tuple[str, int]]) -> None:
    code = assemble([line for line, _ in program], mcpu, mattr)
    decoded = disassemble(code, BASE, mcpu, found_tools().llvm_mc, mattr)
    assert [(i.text, i.size) for i in decoded] == program
    addresses = [BASE + sum(size for _, size in program[:k]) for k in range(len(program))]
    assert [i.address for i in decoded] == addresses
    assert b"".join(i.encoding for i in decoded) == code
    literal, fma = decoded[0], decoded[1]
    assert (literal.mnemonic, literal.operands) == ("v_add_f32_e32", "v0, 0x40490fdb, v1")
    assert literal.opcode.startswith("V_ADD_F32_e32")
    assert literal.mc_operands == (Reg("VGPR0"), Imm(0x40490FDB), Reg("VGPR1"))
    assert fma.opcode.startswith("V_FMA_F32_")
    # VOP3: (dst, src0 modifiers, src0, src1 modifiers, src1, ...): NEG is bit 0, ABS bit 1 of a modifier.
    assert fma.mc_operands[:5] == (Reg("VGPR0"), Imm(1), Reg("VGPR1"), Imm(2), Reg("VGPR2"))
    (branch,) = [i for i in decoded if i.mnemonic in ("s_branch", "s_cbranch_scc0")]
    words = {"65534": -2, "65535": -1, "3": 3}[branch.operands]  # the simm16, in words after the branch
    assert decode_agreement.branch_target(branch) == branch.address + 4 + 4 * words
    assert all(decode_agreement.branch_target(i) is None for i in decoded if i is not branch)


def test_operands_are_typed_registers_immediates_and_tuples() -> None:
    code = assemble(["v_mfma_f32_32x32x8_bf16 v[0:15], v[16:17], v[18:19], v[0:15]"], "gfx942")
    (mfma,) = disassemble(code, 0, "gfx942", found_tools().llvm_mc)
    assert mfma.opcode == "V_MFMA_F32_32X32X8BF16_1K_gfx940_vcd"
    assert mfma.mc_operands[0] == Reg("_".join(f"VGPR{i}" for i in range(16)))
    assert mfma.mc_operands[1] == Reg("VGPR16_VGPR17")
    assert all(isinstance(o, Reg | Imm | FPImm) for o in mfma.mc_operands)
    (load,) = disassemble(assemble(["s_load_b64 s[0:1], s[2:3], 0x10"], "gfx11-generic"), 0, "gfx11-generic",
                          found_tools().llvm_mc)
    assert (load.mc_operands[0], load.mc_operands[1], load.mc_operands[2]) == \
        (Reg("SGPR0_SGPR1"), Reg("SGPR2_SGPR3"), Imm(0x10))


@pytest.mark.parametrize("mcpu", ["gfx11-generic", "gfx942"])
def test_an_invalid_word_stops_decoding_at_its_address(mcpu: str) -> None:
    good = assemble(["s_nop 0", "s_nop 0", "s_endpgm"], mcpu)
    code = good[:8] + b"\xff\xff\xff\xff" + good[8:]
    with pytest.raises(Undecodable) as stopped:
        disassemble(code, BASE, mcpu, found_tools().llvm_mc)
    assert stopped.value.address == BASE + 8
    assert stopped.value.data[:4] == b"\xff\xff\xff\xff"
    assert f"{BASE + 8:#x}" in str(stopped.value)


@pytest.mark.parametrize("mcpu", ["gfx11-generic", "gfx942"])
def test_a_truncated_instruction_is_undecodable(mcpu: str) -> None:
    code = assemble(["s_nop 0", VOP3_MODIFIERS], mcpu)[:-4]  # its second dword cut off
    with pytest.raises(Undecodable) as stopped:
        disassemble(code, BASE, mcpu, found_tools().llvm_mc)
    assert stopped.value.address == BASE + 4


def test_a_literal_cut_off_is_never_decoded() -> None:
    code = assemble(["s_nop 0", LITERAL], "gfx11-generic")[:-4]
    with pytest.raises((Undecodable, ToolFailed)):  # llvm-mc 22 crashes on it: a failure, named
        disassemble(code, BASE, "gfx11-generic", found_tools().llvm_mc)


def test_true16_gfx12_code_needs_its_feature() -> None:
    code = assemble(["v_mov_b16_e32 v12.h, 0"], "gfx12-generic", "+real-true16")
    with pytest.raises(Undecodable):
        disassemble(code, BASE, "gfx12-generic", found_tools().llvm_mc)


def test_bits_the_instruction_does_not_read_are_kept_as_they_are() -> None:
    # v_cmp_u_f32_e64 s0, v34, v34 as the compiler wrote it: src2 (unread by a compare) is not zero, so
    # llvm-mc prints the instruction encoded again with other bytes; the instruction keeps the code's.
    code = bytes.fromhex("000018d422450202")
    (inst,) = disassemble(code, BASE, "gfx11-generic", found_tools().llvm_mc)
    assert (inst.text, inst.size, inst.encoding) == ("v_cmp_u_f32_e64 s0, v34, v34", 8, code)


def test_a_missing_llvm_mc_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ToolMissing, match="llvm-mc not found: .*llvm-mc-0.*apt-get install llvm-22"):
        disassemble(b"\x00\x00\xb0\xbf", 0, "gfx11-generic", tmp_path / "llvm-mc-0")


def _built_objects(built: Path) -> list[Path]:
    return decode_agreement.objects_in([built / "outputs"])


@pytest.mark.slow
def test_the_built_objects_agree_with_llvm_objdump(built: Path) -> None:
    objects = _built_objects(built)
    results = decode_agreement.agreement(objects, found_tools(), load_config(REPO, []).targets, jobs=2)
    line = decode_agreement.summary(results)
    assert {r.target for r in results} == {"gfx11-generic", "gfx12-generic", "gfx90a", "gfx942", "gfx950"}, line
    assert sum(r.total for r in results) > 1000, line
    assert all(r.agreed == r.total for r in results), [d for r in results for d in r.disagreements][:5]
    assert "(100.00%)" in line


@pytest.mark.slow
@pytest.mark.parametrize("change", ["operand", "branch annotation", "address"])
def test_a_corrupted_listing_is_a_disagreement(built: Path, change: str, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    original = objdump_listing.listing

    def corrupted(objdump: Path, mcpu: str, mattr: str, path: Path) -> str:
        text = original(objdump, mcpu, mattr, path)
        if change == "operand":  # the first `s_load_*` reads another SGPR pair
            return re.sub(r"(\ts_load_\w+ s(?:\d+|\[\d+:\d+\]), )s\[0:1\]", r"\1s[2:3]", text, count=1)
        if change == "branch annotation":  # objdump's named target, one instruction further
            return re.sub(r"<([^>+]+)\+0x([0-9a-f]+)>",
                          lambda m: f"<{m.group(1)}+{int(m.group(2), 16) + 4:#x}>", text, count=1)
        return re.sub(r"// ([0-9A-F]{12}):", lambda m: f"// {int(m.group(1), 16) + 4:012X}:", text, count=1)

    monkeypatch.setattr(objdump_listing, "listing", corrupted)
    rmsnorm = [p for p in _built_objects(built) if p.parent.name == "gfx942" and "bf16" in p.name][:1]
    assert rmsnorm
    monkeypatch.chdir(REPO)
    assert decode_agreement.main([str(rmsnorm[0]), "--jobs", "1"]) == 1
    out = capsys.readouterr().out
    assert "first disagreements (1 objects)" in out
    named = {"operand": "operands: llvm-mc", "branch annotation": "branch target (objdump's <",
             "address": "address"}[change]
    assert named in out, out
    assert re.search(r"decode agreement: (\d[\d,]*) of \d[\d,]* instructions in 1 objects", out)
    assert "(100.00%)" not in out


@pytest.mark.slow
def test_an_undecodable_word_in_an_object_is_a_disagreement(built: Path, tmp_path: Path) -> None:
    source = next(p for p in _built_objects(built) if p.parent.name == "gfx11-generic")
    data = bytearray(source.read_bytes())
    text = image.read(bytes(data)).section(".text")
    assert text is not None
    data[text.offset + 8:text.offset + 12] = b"\xff\xff\xff\xff"
    broken = tmp_path / source.name
    broken.write_bytes(bytes(data))
    result = decode_agreement.check_object(broken, found_tools(), load_config(REPO, []).targets)
    assert result.agreed == 0 and result.total > 1
    assert result.disagreements[0].startswith(f"Undecodable: cannot decode the bytes at {text.addr + 8:#x}")
