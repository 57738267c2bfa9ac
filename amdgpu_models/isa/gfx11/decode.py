"""Split RDNA3 (gfx11) machine code into instructions: each one's encoding, size, opcode name and words.

Only the opcodes the model knows have names; any other opcode stops decoding with its encoding, number and
address (never skipped). The opcode numbers were read off LLVM's own disassembly of this farm's gfx11-generic
RMSNorm objects (llvm-objdump with raw bytes); tests/test_emulate_decode.py decodes every instruction of the
built objects and compares name and address with llvm-objdump, instruction by instruction.

Encodings (the first dword's top bits; sizes without a literal): SOP1, SOPC, SOPP, SOPK, SOP2 (4 bytes);
SMEM (8); VOP1, VOPC, VOP2 (4, plus a DPP16 dword when src0 is 0xFA); VOP3, VOP3P, VOPD (8); DS, MUBUF,
FLAT (8). A source operand 0xFF is a 32-bit literal that follows the instruction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

LITERAL = 0xFF  # a source operand that reads the dword after the instruction
DPP16 = 0xFA  # VOP1/VOP2/VOPC src0: a DPP16 control dword follows
DPP8 = 0xE9

SOP1 = {0: "s_mov_b32", 32: "s_and_saveexec_b32"}
SOP2 = {0: "s_add_u32", 2: "s_add_i32", 4: "s_addc_u32", 5: "s_subb_u32", 8: "s_lshl_b32", 9: "s_lshl_b64",
        10: "s_lshr_b32", 12: "s_ashr_i32", 22: "s_and_b32", 24: "s_or_b32", 26: "s_xor_b32", 44: "s_mul_i32",
        46: "s_mul_hi_i32", 48: "s_cselect_b32"}
SOPC = {3: "s_cmp_ge_i32", 4: "s_cmp_lt_i32", 6: "s_cmp_eq_u32", 7: "s_cmp_lg_u32", 10: "s_cmp_lt_u32",
        13: "s_bitcmp1_b32"}
SOPK = {0: "s_movk_i32", 7: "s_cmpk_lt_i32", 24: "s_waitcnt_vscnt"}
SOPP = {0: "s_nop", 4: "s_set_inst_prefetch_distance", 5: "s_clause", 7: "s_delay_alu", 8: "s_waitcnt_depctr",
        9: "s_waitcnt", 31: "s_code_end", 32: "s_branch", 33: "s_cbranch_scc0", 34: "s_cbranch_scc1",
        35: "s_cbranch_vccz", 36: "s_cbranch_vccnz", 37: "s_cbranch_execz", 48: "s_endpgm", 54: "s_sendmsg",
        61: "s_barrier"}
SMEM = {0: "s_load_b32", 1: "s_load_b64", 2: "s_load_b128", 3: "s_load_b256"}
VOP1 = {1: "v_mov_b32", 2: "v_readfirstlane_b32", 5: "v_cvt_f32_i32", 10: "v_cvt_f16_f32", 11: "v_cvt_f32_f16",
        28: "v_mov_b16", 42: "v_rcp_f32", 51: "v_sqrt_f32"}
VOP2 = {1: "v_cndmask_b32", 3: "v_add_f32", 4: "v_sub_f32", 8: "v_mul_f32", 24: "v_lshlrev_b32",
        25: "v_lshrrev_b32", 27: "v_and_b32", 28: "v_or_b32", 37: "v_add_nc_u32", 43: "v_fmac_f32"}
VOPC = {17: "v_cmp_lt_f32", 20: "v_cmp_gt_f32", 22: "v_cmp_ge_f32", 24: "v_cmp_u_f32", 67: "v_cmp_le_i32",
        74: "v_cmp_eq_u32", 126: "v_cmp_class_f32", 202: "v_cmpx_eq_u32"}
# VOP3's opcode space holds VOPC at 0-255, VOP2 at 256 + op and VOP1 at 384 + op, then its own.
VOP3_OWN = {528: "v_bfe_u32", 531: "v_fma_f32", 551: "v_div_fixup_f32", 567: "v_div_fmas_f32",
            582: "v_lshl_add_u32", 583: "v_add_lshl_u32", 597: "v_add3_u32", 598: "v_lshl_or_b32",
            604: "v_permlanex16_b32", 764: "v_div_scale_f32"}
VOP3 = {**VOPC, **{256 + op: name for op, name in VOP2.items()}, **{384 + op: name for op, name in VOP1.items()},
        **VOP3_OWN}
VOP3P = {32: "v_fma_mix_f32", 33: "v_fma_mixlo_f16", 34: "v_fma_mixhi_f16"}
# VOPD: two operations in one instruction; X takes the first group, Y also the integer ones.
VOPD_X = {0: "v_dual_fmac_f32", 3: "v_dual_mul_f32", 4: "v_dual_add_f32", 5: "v_dual_sub_f32",
          8: "v_dual_mov_b32", 9: "v_dual_cndmask_b32"}
VOPD_Y = {**VOPD_X, 16: "v_dual_add_nc_u32", 17: "v_dual_lshlrev_b32", 18: "v_dual_and_b32"}
DS = {13: "ds_store_b32", 54: "ds_load_b32", 55: "ds_load_2addr_b32", 118: "ds_load_b64", 255: "ds_load_b128"}
MUBUF = {18: "buffer_load_u16", 20: "buffer_load_b32", 23: "buffer_load_b128", 25: "buffer_store_b16",
         26: "buffer_store_b32", 29: "buffer_store_b128", 43: "buffer_gl0_inv"}
FLAT = {26: "global_store_b32"}


class Undecodable(ValueError):
    """An instruction the model does not know: its encoding, opcode and address are in the message."""


@dataclass(frozen=True)
class Instruction:
    address: int
    encoding: str  # SOP2, VOP3, VOPD, ...
    opcode: int  # VOPD: X's opcode (Y's is `name_y`'s)
    name: str  # LLVM's mnemonic without the _e32/_e64/_dpp encoding suffix
    words: tuple[int, ...]  # every dword, literal and DPP control included
    name_y: str | None = None  # VOPD's second operation
    literal: int | None = None
    dpp: int | None = None  # the DPP16 control dword

    @property
    def size(self) -> int:
        return 4 * len(self.words)


def decode(code: bytes | memoryview, address: int) -> Instruction:
    """The instruction at the start of `code` (which is loaded at `address`)."""
    if len(code) < 4:
        raise Undecodable(f"code ends inside the instruction at {address:#x}")
    first = struct.unpack_from("<I", code)[0]
    encoding, opcode, base_words = _encoding(first, address)
    table = _TABLES[encoding]
    words = list(struct.unpack_from(f"<{base_words}I", _need(code, 4 * base_words, address)))
    name_y = None
    if encoding == "VOPD":  # `opcode` is X's; Y's has a field of its own
        y = first >> 17 & 0x1F
        name_y = VOPD_Y.get(y)
        if name_y is None:
            raise Undecodable(f"VOPD Y opcode {y} at {address:#x} is not implemented")
    name = table.get(opcode)
    if name is None:
        raise Undecodable(f"{encoding} opcode {opcode} at {address:#x} is not implemented (word {first:#010x})")
    literal = dpp = None
    extra = _extra_dwords(encoding, words)
    if extra:
        end = 4 * (len(words) + len(extra))
        tail = struct.unpack_from(f"<{len(extra)}I", _need(code, end, address), 4 * len(words))
        for kind, value in zip(extra, tail, strict=True):
            if kind == "dpp":
                dpp = value
            else:
                literal = value
        words += tail
    return Instruction(address, encoding, opcode, name, tuple(words), name_y, literal, dpp)


def decode_all(code: bytes, address: int, end_at_code_end: bool = True) -> list[Instruction]:
    """Every instruction from `address` on; stops after s_code_end (padding follows it) or at the end."""
    out, offset = [], 0
    view = memoryview(code)  # slices of it share the bytes: no copy of the rest per instruction
    while offset < len(code):
        inst = decode(view[offset:], address + offset)
        out.append(inst)
        offset += inst.size
        if end_at_code_end and inst.name == "s_code_end":
            break
    return out


def _need(code: bytes | memoryview, length: int, address: int) -> bytes | memoryview:
    if len(code) < length:
        raise Undecodable(f"code ends inside the instruction at {address:#x}")
    return code


def _encoding(word: int, address: int) -> tuple[str, int, int]:
    """(encoding, opcode, dwords before any literal or DPP control) from the first dword."""
    if word >> 23 == 0x17D:
        return "SOP1", word >> 8 & 0xFF, 1
    if word >> 23 == 0x17E:
        return "SOPC", word >> 16 & 0x7F, 1
    if word >> 23 == 0x17F:
        return "SOPP", word >> 16 & 0x7F, 1
    if word >> 28 == 0xB:
        return "SOPK", word >> 23 & 0x1F, 1
    if word >> 30 == 0x2:
        return "SOP2", word >> 23 & 0x7F, 1
    if word >> 26 == 0x3D:
        return "SMEM", word >> 18 & 0xFF, 2
    if word >> 25 == 0x3F:
        return "VOP1", word >> 9 & 0xFF, 1
    if word >> 25 == 0x3E:
        return "VOPC", word >> 17 & 0xFF, 1
    if word >> 31 == 0:
        return "VOP2", word >> 25 & 0x3F, 1
    if word >> 26 == 0x35:
        return "VOP3", word >> 16 & 0x3FF, 2
    if word >> 24 == 0xCC:
        return "VOP3P", word >> 16 & 0x7F, 2
    if word >> 26 == 0x32:
        return "VOPD", word >> 22 & 0xF, 2
    if word >> 26 == 0x36:
        return "DS", word >> 18 & 0xFF, 2
    if word >> 26 == 0x38:
        return "MUBUF", word >> 18 & 0xFF, 2
    if word >> 26 == 0x37:
        return "FLAT", word >> 18 & 0x7F, 2
    raise Undecodable(f"no known encoding for the word {word:#010x} at {address:#x}")


def _extra_dwords(encoding: str, words: list[int]) -> list[str]:
    """What follows the instruction's own dwords: a DPP control and/or a literal, in that order."""
    first = words[0]
    if encoding == "SOP1":
        return ["literal"] if first & 0xFF == LITERAL else []
    if encoding in ("SOP2", "SOPC"):
        return ["literal"] if LITERAL in (first & 0xFF, first >> 8 & 0xFF) else []
    if encoding in ("VOP1", "VOP2", "VOPC"):
        src0 = first & 0x1FF
        if src0 == DPP16:
            return ["dpp"]
        if src0 == DPP8:
            raise Undecodable(f"DPP8 ({encoding} word {first:#010x}) is not implemented")
        return ["literal"] if src0 == LITERAL else []
    if encoding in ("VOP3", "VOP3P"):
        second = words[1]
        sources = (second & 0x1FF, second >> 9 & 0x1FF, second >> 18 & 0x1FF)
        return ["literal"] if LITERAL in sources else []
    if encoding == "VOPD":
        return ["literal"] if LITERAL in (first & 0x1FF, words[1] & 0x1FF) else []
    return []


_TABLES: dict[str, dict[int, str]] = {"SOP1": SOP1, "SOP2": SOP2, "SOPC": SOPC, "SOPK": SOPK, "SOPP": SOPP,
                                      "SMEM": SMEM, "VOP1": VOP1, "VOP2": VOP2, "VOPC": VOPC, "VOP3": VOP3,
                                      "VOP3P": VOP3P, "VOPD": VOPD_X, "DS": DS, "MUBUF": MUBUF, "FLAT": FLAT}
