"""Scalar ALU and program-flow instructions (SOP1, SOP2, SOPC, SOPK, SOPP): their effect on a wave, from the
RDNA3 ISA guide's descriptions. Each returns nothing; branches set the wave's pc (the caller advances pc
past an instruction that did not)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from amdgpu_models.core.floats import fma_odd
from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import EXEC_LO, VCC_LO, Unsupported, Wave

MASK32 = 0xFFFFFFFF
MASK64 = 0xFFFFFFFFFFFFFFFF


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


def _saveexec64(op: Callable[[int, int], int]) -> Callable[[Wave, Fields, Instruction], None]:
    """s_<op>_saveexec_b64 (a wave64's EXEC pair): the old EXEC to the destination pair, EXEC = op(S0, EXEC),
    SCC whether the new EXEC is not 0."""
    def run(w: Wave, f: Fields, inst: Instruction) -> None:
        if w.lanes != 64:
            raise Unsupported(f"{inst.name} on a wave32")
        old = w.scalar64(EXEC_LO, None)
        new = op(w.scalar64(f.src[0], f.lit(0)), old) & MASK64
        w.write_scalar64(f.dst, old)
        w.write_scalar64(EXEC_LO, new)
        w.scc = new != 0
    return run


def _logic64(op: Callable[[int, int], int]) -> Callable[[Wave, Fields, Instruction], None]:
    """A 64-bit bitwise SOP2 (register pairs; an inline constant sign-extended): SCC whether the result is not 0."""
    def run(w: Wave, f: Fields, inst: Instruction) -> None:
        value = op(w.scalar64(f.src[0], f.lit(0)), w.scalar64(f.src[1], f.lit(1))) & MASK64
        w.write_scalar64(f.dst, value)
        w.scc = value != 0
    return run


def _cselect64(w: Wave, f: Fields, inst: Instruction) -> None:
    w.write_scalar64(f.dst, w.scalar64(f.src[0 if w.scc else 1], f.lit(0 if w.scc else 1)))


def _mov64(w: Wave, f: Fields, inst: Instruction) -> None:
    w.write_scalar64(f.dst, w.scalar64(f.src[0], f.lit(0)))


# 64-bit scalar operations of GFX9 (a wave64's masks are register pairs): the sources are register pairs or
# constants, as Wave.scalar64 reads them.
SOP_B64: dict[str, Callable[[Wave, Fields, Instruction], None]] = {
    "s_mov_b64": _mov64,
    "s_cselect_b64": _cselect64,
    "s_and_b64": _logic64(lambda a, b: a & b),
    "s_or_b64": _logic64(lambda a, b: a | b),
    "s_xor_b64": _logic64(lambda a, b: a ^ b),
    "s_and_not1_b64": _logic64(lambda a, b: a & ~b),
    "s_and_saveexec_b64": _saveexec64(lambda s, e: s & e),
}


def _f32(bits: int) -> np.float32:
    return np.array([bits & MASK32], dtype=np.uint32).view(np.float32)[0]


def _bits(value: np.floating) -> int:
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


def _float(op: Callable[..., np.floating]) -> Callable[[Wave, tuple[int, ...], Fields], None]:
    """An SALU binary32 operation (RDNA4; round to nearest even, denormals kept: the only float mode the launch
    accepts). s_fmac_f32's third source is its destination (LLVM's tied operand)."""
    def run(w: Wave, s: tuple[int, ...], f: Fields) -> None:
        with np.errstate(all="ignore"):
            _result(w, f, _bits(op(*(_f32(v) for v in s))))
    return run


def _f32_to_u32(value: np.float32) -> int:
    """Truncation toward zero, saturating: NaN and negatives give 0, 2^32 and more 0xFFFFFFFF."""
    if np.isnan(value) or value <= 0:
        return 0
    return min(int(min(float(value), 2.0**32)), MASK32)


def _fmac(a: np.float32, b: np.float32, c: np.float32) -> np.floating:
    return fma_odd(np.array([a]), np.array([b]), np.array([c])).astype(np.float32)[0]


def _add_nc_u64(w: Wave, f: Fields) -> None:
    w.write_scalar64(f.dst, w.scalar64(f.src[0], f.lit(0)) + w.scalar64(f.src[1], f.lit(1)) & MASK64)


def _mul_u64(w: Wave, f: Fields) -> None:
    w.write_scalar64(f.dst, w.scalar64(f.src[0], f.lit(0)) * w.scalar64(f.src[1], f.lit(1)) & MASK64)


SOP64: dict[str, Callable[[Wave, Fields], None]] = {  # 64-bit sources and result, SCC unchanged (RDNA4)
    "s_add_nc_u64": _add_nc_u64,
    "s_mul_u64": _mul_u64,
}

# RDNA4's pseudo-scalar transcendentals (VOP3 encoded, LLVM's V_S_*_e64): one binary32 scalar value in, an SGPR
# out; VOP3's abs and neg apply. The model writes the SGPR whatever EXEC is (an assumption: the kernels run
# them with lanes on, and what an all-off EXEC does is not pinned down here). The model returns the correctly
# rounded square root and reciprocal (the ISA documents them to 1 ULP, as v_sqrt_f32 / v_rcp_f32).
PSEUDO_SCALAR: dict[str, Callable[[np.float32], np.floating]] = {
    "v_s_sqrt_f32": np.sqrt,
    "v_s_rcp_f32": lambda a: np.float32(1) / a,
}


def _pseudo_scalar(wave: Wave, inst: Instruction, f: Fields) -> None:
    if f.clamp or f.omod:
        raise Unsupported(f"{inst.name} at {inst.address:#x} with clamp or an output modifier")
    bits = wave.scalar(f.src[0], f.lit(0))
    bits = bits & 0x7FFFFFFF if f.abs & 1 else bits
    bits = bits ^ 0x80000000 if f.neg & 1 else bits
    with np.errstate(all="ignore"):
        wave.write_scalar(f.dst, _bits(PSEUDO_SCALAR[inst.name](_f32(bits))))


def _sub_i32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    diff = _s32(s[0]) - _s32(s[1])
    _result(w, f, diff, not -(1 << 31) <= diff < 1 << 31)


def _lshl_add(shift: int) -> Callable[[Wave, tuple[int, ...], Fields], None]:
    """s_lshl<n>_add_u32: (S0 << n) + S1, SCC the carry out of bit 31."""
    def run(w: Wave, s: tuple[int, ...], f: Fields) -> None:
        total = (s[0] << shift) + s[1]
        _result(w, f, total, total > MASK32)
    return run


def _min_max_i32(take_first: Callable[[int, int], bool]) -> Callable[[Wave, tuple[int, ...], Fields], None]:
    """s_min_i32 / s_max_i32: SCC is whether S0 was chosen (S0 < S1, S0 >= S1)."""
    def run(w: Wave, s: tuple[int, ...], f: Fields) -> None:
        first = take_first(_s32(s[0]), _s32(s[1]))
        _result(w, f, s[0] if first else s[1], first)
    return run


def _abs_i32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    value = abs(_s32(s[0])) & MASK32  # |-2^31| wraps to -2^31
    _result(w, f, value, value != 0)


def _bitset1(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    """s_bitset1_b32: sets bit S0[4:0] of the destination (which it also reads); SCC unchanged."""
    w.write_scalar(f.dst, w.scalar(f.dst, None) | 1 << (s[0] & 31))


def _lshr_b64(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    value = w.scalar64(f.src[0], f.lit(0)) >> (s[1] & 63)
    w.write_scalar64(f.dst, value)
    w.scc = value != 0


def _addk_i32(w: Wave, s: tuple[int, ...], f: Fields) -> None:
    """s_addk_i32: D += signext(SIMM16) (LLVM gives the destination as the first source, the simm16 as the
    second); SCC the signed overflow."""
    total = _s32(s[0]) + _sext16(s[1])
    _result(w, f, total, not -(1 << 31) <= total < 1 << 31)


def _brev(value: int) -> int:
    return int(f"{value & MASK32:032b}"[::-1], 2)


SOP: dict[str, Callable[[Wave, tuple[int, ...], Fields], None]] = {
    "s_add_f32": _float(lambda a, b: a + b),
    "s_sub_f32": _float(lambda a, b: a - b),
    "s_mul_f32": _float(lambda a, b: a * b),
    "s_fmac_f32": _float(_fmac),
    "s_cvt_f32_i32": lambda w, s, f: _result(w, f, _bits(np.float32(_s32(s[0])))),
    "s_cvt_f32_u32": lambda w, s, f: _result(w, f, _bits(np.float32(s[0]))),
    "s_cvt_u32_f32": lambda w, s, f: _result(w, f, _f32_to_u32(_f32(s[0]))),
    "s_mulk_i32": lambda w, s, f: _result(w, f, _s32(s[0]) * _sext16(s[1])),  # D *= signext(SIMM16), as s_addk
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
    "s_sub_i32": _sub_i32,
    "s_mul_hi_u32": lambda w, s, f: _result(w, f, (s[0] * s[1]) >> 32),
    "s_abs_i32": _abs_i32,
    "s_min_i32": _min_max_i32(lambda a, b: a < b),
    "s_max_i32": _min_max_i32(lambda a, b: a >= b),
    "s_not_b32": lambda w, s, f: _result(w, f, ~s[0] & MASK32, (~s[0] & MASK32) != 0),
    "s_and_not1_b32": _logic(lambda a, b: a & ~b),
    "s_xnor_b32": _logic(lambda a, b: ~(a ^ b)),
    "s_brev_b32": lambda w, s, f: _result(w, f, _brev(s[0])),
    "s_bitset1_b32": _bitset1,
    "s_lshl1_add_u32": _lshl_add(1),
    "s_lshl2_add_u32": _lshl_add(2),
    "s_lshl3_add_u32": _lshl_add(3),
    "s_lshl4_add_u32": _lshl_add(4),
    "s_sub_u32": lambda w, s, f: _result(w, f, s[0] - s[1], s[1] > s[0]),  # SCC the borrow
    # s_bfe_u32: the field of S1[22:16] bits at S1[4:0], zero-extended; SCC whether it is not 0
    "s_bfe_u32": _logic(lambda a, b: a >> (b & 31) & (1 << (b >> 16 & 0x7F)) - 1),
    "s_lshr_b64": _lshr_b64,
    "s_addk_i32": _addk_i32,
}

SOPC: dict[str, Callable[[int, int], bool]] = {
    "s_cmp_ge_i32": lambda a, b: _s32(a) >= _s32(b),
    "s_cmp_lt_i32": lambda a, b: _s32(a) < _s32(b),
    "s_cmp_le_i32": lambda a, b: _s32(a) <= _s32(b),
    "s_cmp_eq_u32": lambda a, b: a == b,
    "s_cmp_lg_u32": lambda a, b: a != b,
    "s_cmp_lt_u32": lambda a, b: a < b,
    "s_bitcmp1_b32": lambda a, b: bool(a >> (b & 31) & 1),
    "s_bitcmp0_b32": lambda a, b: not a >> (b & 31) & 1,
    "s_cmp_ge_u32": lambda a, b: a >= b,
    "s_cmp_gt_i32": lambda a, b: _s32(a) > _s32(b),
    # RDNA4's binary32 compares: ordered ones are false when either operand is a NaN, s_cmp_neq/u true
    "s_cmp_lt_f32": lambda a, b: bool(_f32(a) < _f32(b)),
    "s_cmp_gt_f32": lambda a, b: bool(_f32(a) > _f32(b)),
    "s_cmp_le_f32": lambda a, b: bool(_f32(a) <= _f32(b)),
    "s_cmp_ge_f32": lambda a, b: bool(_f32(a) >= _f32(b)),
    "s_cmp_eq_f32": lambda a, b: bool(_f32(a) == _f32(b)),
    "s_cmp_lg_f32": lambda a, b: bool(_f32(a) < _f32(b) or _f32(a) > _f32(b)),
    "s_cmp_neq_f32": lambda a, b: not bool(_f32(a) == _f32(b)),
    "s_cmp_o_f32": lambda a, b: not (np.isnan(_f32(a)) or np.isnan(_f32(b))),
    "s_cmp_u_f32": lambda a, b: bool(np.isnan(_f32(a)) or np.isnan(_f32(b))),
}

# Compares of 64-bit scalars (register pairs; an inline constant sign-extended, a literal zero-extended).
SOPC64: dict[str, Callable[[int, int], bool]] = {
    "s_cmp_eq_u64": lambda a, b: a == b,
    "s_cmp_lg_u64": lambda a, b: a != b,
}

# Instructions that only order or pace execution: a model that finishes each instruction before starting the
# next has nothing to wait for.
NO_EFFECT = {"s_nop", "s_set_inst_prefetch_distance", "s_clause", "s_delay_alu", "s_waitcnt_depctr", "s_waitcnt",
             "s_waitcnt_vscnt",
             # RDNA4's split counters (each counter waited on by its own instruction)
             "s_wait_loadcnt", "s_wait_storecnt", "s_wait_dscnt", "s_wait_kmcnt", "s_wait_loadcnt_dscnt",
             "s_wait_storecnt_dscnt", "s_wait_samplecnt", "s_wait_bvhcnt", "s_wait_expcnt"}
BARRIER_WORKGROUP = 0xFFFF  # RDNA4's s_barrier_signal / s_barrier_wait -1: the workgroup's barrier
SENDMSG_DEALLOC_VGPRS = 3  # the one message the kernels send: release VGPRs before s_endpgm (a no-op here)


BRANCHES = ("s_branch", "s_cbranch_scc0", "s_cbranch_scc1", "s_cbranch_vccz", "s_cbranch_vccnz", "s_cbranch_execz",
            "s_cbranch_execnz")
# What this module runs (s_barrier is the workgroup's; s_code_end is padding and stops a wave that reaches it).
# RDNA4 splits s_barrier into s_barrier_signal (this wave has arrived) and s_barrier_wait (the workgroup's).
MNEMONICS = frozenset({*SOP, *SOP64, *SOP_B64, *SOPC, *SOPC64, *PSEUDO_SCALAR, *NO_EFFECT, *BRANCHES, "s_lshl_b64",
                       "s_movk_i32",
                       "s_cmpk_lt_i32", "s_endpgm", "s_sendmsg", "s_barrier", "s_barrier_signal", "s_barrier_wait",
                       "s_code_end"})


def run_scalar(wave: Wave, inst: Instruction, f: Fields) -> bool:
    """Executes a scalar or flow instruction; True when it set the pc itself (a taken branch)."""
    name = inst.name
    if name in NO_EFFECT:
        return False
    if name == "s_lshl_b64":
        _lshl_b64(wave, _sources(wave, inst, f), f, inst)
    elif name in SOP:
        SOP[name](wave, _sources(wave, inst, f), f)
    elif name in PSEUDO_SCALAR:
        _pseudo_scalar(wave, inst, f)
    elif name in SOP64:
        SOP64[name](wave, f)
    elif name in SOP_B64:
        SOP_B64[name](wave, f, inst)
    elif name == "s_barrier_signal":  # the wait (workgroup.py) is where a wave stops
        if f.imm != BARRIER_WORKGROUP:
            raise Unsupported(f"s_barrier_signal {_sext16(f.imm)} at {inst.address:#x}: only the workgroup "
                              "barrier (-1) is modelled")
        wave.barrier_signalled = True
    elif name in SOPC:
        a, b = _sources(wave, inst, f)
        wave.scc = SOPC[name](a, b)
    elif name in SOPC64:
        wave.scc = SOPC64[name](wave.scalar64(f.src[0], f.lit(0)), wave.scalar64(f.src[1], f.lit(1)))
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
             "s_cbranch_execz": wave.read_mask(EXEC_LO) == 0,
             "s_cbranch_execnz": wave.read_mask(EXEC_LO) != 0}.get(inst.name)
    if taken is None:
        raise Unsupported(f"{inst.name} at {inst.address:#x} is not implemented")
    if taken:
        wave.pc = inst.address + 4 + 4 * _sext16(f.imm)
    return taken
