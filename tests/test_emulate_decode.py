"""amdgpu_models/isa/gfx11.py: every instruction of the built RDNA3 objects, decoded through llvm-mc into the
model's instructions, has the mnemonic and address llvm-objdump lists; an operation the model does not
implement stops decoding by name and address, and bytes LLVM cannot decode stop it at their address."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from gfx11_asm import assembler

from amdgpu_models.core.wave import Unsupported
from amdgpu_models.disasm import Undecodable
from amdgpu_models.isa import gfx11
from farm.emulate.launch import load
from farm.table.config import load as load_config
from farm.toolchain.disasm import binary

SUFFIX = re.compile(r"_(e32|e64|dpp)$")


def _llvm_listing(path: Path) -> list[tuple[int, str, str | None]]:
    """(address, mnemonic without encoding suffix, VOPD's second mnemonic) per instruction, from llvm-objdump."""
    objdump = str(binary(load_config(REPO, []).toolchain_pin.get("disassembler")))
    text = subprocess.run([objdump, "-d", "--mcpu=gfx11-generic", str(path)], capture_output=True, text=True,
                          check=True).stdout
    out = []
    for line in text.splitlines():
        m = re.match(r"^\t(\S+)\s.*// ([0-9A-F]+):", line)
        if m:
            second = re.search(r":: (\S+)", line)
            out.append((int(m.group(2), 16), SUFFIX.sub("", m.group(1)), second.group(1) if second else None))
    return out


@pytest.mark.slow
def test_every_instruction_decodes_as_llvm_disassembles_it(built: Path) -> None:
    objects = sorted((built / "outputs" / "rmsnorm" / "gfx11-generic").glob("*.hsaco"))
    assert objects
    for path in objects:
        program = load(path.read_bytes())
        ours = [(i.address, i.name, i.name_y) for i in gfx11.decode(program.text, program.text_address,
                                                                    assembler())]
        assert ours == _llvm_listing(path), path.name
        assert ours[-1][1] == "s_code_end"


def test_literals_and_dpp_controls_are_part_of_the_instruction() -> None:
    # Encodings as llvm-mc-22 -mcpu=gfx1100 gives them: v_add_f32_e32 v0, 0x40490fdb, v1 (a literal follows);
    # v_add_f32_dpp v0, v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf (a DPP16 control follows)
    with_literal = struct.pack("<II", 0x060002FF, 0x40490FDB)
    (inst,) = gfx11.decode(with_literal, 0x100, assembler(), "gfx1100")
    assert (inst.name, inst.size, inst.fields.src, inst.fields.lits) == ("v_add_f32", 8, (255, 257),
                                                                        (0x40490FDB, None))
    with_dpp = struct.pack("<II", 0x060004FA, 0xFF00B101)
    (inst,) = gfx11.decode(with_dpp, 0x100, assembler(), "gfx1100")
    assert (inst.name, inst.size, inst.dpp, inst.fields.src) == ("v_add_f32", 8, 0xFF00B101, (257, 258))


def test_an_unknown_opcode_stops_with_its_encoding_and_address() -> None:
    pkrtz = struct.pack("<I", 0x5E000501)  # VOP2 opcode 47: LLVM decodes it, the model does not implement it
    with pytest.raises(Unsupported, match=r"v_cvt_pk_rtz_f16_f32 at 0x200 is not implemented for gfx11 \(RDNA3\) "
                                          r"\(LLVM opcode V_CVT_PK_RTZ_F16_F32_e32"):
        gfx11.decode(pkrtz, 0x200, assembler(), "gfx1100")
    with pytest.raises(Undecodable, match="0x300"):
        gfx11.decode(struct.pack("<I", 0xF4080500), 0x300, assembler(), "gfx1100")  # half an 8-byte s_load
    with pytest.raises(Undecodable, match="0x404"):
        gfx11.decode(struct.pack("<II", 0x7E000301, 0xFFFFFFFF), 0x400, assembler(), "gfx1100")
