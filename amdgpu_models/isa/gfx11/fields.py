"""The operand fields of a decoded gfx11 instruction: which registers and constants it reads and writes, and
its modifiers, in one typed shape for every encoding.

Source operands keep the hardware's operand codes (9 bits for vector sources: 0-255 scalar registers and
constants, 256-511 VGPRs; `amdgpu_models/core/wave.py` reads them). Bit positions are the RDNA3 ISA guide's
microcode formats; tests/test_emulate_fields.py checks them on instructions LLVM's assembler encodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from amdgpu_models.core.wave import NULL, VGPR_BASE
from amdgpu_models.isa.gfx11.decode import Instruction

VOP3SD = {764}  # v_div_scale_f32: VOP3 with a scalar result where the others keep abs and op_sel
VOPC_END = 256  # VOP3 opcodes below this are compares: their vdst field names the scalar mask they write


@dataclass(frozen=True)
class Fields:
    """What one instruction names. Unused fields keep their zero default."""

    dst: int = 0  # VGPR number (vector results) or scalar operand code (scalar results)
    src: tuple[int, ...] = ()  # source operand codes, in the instruction's order
    sdst: int = NULL  # VOP3's scalar result (VOPC e64 compare mask, VOP3SD carry or VCC)
    imm: int = 0  # SOPK/SOPP simm16, SMEM offset, MUBUF/FLAT offset (FLAT's sign-extended)
    abs: int = 0  # VOP3: bit i takes |src i|
    neg: int = 0  # VOP3/VOP3P: bit i negates src i (VOP3P: the low half)
    neg_hi: int = 0  # VOP3P: the high half's negation
    opsel: int = 0  # VOP3: bit i selects src i's high 16 bits, bit 3 the result's; VOP3P: low half
    opsel_hi: int = 0  # VOP3P: bit i selects src i's high half for the high (or mix) operand
    clamp: bool = False
    omod: int = 0  # 0 none, 1 *2, 2 *4, 3 /2
    # memory
    addr: int = 0  # DS/MUBUF/FLAT address VGPR
    data: tuple[int, ...] = ()  # DS data0/data1, MUBUF/FLAT store data VGPR
    base: int = 0  # SMEM base SGPR, MUBUF resource SGPR (first of four), FLAT saddr operand code
    soffset: int = NULL  # SMEM/MUBUF scalar offset operand code
    offsets: tuple[int, int] = (0, 0)  # DS offset0/offset1
    offen: bool = False
    idxen: bool = False
    # VOPD's second operation
    dst_y: int = 0
    src_y: tuple[int, ...] = ()


def fields(inst: Instruction) -> Fields:
    if inst.encoding == "VOP3" and inst.opcode < VOPC_END:
        return _vop3_compare(inst.words)
    if inst.encoding == "VOP3" and inst.opcode in VOP3SD:
        plain = _vop3(inst.words)  # bits 8-14 are the scalar result there, not abs and op_sel
        return Fields(dst=plain.dst, src=plain.src, sdst=plain.sdst, clamp=plain.clamp, omod=plain.omod,
                      neg=plain.neg)
    return _BY_ENCODING[inst.encoding](inst.words)


def _sop1(w: tuple[int, ...]) -> Fields:
    return Fields(dst=w[0] >> 16 & 0x7F, src=(w[0] & 0xFF,))


def _sop2(w: tuple[int, ...]) -> Fields:
    return Fields(dst=w[0] >> 16 & 0x7F, src=(w[0] & 0xFF, w[0] >> 8 & 0xFF))


def _sopc(w: tuple[int, ...]) -> Fields:
    return Fields(src=(w[0] & 0xFF, w[0] >> 8 & 0xFF))


def _sopk(w: tuple[int, ...]) -> Fields:
    return Fields(dst=w[0] >> 16 & 0x7F, imm=w[0] & 0xFFFF)


def _sopp(w: tuple[int, ...]) -> Fields:
    return Fields(imm=w[0] & 0xFFFF)


def _smem(w: tuple[int, ...]) -> Fields:
    offset = w[1] & 0x1FFFFF
    offset -= (offset & 0x100000) << 1  # 21-bit signed
    return Fields(dst=w[0] >> 6 & 0x7F, base=(w[0] & 0x3F) << 1, imm=offset, soffset=w[1] >> 25 & 0x7F)


def _vop1(w: tuple[int, ...]) -> Fields:
    return Fields(dst=w[0] >> 17 & 0xFF, src=(w[0] & 0x1FF,))


def _vop2(w: tuple[int, ...]) -> Fields:
    return Fields(dst=w[0] >> 17 & 0xFF, src=(w[0] & 0x1FF, VGPR_BASE + (w[0] >> 9 & 0xFF)))


def _vopc(w: tuple[int, ...]) -> Fields:
    return Fields(src=(w[0] & 0x1FF, VGPR_BASE + (w[0] >> 9 & 0xFF)))


def _vop3(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    return Fields(dst=first & 0xFF, src=(second & 0x1FF, second >> 9 & 0x1FF, second >> 18 & 0x1FF),
                  sdst=first >> 8 & 0x7F, abs=first >> 8 & 0x7, opsel=first >> 11 & 0xF,
                  clamp=bool(first >> 15 & 1), omod=second >> 27 & 0x3, neg=second >> 29 & 0x7)


def _vop3_compare(w: tuple[int, ...]) -> Fields:
    plain = _vop3(w)
    return Fields(src=plain.src, sdst=w[0] & 0xFF, abs=plain.abs, neg=plain.neg, clamp=plain.clamp)


def _vop3p(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    return Fields(dst=first & 0xFF, src=(second & 0x1FF, second >> 9 & 0x1FF, second >> 18 & 0x1FF),
                  neg_hi=first >> 8 & 0x7, opsel=first >> 11 & 0x7,
                  opsel_hi=(second >> 27 & 0x3) | (first >> 14 & 1) << 2, clamp=bool(first >> 15 & 1),
                  neg=second >> 29 & 0x7)


def _vopd(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    dst_x = second >> 24 & 0xFF
    # Y's destination is stored without its lowest bit, which is always the opposite of X's (bank rule).
    dst_y = (second >> 17 & 0x7F) << 1 | ((dst_x & 1) ^ 1)
    return Fields(dst=dst_x, src=(first & 0x1FF, VGPR_BASE + (first >> 9 & 0xFF)),
                  dst_y=dst_y, src_y=(second & 0x1FF, VGPR_BASE + (second >> 9 & 0xFF)))


def _ds(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    return Fields(dst=second >> 24 & 0xFF, addr=second & 0xFF, data=(second >> 8 & 0xFF, second >> 16 & 0xFF),
                  offsets=(first & 0xFF, first >> 8 & 0xFF))


def _mubuf(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    return Fields(dst=second >> 8 & 0xFF, data=(second >> 8 & 0xFF,), addr=second & 0xFF,
                  base=(second >> 16 & 0x1F) << 2, soffset=second >> 24 & 0xFF, imm=first & 0xFFF,
                  offen=bool(second >> 22 & 1), idxen=bool(second >> 23 & 1))


def _flat(w: tuple[int, ...]) -> Fields:
    first, second = w[0], w[1]
    offset = first & 0x1FFF
    offset -= (offset & 0x1000) << 1  # 13-bit signed
    return Fields(dst=second >> 24 & 0xFF, addr=second & 0xFF, data=(second >> 8 & 0xFF,),
                  base=second >> 16 & 0x7F, imm=offset)


_BY_ENCODING = {"SOP1": _sop1, "SOP2": _sop2, "SOPC": _sopc, "SOPK": _sopk, "SOPP": _sopp, "SMEM": _smem,
                "VOP1": _vop1, "VOP2": _vop2, "VOPC": _vopc, "VOP3": _vop3, "VOP3P": _vop3p, "VOPD": _vopd,
                "DS": _ds, "MUBUF": _mubuf, "FLAT": _flat}
