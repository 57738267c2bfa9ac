"""LLVM's decoded instructions turned into the model's, for any ISA described by an `Isa` (its mnemonic table,
its wave width, the few facts where LLVM's operand conventions differ between generations).

Nothing here is read off a listing by hand: `amdgpu_models.disasm` runs LLVM's own disassembler, whose
opcode name (`V_ADD_F32_e32_gfx11`) says the form (e32, e64, DPP, VOPD, memory) and whose typed operands
(`Reg:VGPR3`, `Imm:1065353216`) are the registers and immediates. What this module knows is LLVM's operand
order per form (destinations, then sources, each VOP3 source after its SISrcMods word when the operation
has modifiers, then clamp and omod); the operand count of the asm text LLVM printed checks it, and an
instruction whose operands do not fit the form stops decoding with its address. The DPP16 control is read
from the instruction's own bytes (its second dword), as LLVM's DPP operands say the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from amdgpu_models.core import memory_ops, scalar_ops, vector_ops
from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import AGPR_BASE, LITERAL, NULL, SCC, TTMP_FIRST, VGPR_BASE, Unsupported
from amdgpu_models.disasm import Imm, McOperand, Reg, Undecodable, disassemble
from amdgpu_models.disasm import Instruction as LlvmInstruction

# What the shared semantics implement, by the core's name for each operation.
CORE: dict[str, str] = {
    **{name: "scalar" for name in scalar_ops.MNEMONICS},
    **{name: "vector" for name in vector_ops.MNEMONICS},
    **{name: "memory" for name in memory_ops.MNEMONICS},
}


@dataclass(frozen=True, eq=False)  # hashed by identity: decoding caches per ISA
class Isa:
    """One ISA as the model runs it."""

    name: str
    mcpu: str  # llvm-mc's -mcpu
    lanes: int  # 32 or 64
    mnemonics: frozenset[str]  # LLVM mnemonics (without _e32/_e64/_dpp) the model runs for this ISA
    aliases: dict[str, str] = field(default_factory=dict)  # this ISA's mnemonic -> the core's name
    flat_offset_bits: int = 13  # LLVM's MCInst holds a global access's signed offset as this many bits
    vop3_without_suffix: bool = False  # gfx9: VOP3-only opcodes have no _e64 in LLVM's names
    mattr: str = ""  # llvm-mc's -mattr: target features the objects are compiled with that LLVM does not assume
    ttmps: frozenset[int] = frozenset()  # trap registers a kernel reads (gfx12: the workgroup ids in ttmp7, ttmp9)
    gfx9_buffers: bool = False  # GFX9's buffer range check (memory_ops: no OOB_SELECT, soffset not counted)

    def semantics(self, name: str) -> tuple[str, str] | None:
        """(core name, kind) of one of this ISA's mnemonics; None when the model does not run it here."""
        if name not in self.mnemonics:
            return None
        core = self.aliases.get(name, name)
        return core, CORE[core]

# SISrcMods, LLVM's source modifier word (AMDGPU SIDefines.h): NEG, ABS (NEG_HI in VOP3P), OP_SEL_0, OP_SEL_1
# (VOP3P's op_sel_hi; in src0's word of a VOP3 the destination's op_sel).
MOD_NEG, MOD_ABS, MOD_OP_SEL_0, MOD_OP_SEL_1 = 1, 2, 4, 8

_NAMED = {"VCC_LO": 106, "VCC": 106, "VCC_HI": 107, "M0": 125, "EXEC_LO": 126, "EXEC": 126, "EXEC_HI": 127,
          "SGPR_NULL_gfx11plus": NULL, "SGPR_NULL": NULL, "SCC": SCC}
_REG = re.compile(r"^(SGPR|VGPR|AGPR|TTMP)(\d+)(_HI16|_LO16)?(?:_|$)")
_SUFFIX = re.compile(r"_(e32|e64|dpp|sdwa)$")


