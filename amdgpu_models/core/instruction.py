"""The model's instruction: what LLVM's disassembler decoded (its opcode name, mnemonic and typed operands),
turned by an ISA's table (`amdgpu_models/isa/<target>.py`) into the operands the shared semantics read.

Source operands keep the hardware's operand codes (0-127 scalar registers with VCC, NULL, M0 and EXEC at
their own codes, 128-208 inline integers, 253 SCC, 255 a literal, 256-511 VGPRs; `core/wave.py` reads
them). An immediate LLVM decoded is an inline integer code when it is one, else the literal code with its
value beside it in `lits`: LLVM has already turned float inline constants into the operand type's bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from amdgpu_models.core.wave import NULL


@dataclass(frozen=True)
class Fields:
    """What one instruction names. Unused fields keep their zero default."""

    dst: int = 0  # VGPR number (vector results) or scalar operand code (scalar results)
    src: tuple[int, ...] = ()  # source operand codes, in the instruction's order
    lits: tuple[int | None, ...] = ()  # per source: the value of a literal operand (code 255)
    sdst: int = NULL  # VOP3's scalar result (VOPC e64 compare mask, VOP3SD carry or VCC)
    imm: int = 0  # SOPK/SOPP simm16 (16 bits), SMEM offset, MUBUF/FLAT offset (signed)
    abs: int = 0  # VOP3: bit i takes |src i|
    neg: int = 0  # VOP3/VOP3P: bit i negates src i (VOP3P: the low half)
    neg_hi: int = 0  # VOP3P: the high half's negation
    opsel: int = 0  # bit i selects src i's high 16 bits, bit 3 the result's (a true16 .h register); VOP3P: low
    opsel_hi: int = 0  # VOP3P: bit i selects src i's high half for the high (or mix) operand
    clamp: bool = False
    sdwa: tuple[int, ...] = ()  # GFX9 SDWA: per source its select (0-3 a byte, 4-5 a word, 6 the dword), zero-extended
    mfma: tuple[int, int, int] = (0, 0, 0)  # MFMA's cbsz, abid, blgp (broadcast controls)
    omod: int = 0  # 0 none, 1 *2, 2 *4, 3 /2
    # memory
    addr: int = 0  # DS/MUBUF/FLAT address VGPR
    data: tuple[int, ...] = ()  # DS data0/data1, MUBUF/FLAT store data VGPR
    base: int = 0  # SMEM base SGPR, MUBUF resource SGPR (first of four), FLAT saddr operand code
    soffset: int = NULL  # SMEM/MUBUF scalar offset operand code
    offsets: tuple[int, int] = (0, 0)  # DS offset0/offset1
    offen: bool = False
    idxen: bool = False
    gfx9_range: bool = False  # MUBUF: GFX9's raw range check (no OOB_SELECT; soffset not counted), memory_ops
    # VOPD's second operation
    dst_y: int = 0
    src_y: tuple[int, ...] = ()
    lits_y: tuple[int | None, ...] = ()

    def lit(self, index: int) -> int | None:
        return self.lits[index] if index < len(self.lits) else None


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction as the model runs it."""

    address: int
    size: int
    name: str  # LLVM's mnemonic without the _e32/_e64/_dpp encoding suffix: the semantics' key
    form: str  # SOP, SMEM, VOP32 (e32 and DPP), VOP3 (e64), VOP3P, VOPD, DS, MUBUF, FLAT
    kind: str  # which semantics run it: scalar, vector or memory
    fields: Fields
    opcode: str  # LLVM's opcode name, e.g. V_ADD_F32_e32_gfx11
    name_y: str | None = None  # VOPD's second operation
    dpp: int | None = None  # the DPP16 control dword, from the instruction's own bytes

    @property
    def encoding(self) -> str:
        return self.form
