"""Scalar ALU and program-flow instructions (SOP1, SOP2, SOPC, SOPK, SOPP): their effect on a wave, from the
RDNA3 ISA guide's descriptions. Each returns nothing; branches set the wave's pc (the caller advances pc
past an instruction that did not)."""

from __future__ import annotations

from collections.abc import Callable

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import EXEC_LO, VCC_LO, Unsupported, Wave

MASK32 = 0xFFFFFFFF


def _s32(value: int) -> int:
    value &= MASK32
    return value - (1 << 32) if value & 0x80000000 else value


def _sext16(value: int) -> int:
    return value - (1 << 16) if value & 0x8000 else value


def _sources(wave: Wave, inst: Instruction, f: Fields) -> tuple[int, ...]:
    return tuple(wave.scalar(code, f.lit(i)) for i, code in enumerate(f.src))


def _result(wave: Wave, f: Fields, value: int, scc: bool | None = None) -> None:
    wave.write_scalar(f.dst, value)
    if scc is not None:
        wave.scc = scc


# SOP2 and SOP1: (wave, sources, fields) -> None
def _add_u32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    total = s[0] + s[1]
    _result(w, f, total, total > MASK32)


def _add_i32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    total = _s32(s[0]) + _s32(s[1])
    _result(w, f, total, not -(1 << 31) <= total < 1 << 31)


def _addc_u32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    total = s[0] + s[1] + int(w.scc)
    _result(w, f, total, total > MASK32)


def _subb_u32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    diff = s[0] - s[1] - int(w.scc)
    _result(w, f, diff, diff < 0)


def _logic(op: Callable[[int, int], int]) -> Callable[[Wave, tuple[int, ...], Fields], None]:
    def run(w: Wave, s: tuple[int, ...], f: Fields) -> None:
        value = op(s[0], s[1]) & MASK32
        _result(w, f, value, value != 0)
    return run


def _lshl_b64(w: Wave, s: tuple[int, ...], f: Fields, inst: Instruction) -> None:
    value = w.scalar64(f.src[0], f.lit(0)) << (s[1] & 63) & 0xFFFFFFFFFFFFFFFF
    w.write_scalar64(f.dst, value)
    w.scc = value != 0


def _and_saveexec(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    if w.lanes != 32:
        raise Unsupported("s_and_saveexec_b32 on a wave64")
    old = int(w.sgpr[EXEC_LO])
    new = s[0] & old
    w.write_scalar(f.dst, old)
    w.sgpr[EXEC_LO] = new
    w.scc = new != 0


SOP: dict[str, Callable[[Wave, tuple[int, ...], Fields], None]] = {
    "s_mov_b32": lambda w, s, f: _result(w, f, s[0]),
    "s_and_saveexec_b32": _and_saveexec,
    "s_add_u32": _add_u32,
    "s_add_i32": _add_i32,
    "s_addc_u32": _addc_u32,
    "s_subb_u32": _subb_u32,
    "s_lshl_b32": _logic(lambda a, b: a << (b & 31)),
    "s_lshr_b32": _logic(lambda a, b: a >> (b & 31)),
    "s_ashr_i32": _logic(lambda a, b: _s32(a) >> (b & 31)),
    "s_and_b32": _logic(lambda a, b: a & b),
    "s_or_b32": _logic(lambda a, b: a | b),
    "s_xor_b32": _logic(lambda a, b: a ^ b),
    "s_mul_i32": lambda w, s, f: _result(w, f, _s32(s[0]) * _s32(s[1])),
    "s_mul_hi_i32": lambda w, s, f: _result(w, f, (_s32(s[0]) * _s32(s[1])) >> 32),
    "s_cselect_b32": lambda w, s, f: _result(w, f, s[0] if w.scc else s[1]),
}

SOPC: dict[str, Callable[[int, int], bool]] = {
    "s_cmp_ge_i32": lambda a, b: _s32(a) >= _s32(b),
    "s_cmp_lt_i32": lambda a, b: _s32(a) < _s32(b),
    "s_cmp_eq_u32": lambda a, b: a == b,
    "s_cmp_lg_u32": lambda a, b: a != b,
    "s_cmp_lt_u32": lambda a, b: a < b,
    "s_bitcmp1_b32": lambda a, b: bool(a >> (b & 31) & 1),
}

# Instructions that only order or pace execution: a model that finishes each instruction before starting the
# next has nothing to wait for.
NO_EFFECT = {"s_nop", "s_set_inst_prefetch_distance", "s_clause", "s_delay_alu", "s_waitcnt_depctr", "s_waitcnt",
             "s_waitcnt_vscnt"}
SENDMSG_DEALLOC_VGPRS = 3  # the one message the kernels send: release VGPRs before s_endpgm (a no-op here)


BRANCHES = ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz", "s_cbranch_execz")
# What this module runs (s_barrier is the workgroup's; s_code_end is padding and stops a wave that reaches it).
MNEMONICS = frozenset({*SOP, *SOPC, *NO_EFFECT, *BRANCHES, "s_lshl_b64", "s_movk_i32", "s_cmpk_lt_i32", "s_endpgm",
                       "s_sendmsg", "s_barrier", "s_code_end"})


def run_scalar(wave: Wave, inst: Instruction, f: Fields) -> bool:
    """Executes a scalar or flow instruction; True when it set the pc itself (a taken branch)."""
    name = inst.name
    if name in NO_EFFECT:
        return False
    if name == "s_lshl_b64":
        _lshl_b64(wave, _sources(wave, inst, f), f, inst)
    elif name in SOP:
        SOP[name](wave, _sources(wave, inst, f), f)
    elif name in SOPC:
        a, b = _sources(wave, inst, f)
        wave.scc = SOPC[name](a, b)
    elif name == "s_movk_i32":
        wave.write_scalar(f.dst, _sext16(f.imm))
    elif name == "s_cmpk_lt_i32":
        wave.scc = _s32(int(wave.sgpr[f.dst])) < _sext16(f.imm)
    elif name == "s_endpgm":
        wave.done = True
    elif name == "s_sendmsg":
        if f.imm != SENDMSG_DEALLOC_VGPRS:
            raise Unsupported(f"s_sendmsg {f.imm:#x} at {inst.address:#x}")
    else:
        return _branch(wave, inst, f)
    return False


def _branch(wave: Wave, inst: Instruction, f: Fields) -> bool:
    taken = {"s_branch": True, "s_cbranch_scc0": not wave.scc, "s_cbranch_scc1": wave.scc,
             "s_cbranch_vccz": wave.read_mask(VCC_LO) == 0, "s_cbranch_vccnz": wave.read_mask(VCC_LO) != 0,
             "s_cbranch_execz": wave.read_mask(EXEC_LO) == 0}.get(inst.name)
    if taken is None:
        raise Unsupported(f"{inst.name} at {inst.address:#x} is not implemented")
    if taken:
        wave.pc = inst.address + 4 + 4 * _sext16(f.imm)
    return taken