def decode(isa: Isa, code: bytes, address: int, llvm_mc: Path, mcpu: str = "") -> list[Instruction]:
    """Every instruction of `code` (loaded at `address`) as the model runs it. Bytes LLVM cannot decode raise
    amdgpu_models.disasm.Undecodable; a mnemonic the model does not implement raises Unsupported."""
    return _decode(isa, bytes(code), address, str(llvm_mc), mcpu or isa.mcpu)


@lru_cache(maxsize=16)  # a launch's workgroups and a check's cases decode the same code once
def _decode(isa: Isa, code: bytes, address: int, llvm_mc: str, mcpu: str) -> list[Instruction]:
    return [instruction(isa, inst) for inst in disassemble(code, address, mcpu, Path(llvm_mc), isa.mattr)]


def instruction(isa: Isa, inst: LlvmInstruction) -> Instruction:
    name = _SUFFIX.sub("", inst.mnemonic)
    opcode = re.sub(r"_(gfx\d+[0-9a-z]*|vi)$", "", inst.opcode)  # V_ADD_F32_e32_gfx11, BUFFER_..._gfx90a
    form = _form(opcode, isa)
    found = isa.semantics(name)
    if found is None:
        raise Unsupported(f"{name} at {inst.address:#x} is not implemented for {isa.name} (LLVM opcode "
                          f"{inst.opcode})")
    core, kind = found
    name_y = None
    if form == "VOPD":
        name_y = inst.operands.split("::", 1)[1].split()[0] if "::" in inst.operands else ""
        if isa.semantics(name_y) is None:
            raise Unsupported(f"{name_y or 'a VOPD second operation'} at {inst.address:#x} is not implemented")
    try:
        _check_ttmps(inst, isa)
        fields = _fields(form, name, opcode, inst, name_y, isa)
    except (IndexError, ValueError) as exc:
        raise Undecodable(inst.address, inst.encoding, f"the operands of {inst.text} ({inst.opcode}) do not fit "
                          f"the {form} form the model knows: {exc}") from None
    dpp = int.from_bytes(inst.encoding[4:8], "little") if opcode.endswith("_dpp") else None
    return Instruction(inst.address, inst.size, core, form, kind, fields, inst.opcode, name_y, dpp)


def _check_ttmps(inst: LlvmInstruction, isa: Isa) -> None:
    """A trap register is not the kernel's, except those the ISA's launch fills (architected workgroup ids)."""
    for op in inst.mc_operands:
        match = _REG.match(op.name) if isinstance(op, Reg) else None
        if match and match.group(1) == "TTMP" and int(match.group(2)) not in isa.ttmps:
            raise ValueError(f"trap register {op.name}")


def _form(opcode: str, isa: Isa) -> str:
    if opcode.startswith("V_DUAL_"):
        return "VOPD"
    if opcode.startswith("V_"):
        if opcode.endswith(("_e32", "_dpp", "_sdwa")):  # SDWA (GFX9): fields as VOP32's, its selects as op_sel
            return "VOP32"
        if opcode.endswith("_e64"):
            return "VOP3"
        # No encoding suffix: VOP3P (packed, mixed, dot, WMMA), or an operation with one encoding only (VOP3 on
        # gfx9, where LLVM names VOP3-only opcodes without _e64)
        if opcode.startswith(("V_FMA_MIX", "V_PK_", "V_DOT", "V_WMMA", "V_MFMA")):
            return "VOP3P"
        return "VOP3" if isa.vop3_without_suffix else "VOP32"
    if opcode.startswith(("S_LOAD_", "S_BUFFER_LOAD_")):
        return "SMEM"
    if opcode.startswith("S_"):
        return "SOP"
    for prefix, form in (("DS_", "DS"), ("BUFFER_", "MUBUF"), ("GLOBAL_", "FLAT")):
        if opcode.startswith(prefix):
            return form
    raise ValueError(f"no form the model knows for LLVM opcode {opcode}")


# -- operands -------------------------------------------------------------------------------------------------

def _reg(op: McOperand) -> tuple[int, bool]:
    """A register operand's code (its first register for a tuple) and whether it is a true16 high half."""
    if not isinstance(op, Reg):
        raise ValueError(f"expected a register, found {op}")
    if op.name in _NAMED:
        return _NAMED[op.name], False
    match = _REG.match(op.name)
    if match is None:
        raise ValueError(f"register {op.name} is not one the model knows")
    kind, number, half = match.group(1), int(match.group(2)), match.group(3)
    if kind == "TTMP":  # instruction() has refused those the ISA does not let a kernel read
        return TTMP_FIRST + number, False
    if kind == "AGPR":  # CDNA's accumulation registers (LLVM decodes them only where the hardware takes them)
        return AGPR_BASE + number, False
    return (VGPR_BASE + number if kind == "VGPR" else number), half == "_HI16"


def _source(op: McOperand) -> tuple[int, int | None, bool]:
    """(operand code, literal value, high half) of a source: a register, an inline integer or a literal."""
    if isinstance(op, Imm):
        value = op.value
        if 0 <= value <= 64:
            return 128 + value, None, False
        if -16 <= value <= -1:
            return 192 - value, None, False
        return LITERAL, value & 0xFFFFFFFF, False
    code, high = _reg(op)
    return code, None, high


def _imm(op: McOperand) -> int:
    if not isinstance(op, Imm):
        raise ValueError(f"expected an immediate, found {op}")
    return op.value


def _text_operands(text: str) -> int:
    """How many comma-separated operands the asm text has (commas inside brackets or parentheses excluded)."""
    if not text.strip():
        return 0
    depth, count = 0, 1
    for ch in text:
        depth += ch in "[(" and 1 or ch in "])" and -1 or 0
        count += ch == "," and depth == 0
    return count


def _has_mods(name: str) -> tuple[bool, ...] | None:
    """Which VOP3 sources LLVM gives a modifier word (None: every source, for float operations)."""
    if name.startswith("v_cmp_class") or name.startswith("v_cmpx_class"):
        return (True, False)
    if name == "v_cndmask_b32":
        return (True, True, False)
    if name.startswith(("v_permlane", "v_fma_mix", "v_pk_")) or re.search(r"_f(16|32|64)$|_f(16|32|64)_", name):
        return None
    return ()


def _fields(form: str, name: str, opcode: str, inst: LlvmInstruction, name_y: str | None, isa: Isa) -> Fields:
    ops = list(inst.mc_operands)
    if form == "SOP":
        return _sop(name, ops)
    if form == "SMEM":
        dst, _ = _reg(ops[0])
        base, _ = _reg(ops[1])
        rest = ops[2:]
        soffset = _reg(rest.pop(0))[0] if "_SGPR" in opcode else NULL
        imm = _imm(rest[0]) if opcode.endswith("_IMM") else 0
        return Fields(dst=dst, base=base, imm=imm, soffset=soffset)
    if form == "DS":
        return _ds(name, ops)
    if form == "MUBUF":
        return _mubuf(opcode, ops, isa.gfx9_buffers)
    if form == "FLAT":
        return _flat(name, opcode, ops, isa.flat_offset_bits)
    if form == "VOP32" and opcode.endswith("_sdwa"):
        return _sdwa(name, inst, ops, isa)
    if form == "VOP32":
        return _vop32(name, opcode, ops)
    if form == "VOPD":
        return _vopd(inst, ops, name, name_y or "")
    if name.startswith("v_mfma_"):
        return _mfma(ops)
    return _vop3(form, name, inst, ops)


def _sop(name: str, ops: list[McOperand]) -> Fields:
    if not ops:
        return Fields()
    if len(ops) == 1:  # SOPP: its simm16
        return Fields(imm=_imm(ops[0]) & 0xFFFF)
    if name.startswith(("s_cmpk_", "s_movk_", "s_waitcnt_")):  # SOPK: a register and a simm16
        return Fields(dst=_reg(ops[0])[0], imm=_imm(ops[1]) & 0xFFFF)
    sources = ops if name.startswith(("s_cmp_", "s_bitcmp")) else ops[1:]
    src, lits, _ = zip(*(_source(op) for op in sources), strict=True)
    dst = 0 if sources is ops else _reg(ops[0])[0]
    return Fields(dst=dst, src=tuple(src), lits=tuple(lits))


def _vop32(name: str, opcode: str, ops: list[McOperand]) -> Fields:
    if opcode.endswith("_dpp"):  # dst, old, the sources (after their modifiers, if any), the DPP controls (immediates)
        dst, high = _reg(ops[0])
        sources = [_source(op) for op in ops[2:] if isinstance(op, Reg)]
    elif name.startswith(("v_cmp_", "v_cmpx_")):  # the mask goes to VCC (or EXEC): no destination operand
        dst, high, sources = 0, False, [_source(op) for op in ops]
    else:
        dst, high = _reg(ops[0])
        sources = [_source(op) for op in ops[1:]]
    opsel = sum(1 << i for i, (_, _, hi) in enumerate(sources) if hi) | (8 if high else 0)
    if dst >= VGPR_BASE:
        dst -= VGPR_BASE
    return Fields(dst=dst, src=tuple(s[0] for s in sources), lits=tuple(s[1] for s in sources), opsel=opsel)


def _vop3(form: str, name: str, inst: LlvmInstruction, ops: list[McOperand]) -> Fields:
    compare = name.startswith(("v_cmp_", "v_cmpx_"))
    # VOP3SD: a VGPR result and a scalar one (a carry or VCC mask), both before the sources
    two_results = name.startswith(("v_div_scale", "v_mad_u64_u32", "v_mad_i64_i32", "v_mad_co_", "v_add_co_",
                                   "v_addc_co_", "v_sub_co_", "v_subb_co_", "v_subrev_co_"))
    destinations = 0 if name.startswith("v_cmpx_") else 2 if two_results else 1
    count = _text_operands(inst.operands.split(" op_sel")[0]) - destinations
    true16 = "_t16_" in inst.opcode  # real true16: every source has a modifier word (op_sel bits in it)
    has_mods = None if true16 else _has_mods(name)
    at, dst, sdst = 0, 0, NULL
    if destinations:
        first, _ = _reg(ops[0])
        if compare:
            sdst = first
        else:
            dst = first - VGPR_BASE if first >= VGPR_BASE else first
        if two_results:
            sdst = _reg(ops[1])[0]
        at = destinations
    src, lits, mods = [], [], []
    for i in range(count):
        modified = has_mods is None or (i < len(has_mods) and has_mods[i])
        word = _imm(ops[at]) if modified else 0
        at += modified
        code, lit, high = _source(ops[at])
        at += 1
        src.append(code)
        lits.append(lit)
        mods.append(word | (MOD_OP_SEL_0 if high else 0))
    trailing = [op.value for op in ops[at:] if isinstance(op, Imm)]
    clamp = bool(trailing[0]) if trailing else False
    omod = trailing[1] if len(trailing) > 1 and has_mods is None and not compare and form == "VOP3" else 0
    bits = lambda flag: sum(1 << i for i, word in enumerate(mods) if word & flag)  # noqa: E731
    if form == "VOP3P":
        return Fields(dst=dst, src=tuple(src), lits=tuple(lits), neg=bits(MOD_NEG), neg_hi=bits(MOD_ABS),
                      opsel=bits(MOD_OP_SEL_0), opsel_hi=bits(MOD_OP_SEL_1), clamp=clamp)
    opsel = bits(MOD_OP_SEL_0) | (8 if mods and mods[0] & MOD_OP_SEL_1 else 0)
    return Fields(dst=dst, src=tuple(src), lits=tuple(lits), sdst=sdst, abs=bits(MOD_ABS), neg=bits(MOD_NEG),
                  opsel=opsel, clamp=clamp, omod=omod)


SDWA_DWORD, SDWA_WORD_0, SDWA_WORD_1 = 6, 4, 5  # SDWA_SEL values (LLVM's SIDefines.h, the GFX9 guide's SDWA table)


def _sdwa(name: str, inst: LlvmInstruction, ops: list[McOperand], isa: Isa) -> Fields:
    """GFX9's SDWA form of a VOP1/VOP2 operation: dst, (modifiers, source) per source, then clamp, omod,
    dst_sel, dst_unused and one select per source. The model runs the selections that are what it already
    reads: a whole dword, a 16-bit source's low or high half (op_sel), or a byte or word of a 32-bit source
    (Fields.sdwa, zero-extended); a sign-extended select, a modifier, clamp or omod is refused."""
    found = isa.semantics(name)
    op = vector_ops.ARITH.get(found[0]) if found else None
    count = _text_operands(inst.operands.split(" dst_sel")[0]) - 1
    if op is None or not 0 < count <= 2:
        raise Unsupported(f"{name}_sdwa at {inst.address:#x}: SDWA is modelled for plain VOP1/VOP2 operations only")
    dst = _vgpr(ops[0])
    mods = [_imm(ops[1 + 2 * i]) for i in range(count)]
    sources = [_source(ops[2 + 2 * i]) for i in range(count)]
    tail = [_imm(item) for item in ops[1 + 2 * count:]]
    selects, dst_sel, extra = tail[-count:], tail[-count - 2], tail[:-count - 2]
    halves = op.half_sources or (False,) * count
    opsel, picks = 0, {}
    for i, select in enumerate(selects):
        if select == SDWA_WORD_1 and halves[i]:
            opsel |= 1 << i
        elif 0 <= select < SDWA_DWORD and not halves[i]:  # a byte or word of a 32-bit source (Fields.sdwa)
            picks[i] = select
        elif not (select == SDWA_DWORD or (select == SDWA_WORD_0 and halves[i])):
            raise Unsupported(f"{name}_sdwa at {inst.address:#x}: src{i}_sel {select} is not modelled")
    sdwa = tuple(picks.get(i, SDWA_DWORD) for i in range(count)) if picks else ()
    if dst_sel != SDWA_DWORD or any(mods) or any(extra) or op.half_result:
        raise Unsupported(f"{name}_sdwa at {inst.address:#x}: dst_sel {dst_sel}, modifiers {mods} or clamp/omod "
                          f"{extra} are not modelled")
    return Fields(dst=dst, src=tuple(s[0] for s in sources), lits=tuple(s[1] for s in sources), opsel=opsel,
                  sdwa=sdwa)


def _mfma(ops: list[McOperand]) -> Fields:
    """MFMA: vdst, A, B, C (registers, C also an inline constant), then cbsz, abid, blgp. No modifier words.
    A VGPR or AGPR destination is a register number (AGPR n: 256 + n)."""
    if len(ops) != 7:
        raise ValueError(f"{len(ops)} operands, not 7 (vdst, A, B, C, cbsz, abid, blgp)")
    src, lits, _ = zip(*(_source(op) for op in ops[1:4]), strict=True)
    cbsz, abid, blgp = (_imm(op) for op in ops[4:])
    return Fields(dst=_reg(ops[0])[0] - VGPR_BASE, src=tuple(src), lits=tuple(lits), mfma=(cbsz, abid, blgp))


def _vopd(inst: LlvmInstruction, ops: list[McOperand], name_x: str, name_y: str) -> Fields:
    """dstX, dstY, X's sources (v_dual_fmac: and its tied addend), Y's sources (likewise)."""
    text_x, _, text_y = inst.operands.partition("::")
    count_x = _text_operands(text_x) - 1
    count_y = _text_operands(text_y.split(None, 1)[1] if len(text_y.split(None, 1)) > 1 else "") - 1
    dst_x, dst_y = _reg(ops[0])[0] - VGPR_BASE, _reg(ops[1])[0] - VGPR_BASE
    at = 2
    x = [_source(op) for op in ops[at:at + count_x]]
    at += count_x + (name_x == "v_dual_fmac_f32")
    y = [_source(op) for op in ops[at:at + count_y]]
    return Fields(dst=dst_x, src=tuple(s[0] for s in x), lits=tuple(s[1] for s in x), dst_y=dst_y,
                  src_y=tuple(s[0] for s in y), lits_y=tuple(s[1] for s in y))


def _vgpr(op: McOperand) -> int:
    code, _ = _reg(op)
    if code < VGPR_BASE:
        raise ValueError(f"expected a VGPR, found {op}")
    return code - VGPR_BASE


def _ds(name: str, ops: list[McOperand]) -> Fields:
    """Loads: vdst, addr, offsets, gds. Stores: addr, data0 (data1), offsets, gds. (GFX9 names loads ds_read,
    stores ds_write, and the two-address forms read2/write2.)"""
    if name.startswith(("ds_load", "ds_read", "ds_bpermute", "ds_permute", "ds_swizzle")):  # vdst first
        regs = [op for op in ops[2:] if isinstance(op, Reg)]  # ds_bpermute, ds_permute: data0 after addr
        dst, addr, rest = _vgpr(ops[0]), _vgpr(ops[1]), ops[2 + len(regs):]
        data: tuple[int, ...] = tuple(_vgpr(op) for op in regs)
    else:
        dst, addr = 0, _vgpr(ops[0])
        regs = [op for op in ops[1:] if isinstance(op, Reg)]
        data, rest = tuple(_vgpr(op) for op in regs), ops[1 + len(regs):]
    immediates = [_imm(op) for op in rest]
    if "2addr" in name or name.startswith(("ds_read2", "ds_write2")):
        offsets = (immediates[0], immediates[1])
    else:
        offsets = (immediates[0] & 0xFF, immediates[0] >> 8)
    return Fields(dst=dst, addr=addr, data=data, offsets=offsets)


def _scalar_offset(op: McOperand) -> int:
    code, lit, _ = _source(op)
    if code == LITERAL:
        raise ValueError(f"a literal scalar offset ({lit:#x})")
    return code


def _mubuf(opcode: str, ops: list[McOperand], gfx9: bool) -> Fields:
    """vdata, vaddr (not for _OFFSET), srsrc, soffset, offset, cpol, swz."""
    if not ops:  # a cache control such as buffer_gl0_inv
        return Fields()
    offen, idxen = "_OFFEN" in opcode or "_BOTHEN" in opcode, "_IDXEN" in opcode or "_BOTHEN" in opcode
    data = _vgpr(ops[0])
    at = 1
    addr = 0
    if offen or idxen:
        addr, at = _vgpr(ops[1]), 2
    base, _ = _reg(ops[at])
    return Fields(dst=data, data=(data,), addr=addr, base=base, soffset=_scalar_offset(ops[at + 1]),
                  imm=_imm(ops[at + 2]), offen=offen, idxen=idxen, gfx9_range=gfx9)


def _flat(name: str, opcode: str, ops: list[McOperand], offset_bits: int) -> Fields:
    """Stores: vaddr, vdata, (saddr), offset, cpol. Loads: vdst, vaddr, (saddr), offset, cpol (GFX9's loads: vdst,
    (saddr), vaddr, offset, cpol): saddr is the one scalar register."""
    if not any(isinstance(op, Reg) for op in ops):  # a cache control such as global_inv (its scope)
        return Fields()
    saddr = "_SADDR" in opcode
    regs = [op for op in ops if isinstance(op, Reg)]
    scalar = [op for op in regs if _reg(op)[0] < VGPR_BASE]
    if len(scalar) != int(saddr):
        raise ValueError(f"{len(scalar)} scalar registers in a global access {'with' if saddr else 'without'} saddr")
    vector = [_vgpr(op) for op in regs if op not in scalar]
    if name.startswith("global_store"):
        addr, data, dst = vector[0], (vector[1],), 0
    else:
        dst, addr, data = vector[0], vector[1], ()
    base = _reg(scalar[0])[0] if saddr else NULL
    offset = _imm(ops[len(regs)]) & (1 << offset_bits) - 1
    offset -= (offset & 1 << offset_bits - 1) << 1
    return Fields(dst=dst, addr=addr, data=data, base=base, imm=offset)
