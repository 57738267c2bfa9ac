"""Vector ALU instructions (e32 and DPP, VOP3, VOP3P, VOPD forms) on a wave's lanes (32 or 64), from the RDNA3 ISA
guide's descriptions: operands are read (with DPP16 lane selection and VOP3's abs/neg), the operation runs
on all lanes at once, and the result is written to the lanes EXEC (and DPP) enable.

Not modelled, and stopping the run when met: VOP3's clamp and output multiplier, DPP8, and any opcode not
listed here. v_rcp_f32 and v_sqrt_f32 are documented to 1 ULP; the model returns the correctly rounded
value, which is within that bound but may differ from the hardware's last bit. v_exp_f32 and v_log_f32 (also
1 ULP) are binary64's 2^x and log2 x rounded to binary32. WMMA lives in matrix_ops.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amdgpu_models.core import lanes, matrix_ops, wide_ops
from amdgpu_models.core.floats import U32, as_f32, bits_of, f16_to_f32, f32_to_f16, fma_odd, modify_f32
from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import AGPR_BASE, EXEC_LO, VCC_LO, VGPR_BASE, Unsupported, Wave, dpp_lanes


@dataclass(frozen=True)
class Op:
    """How an operation reads and writes: `fn` maps source lane arrays to a result lane array (uint32 bits)."""

    fn: Callable[..., U32]
    sources: int
    float_sources: bool = False  # abs/neg apply (binary32)
    half_sources: tuple[bool, ...] = ()  # per source: a 16-bit operand
    half_result: bool = False
    accumulates: bool = False  # v_fmac: the destination is also the addend


def _f(fn: Callable[..., np.ndarray]) -> Callable[..., U32]:
    """A binary32 operation on bit patterns."""
    def run(*args: U32) -> U32:
        with np.errstate(all="ignore"):
            return bits_of(fn(*(as_f32(a) for a in args)))
    return run


def _shift(a: U32) -> U32:
    return a & np.uint32(31)


def _sqrt(a: np.ndarray) -> np.ndarray:
    return np.sqrt(a)


def _cvt_f32_i32(a: U32) -> U32:
    return bits_of(a.view(np.int32).astype(np.float32))


def _fma(a: U32, b: U32, c: U32) -> U32:
    return bits_of(fma_odd(as_f32(a), as_f32(b), as_f32(c)).astype(np.float32))


def _bfe_u32(a: U32, b: U32, c: U32) -> U32:
    width = (c & np.uint32(31)).astype(np.uint64)
    return ((a >> _shift(b)).astype(np.uint64) & ((np.uint64(1) << width) - np.uint64(1))).astype(np.uint32)


def _exp2(a: np.ndarray) -> np.ndarray:
    """v_exp_f32: 2^x (the guide documents 1 ULP; the model rounds binary64's 2^x to binary32)."""
    return np.exp2(a.astype(np.float64)).astype(np.float32)


def _log2(a: np.ndarray) -> np.ndarray:
    """v_log_f32: log2(x) (documented to 1 ULP; the model rounds binary64's log2 to binary32)."""
    return np.log2(a.astype(np.float64)).astype(np.float32)


QUIET = np.uint32(0x400000)  # the quiet bit of a binary32 NaN


def _max_f32(a: U32, b: U32) -> U32:
    """v_max_f32 in IEEE mode (the only mode the launch accepts): a signalling NaN operand gives that NaN
    quieted (src0's first), a quiet NaN gives the other operand, and +0 counts as greater than -0."""
    return _min_max(a, b, greater=True)


def _min_max(a: U32, b: U32, greater: bool) -> U32:
    fa, fb = as_f32(a), as_f32(b)
    with np.errstate(all="ignore"):
        if not np.isnan(fa + fb).any() and not ((fa == 0) & (fb == 0)).any():  # no NaN, no pair of zeros:
            return np.where(fa > fb if greater else fa < fb, a, b).astype(np.uint32)  # the plain comparison
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    signal_a, signal_b = nan_a & ((a & QUIET) == 0), nan_b & ((b & QUIET) == 0)
    with np.errstate(all="ignore"):
        zeros = (fa == 0) & (fb == 0)
        negative_a = (a >> 31).astype(bool)
        negative_b = (b >> 31).astype(bool)
        if greater:  # +0 > -0
            pick_a = np.where(zeros, ~negative_a & negative_b, fa > fb)
        else:  # -0 < +0
            pick_a = np.where(zeros, negative_a & ~negative_b, fa < fb)
    result = np.where(pick_a, a, b)
    result = np.where(nan_a & ~signal_a, b, result)  # checked in the guide's order, the first match wins
    result = np.where(nan_b & ~signal_b, a, result)
    result = np.where(signal_b, b | QUIET, result)
    result = np.where(signal_a, a | QUIET, result)
    return result.astype(np.uint32)


def _max_num_f32(a: U32, b: U32) -> U32:
    """RDNA4's v_max_num_f32, IEEE 754-2019 maximumNumber: a NaN operand (quiet or signalling) gives the other
    operand, two NaNs give src0 quieted, and +0 counts as greater than -0."""
    fa, fb = as_f32(a), as_f32(b)
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    with np.errstate(all="ignore"):
        zeros = (fa == 0) & (fb == 0)
        pick_a = np.where(zeros, ~(a >> 31).astype(bool) & (b >> 31).astype(bool), fa > fb)
    result = np.where(pick_a, a, b)
    result = np.where(nan_a, b, np.where(nan_b, a, result))
    return np.where(nan_a & nan_b, a | QUIET, result).astype(np.uint32)


def _i32(a: U32) -> np.ndarray:
    return a.view(np.int32)


def _med3_i32(a: U32, b: U32, c: U32) -> U32:
    x, y, z = _i32(a), _i32(b), _i32(c)
    return np.maximum(np.minimum(x, y), np.minimum(np.maximum(x, y), z)).astype(np.int32).view(np.uint32)


def _mul_hi_u32(a: U32, b: U32) -> U32:
    return ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32)


def _u24(a: U32) -> U32:
    return a & np.uint32(0xFFFFFF)


def _cvt_u32_f32(a: U32) -> U32:
    """Truncation toward zero, saturating: NaN and negatives give 0, values of 2^32 or more 0xFFFFFFFF."""
    with np.errstate(all="ignore"):
        x = np.trunc(as_f32(a).astype(np.float64))
        x = np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 4294967295.0))
    return x.astype(np.uint32)


def _shift16(a: U32) -> U32:
    return a & np.uint32(15)


_PERM_SIGNS = np.array([1, 3, 5, 7])  # v_perm_b32's selectors 8-11: the top bit of these bytes of {S0, S1}


def _perm(a: U32, b: U32, c: U32) -> U32:
    """v_perm_b32: each result byte chosen by the selector byte of S2 from the eight bytes {S0, S1} (S1 the low
    four): 0-7 that byte, 8-11 the sign of S1's byte 1, S1's byte 3, S0's byte 1, S0's byte 3 repeated (0x00 or
    0xFF), 12 zero, 13 and above 0xFF. Per lane a table of those 14 bytes, indexed by all four selectors at once."""
    n = len(a)
    pool = np.stack([b, a], axis=1).astype("<u4").view(np.uint8).reshape(n, 8)  # byte i of {S0, S1}
    signs = np.where(pool[:, _PERM_SIGNS] & 0x80, np.uint8(0xFF), np.uint8(0))
    table = np.concatenate([pool, signs, np.zeros((n, 1), np.uint8), np.full((n, 1), 0xFF, np.uint8)], axis=1)
    selectors = np.ascontiguousarray(c, dtype="<u4").view(np.uint8).reshape(n, 4)
    picked = np.take_along_axis(table, np.minimum(selectors, 13), axis=1)
    return np.ascontiguousarray(picked).view("<u4").reshape(n).astype(np.uint32)


def _bf16(a: U32) -> U32:
    """binary32 to bfloat16, rounded to nearest even (overflow to infinity); a NaN stays a NaN, quieted."""
    rounded = (a.astype(np.uint64) + np.uint64(0x7FFF) + (a >> np.uint32(16) & np.uint32(1))) >> np.uint64(16)
    nan = np.isnan(as_f32(a))
    return np.where(nan, (a >> np.uint32(16)) | np.uint32(0x40), rounded.astype(np.uint32)).astype(np.uint32)


_REVERSED_BYTE = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], dtype=np.uint32)


def _bfrev(a: U32) -> U32:
    """v_bfrev_b32: bit 31 - i of the result is bit i of the source."""
    out = np.zeros(a.shape, dtype=np.uint32)
    for i in range(4):
        out |= _REVERSED_BYTE[a >> np.uint32(8 * i) & np.uint32(0xFF)] << np.uint32(24 - 8 * i)
    return out


def _i24(a: U32) -> np.ndarray:
    """The low 24 bits as a signed integer (int64)."""
    return ((a & np.uint32(0xFFFFFF)).astype(np.int64) ^ 0x800000) - 0x800000


ARITH: dict[str, Op] = {
    "v_mov_b32": Op(lambda a: a, 1),
    "v_add_f32": Op(_f(lambda a, b: a + b), 2, True),
    "v_sub_f32": Op(_f(lambda a, b: a - b), 2, True),
    "v_mul_f32": Op(_f(lambda a, b: a * b), 2, True),
    "v_fmac_f32": Op(_fma, 3, True, accumulates=True),
    "v_fma_f32": Op(_fma, 3, True),
    "v_rcp_f32": Op(_f(lambda a: np.float32(1) / a), 1, True),
    "v_sqrt_f32": Op(_f(_sqrt), 1, True),
    "v_cvt_f32_i32": Op(_cvt_f32_i32, 1),
    "v_cvt_f16_f32": Op(lambda a: f32_to_f16(as_f32(a)), 1, True, half_result=True),
    "v_cvt_f32_f16": Op(lambda a: bits_of(f16_to_f32(a)), 1, half_sources=(True,)),
    "v_mov_b16": Op(lambda a: a & np.uint32(0xFFFF), 1, half_sources=(True,), half_result=True),
    "v_lshlrev_b32": Op(lambda a, b: b << _shift(a), 2),
    "v_lshrrev_b32": Op(lambda a, b: b >> _shift(a), 2),
    "v_and_b32": Op(lambda a, b: a & b, 2),
    "v_or_b32": Op(lambda a, b: a | b, 2),
    "v_add_nc_u32": Op(lambda a, b: a + b, 2),
    "v_bfe_u32": Op(_bfe_u32, 3),
    "v_lshl_add_u32": Op(lambda a, b, c: (a << _shift(b)) + c, 3),
    "v_add_lshl_u32": Op(lambda a, b, c: (a + b) << _shift(c), 3),
    "v_add3_u32": Op(lambda a, b, c: a + b + c, 3),
    "v_lshl_or_b32": Op(lambda a, b, c: (a << _shift(b)) | c, 3),
    "v_exp_f32": Op(_f(_exp2), 1, True),
    "v_log_f32": Op(_f(_log2), 1, True),
    "v_max_f32": Op(_max_f32, 2, True),
    "v_max3_f32": Op(lambda a, b, c: _max_f32(_max_f32(a, b), c), 3, True),
    "v_max_num_f32": Op(_max_num_f32, 2, True),
    "v_max3_num_f32": Op(lambda a, b, c: _max_num_f32(_max_num_f32(a, b), c), 3, True),
    "v_subrev_f32": Op(_f(lambda a, b: b - a), 2, True),
    "v_min_u32": Op(np.minimum, 2),
    "v_max_i32": Op(lambda a, b: np.maximum(_i32(a), _i32(b)).view(np.uint32), 2),
    "v_min_i32": Op(lambda a, b: np.minimum(_i32(a), _i32(b)).view(np.uint32), 2),
    "v_med3_i32": Op(_med3_i32, 3),
    "v_sub_nc_u32": Op(lambda a, b: a - b, 2),
    "v_subrev_nc_u32": Op(lambda a, b: b - a, 2),
    "v_xor_b32": Op(lambda a, b: a ^ b, 2),
    "v_ashrrev_i32": Op(lambda a, b: (_i32(b) >> _shift(a).astype(np.int32)).view(np.uint32), 2),
    "v_and_or_b32": Op(lambda a, b, c: (a & b) | c, 3),
    "v_or3_b32": Op(lambda a, b, c: a | b | c, 3),
    "v_mul_lo_u32": Op(lambda a, b: a * b, 2),
    "v_mul_hi_u32": Op(_mul_hi_u32, 2),
    "v_mul_u32_u24": Op(lambda a, b: _u24(a) * _u24(b), 2),
    "v_mad_u32_u24": Op(lambda a, b, c: _u24(a) * _u24(b) + c, 3),
    "v_cvt_f32_u32": Op(lambda a: bits_of(a.astype(np.float32)), 1),
    "v_cvt_u32_f32": Op(_cvt_u32_f32, 1, True),
    # 16-bit integer operations on a VGPR half (true16: .l/.h registers, or VOP3's op_sel)
    "v_cvt_u32_u16": Op(lambda a: a & np.uint32(0xFFFF), 1, half_sources=(True,)),
    "v_and_b16": Op(lambda a, b: a & b, 2, half_sources=(True, True), half_result=True),
    "v_or_b16": Op(lambda a, b: a | b, 2, half_sources=(True, True), half_result=True),
    "v_lshrrev_b16": Op(lambda a, b: b >> _shift16(a), 2, half_sources=(True, True), half_result=True),
    "v_mul_lo_u16": Op(lambda a, b: a * b, 2, half_sources=(True, True), half_result=True),
    "v_sub_nc_u16": Op(lambda a, b: a - b, 2, half_sources=(True, True), half_result=True),
    # GFX9: byte permute, two halves packed into one dword, two binary32 values converted into one
    "v_perm_b32": Op(_perm, 3),
    "v_pack_b32_f16": Op(lambda a, b: a | b << np.uint32(16), 2, half_sources=(True, True)),
    "v_cvt_pk_f16_f32": Op(lambda a, b: f32_to_f16(as_f32(a)) | f32_to_f16(as_f32(b)) << np.uint32(16), 2, True),
    "v_cvt_pk_bf16_f32": Op(lambda a, b: _bf16(a) | _bf16(b) << np.uint32(16), 2, True),
    # GFX9 (sdpa_cdna): bit reverse, signed 24-bit multiply-add, xor-add
    "v_bfrev_b32": Op(_bfrev, 1),
    "v_mad_i32_i24": Op(lambda a, b, c: (_i24(a) * _i24(b) + _i32(c)).astype(np.int32).view(np.uint32), 3),
    "v_xad_u32": Op(lambda a, b, c: (a ^ b) + c, 3),
    # GFX9's 16-bit integer operations write the whole VGPR, the result zero-extended (no true16 halves; LLVM's
    # GCNSubtarget::zeroesHigh16BitsOfDest): the ISA tables map gfx9's v_mul_lo_u16 and v_lshrrev_b16 here
    "v_sub_u16": Op(lambda a, b: (a - b) & np.uint32(0xFFFF), 2, half_sources=(True, True)),
    "v_mul_lo_u16_gfx9": Op(lambda a, b: (a * b) & np.uint32(0xFFFF), 2, half_sources=(True, True)),
    "v_lshrrev_b16_gfx9": Op(lambda a, b: b >> _shift16(a), 2, half_sources=(True, True)),
}


def _class(a: U32, b: U32) -> np.ndarray:
    """v_cmp_class_f32: is src0 in any class src1's bits name (0 signalling NaN, 1 quiet NaN, 2 -inf,
    3 -normal, 4 -denormal, 5 -0, 6 +0, 7 +denormal, 8 +normal, 9 +inf)."""
    exponent, mantissa, negative = a >> 23 & 0xFF, a & 0x7FFFFF, (a >> 31).astype(bool)
    nan = (exponent == 0xFF) & (mantissa != 0)
    kinds = [nan & (mantissa >> 22 == 0), nan & (mantissa >> 22 == 1),
             negative & (exponent == 0xFF) & (mantissa == 0), negative & (exponent > 0) & (exponent < 0xFF),
             negative & (exponent == 0) & (mantissa != 0), negative & (a == 0x80000000),
             a == 0, ~negative & (exponent == 0) & (mantissa != 0),
             ~negative & (exponent > 0) & (exponent < 0xFF), ~negative & (exponent == 0xFF) & (mantissa == 0)]
    return np.any([kind & (b >> bit & 1).astype(bool) for bit, kind in enumerate(kinds)], axis=0)


def _fcmp(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[U32, U32], np.ndarray]:
    def run(a: U32, b: U32) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(as_f32(a), as_f32(b))
    return run


COMPARES: dict[str, tuple[Callable[[U32, U32], np.ndarray], bool]] = {  # (test, float operands)
    "v_cmp_lt_f32": (_fcmp(np.less), True),
    "v_cmp_gt_f32": (_fcmp(np.greater), True),
    "v_cmp_ge_f32": (_fcmp(np.greater_equal), True),
    "v_cmp_u_f32": (_fcmp(lambda a, b: np.isnan(a) | np.isnan(b)), True),
    "v_cmp_le_i32": (lambda a, b: a.view(np.int32) <= b.view(np.int32), False),
    "v_cmp_eq_u32": (lambda a, b: a == b, False),
    "v_cmpx_eq_u32": (lambda a, b: a == b, False),
    "v_cmp_class_f32": (_class, False),
    "v_cmp_neq_f32": (_fcmp(lambda a, b: ~(a == b)), True),  # true when unordered, unlike an ordered "lg"
    "v_cmp_lt_i32": (lambda a, b: a.view(np.int32) < b.view(np.int32), False),
    "v_cmp_gt_i32": (lambda a, b: a.view(np.int32) > b.view(np.int32), False),
    "v_cmp_le_u32": (lambda a, b: a <= b, False),
    "v_cmp_ne_u32": (lambda a, b: a != b, False),
}

# Compares of 64-bit operands (a VGPR or SGPR pair; an inline constant sign-extended, a literal zero-extended).
COMPARES64: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "v_cmp_gt_i64": lambda a, b: a.view(np.int64) > b.view(np.int64),
    "v_cmp_lt_i64": lambda a, b: a.view(np.int64) < b.view(np.int64),
}

DUAL: dict[str, str] = {"v_dual_fmac_f32": "v_fmac_f32", "v_dual_mul_f32": "v_mul_f32",
                        "v_dual_add_f32": "v_add_f32", "v_dual_sub_f32": "v_sub_f32",
                        "v_dual_mov_b32": "v_mov_b32", "v_dual_add_nc_u32": "v_add_nc_u32",
                        "v_dual_lshlrev_b32": "v_lshlrev_b32", "v_dual_and_b32": "v_and_b32",
                        "v_dual_max_f32": "v_max_f32", "v_dual_max_num_f32": "v_max_num_f32",
                        "v_dual_subrev_f32": "v_subrev_f32"}


def run_vector(wave: Wave, inst: Instruction, f: Fields) -> None:
    if inst.encoding in ("VOP3", "VOP3P") and (f.clamp or (inst.encoding == "VOP3" and f.omod)):
        raise Unsupported(f"{inst.name} at {inst.address:#x} with clamp or an output modifier")
    name = inst.name
    if inst.encoding == "VOPD":
        _dual(wave, inst, f)
    elif name in COMPARES or name in COMPARES64:
        _compare(wave, inst, f)
    elif name in matrix_ops.WMMA:
        matrix_ops.run_wmma(wave, inst, f)
    elif name in matrix_ops.MFMA:
        matrix_ops.run_mfma(wave, inst, f)
    elif name in matrix_ops.ACCVGPR:
        matrix_ops.run_accvgpr(wave, inst, f)
    elif name in CARRY:
        CARRY[name](wave, inst, f)
    elif name in wide_ops.WIDE:
        wide_ops.WIDE[name](wave, inst, f)
    elif name in lanes.VECTOR:
        lanes.VECTOR[name](wave, inst, f)
    elif name == "v_cndmask_b32":
        _cndmask(wave, inst, f)
    elif name == "v_readfirstlane_b32":
        active = np.flatnonzero(wave.exec_mask)
        wave.write_scalar(f.dst, int(wave.vector(f.src[0], f.lit(0))[active[0] if len(active) else 0]))
    elif name == "v_permlanex16_b32":
        _permlanex16(wave, inst, f)
    elif name in MIX:
        _fma_mix(wave, inst, f)
    elif name in DIVISION:
        DIVISION[name](wave, inst, f)
    elif name in ARITH:
        _arith(wave, inst, f, ARITH[name])
    else:
        raise Unsupported(f"{name} at {inst.address:#x} is not implemented")


# -- operands ------------------------------------------------------------------------------------------------

SDWA_WORD_0, SDWA_DWORD = 4, 6  # SDWA selects: BYTE_0..3 = 0..3, WORD_0, WORD_1 = 4, 5, DWORD = 6


def _read(wave: Wave, inst: Instruction, f: Fields, index: int, half: bool, is_float: bool,
          ) -> tuple[U32, np.ndarray]:
    """Source `index` for every lane, modifiers applied, and the lanes whose read was valid (DPP). The
    lanes may be a view of the register (callers compute new arrays from them, never write into them)."""
    valid = wave.all_lanes
    code = f.src[index]
    if VGPR_BASE <= code < AGPR_BASE and inst.dpp is None and not half and not ((f.abs | f.neg) >> index & 1) \
            and not f.sdwa:
        return wave.vgpr[code - VGPR_BASE], valid  # the common case: a plain VGPR
    abs_ = neg = False
    if inst.dpp is not None and half:
        raise Unsupported(f"{inst.name} at {inst.address:#x}: DPP on a 16-bit operand")
    if inst.dpp is not None and index == 0:
        values, valid = _dpp_source(wave, inst.dpp)
        abs_, neg = bool(inst.dpp >> 21 & 1), bool(inst.dpp >> 20 & 1)
    elif inst.dpp is not None and index == 1:
        values = wave.vector(code, f.lit(index))
        abs_, neg = bool(inst.dpp >> 23 & 1), bool(inst.dpp >> 22 & 1)
    else:
        values = wave.vector(code, f.lit(index), half)
        if inst.encoding == "VOP3":
            abs_, neg = bool(f.abs >> index & 1), bool(f.neg >> index & 1)
        if half and f.opsel >> index & 1:  # a true16 .h register, or VOP3's op_sel
            values = values >> 16
        if f.sdwa and f.sdwa[index] < SDWA_DWORD:  # SDWA's byte or word select, zero-extended
            select = f.sdwa[index]
            width = 8 if select < SDWA_WORD_0 else 16
            values = values >> np.uint32(width * (select % 4 if width == 8 else select - SDWA_WORD_0)) \
                & np.uint32((1 << width) - 1)
    if half:
        values = values & np.uint32(0xFFFF)
        if abs_ or neg:
            raise Unsupported(f"{inst.name} at {inst.address:#x}: abs/neg on a 16-bit operand")
    elif abs_ or neg:
        if not is_float:
            raise Unsupported(f"{inst.name} at {inst.address:#x}: abs/neg on an integer operand")
        values = modify_f32(values, abs_, neg)
    return values, valid


def _dpp_source(wave: Wave, control_word: int) -> tuple[U32, np.ndarray]:
    """DPP16's src0: each lane's chosen lane of the VGPR; a lane reading outside its row, or (without
    fetch-inactive) from a lane EXEC disables, reads 0 under bound_ctrl and is otherwise not written."""
    lanes, inside = dpp_lanes(control_word >> 8 & 0x1FF, wave.lanes)
    fetch_inactive, bound_zero = bool(control_word >> 18 & 1), bool(control_word >> 19 & 1)
    values = wave.vgpr[control_word & 0xFF][lanes].copy()
    valid = inside & (wave.exec_mask[lanes] | fetch_inactive)
    if bound_zero:
        values = np.where(valid, values, np.uint32(0)).astype(np.uint32)
        return values, wave.all_lanes
    return values, valid


def _write_mask(wave: Wave, inst: Instruction, valid: np.ndarray) -> np.ndarray:
    if inst.dpp is None and valid is wave.all_lanes:
        return wave.exec_mask
    mask = wave.exec_mask & valid
    if inst.dpp is not None:  # rows and banks (groups of 4 lanes in a row) the DPP masks leave out
        lane = np.arange(wave.lanes)
        row_mask, bank_mask = inst.dpp >> 28 & 0xF, inst.dpp >> 24 & 0xF
        mask &= ((row_mask >> (lane // 16)) & 1).astype(bool) & ((bank_mask >> (lane // 4 % 4)) & 1).astype(bool)
    return mask


def _write(wave: Wave, inst: Instruction, f: Fields, result: U32, mask: np.ndarray, half: bool) -> None:
    reg = f.dst
    if half:
        high = bool(f.opsel >> 3 & 1)
        old = wave.vgpr[reg]
        result = result & np.uint32(0xFFFF)
        result = (old & np.uint32(0xFFFF)) | (result << 16) if high else (old & np.uint32(0xFFFF0000)) | result
    wave.write_vgpr(reg, result.astype(np.uint32, copy=False), mask)  # written at once: no copy needed


# -- operation kinds -----------------------------------------------------------------------------------------

def _arith(wave: Wave, inst: Instruction, f: Fields, op: Op) -> None:
    count = op.sources - op.accumulates  # v_fmac's addend is its destination, in every encoding
    halves = op.half_sources or (False,) * count
    read = [_read(wave, inst, f, i, halves[i] if i < len(halves) else False, op.float_sources)
            for i in range(count)]
    sources = [values for values, _ in read]
    if op.accumulates:
        sources.append(wave.vgpr[f.dst].copy())
    result = op.fn(*sources).astype(np.uint32, copy=False)
    _write(wave, inst, f, result, _write_mask(wave, inst, read[0][1]), op.half_result)


def _compare(wave: Wave, inst: Instruction, f: Fields) -> None:
    if inst.name in COMPARES64:
        if inst.dpp is not None or f.abs or f.neg:
            raise Unsupported(f"{inst.name} at {inst.address:#x} with DPP or modifiers")
        a, b = (_read64(wave, f.src[i], f.lit(i)) for i in range(2))
        lanes, valid = COMPARES64[inst.name](a, b), wave.all_lanes
    else:
        test, is_float = COMPARES[inst.name]
        (a32, valid), (b32, _) = (_read(wave, inst, f, i, False, is_float) for i in range(2))
        lanes = test(a32, b32)
    lanes = lanes & wave.exec_mask & valid
    bits = wave.bits_of(lanes)
    wave.write_mask(EXEC_LO if inst.name.startswith("v_cmpx") else f.sdst if inst.encoding == "VOP3" else VCC_LO,
                    bits)


def _read64(wave: Wave, code: int, literal: int | None) -> np.ndarray:
    """A 64-bit source for every lane, as uint64: a VGPR pair, an SGPR pair, or a constant (inline integers
    sign-extended, the literal zero-extended)."""
    if code >= VGPR_BASE:
        reg = code - VGPR_BASE
        return wave.vgpr[reg].astype(np.uint64) | wave.vgpr[reg + 1].astype(np.uint64) << np.uint64(32)
    return np.full(wave.lanes, wave.scalar64(code, literal), dtype=np.uint64)


def _mad_u64_u32(wave: Wave, inst: Instruction, f: Fields) -> None:
    """{carry, D[63:0]} = S0.u32 * S1.u32 + S2.u64: the 64-bit result in a VGPR pair, the carry out of bit 63
    in the scalar destination's lane mask."""
    a, b = (wave.vector(f.src[i], f.lit(i)).astype(np.uint64) for i in range(2))
    c = _read64(wave, f.src[2], f.lit(2))
    product = a * b  # below 2^64: exact
    total = product + c  # wraps modulo 2^64
    carry = total < c
    exec_ = wave.exec_mask
    wave.write_vgpr(f.dst, (total & np.uint64(0xFFFFFFFF)).astype(np.uint32), exec_)
    wave.write_vgpr(f.dst + 1, (total >> np.uint64(32)).astype(np.uint32), exec_)
    wave.write_mask(f.sdst, wave.bits_of(carry & exec_))


def _sub_co_ci_u32(wave: Wave, inst: Instruction, f: Fields) -> None:
    """D = S0 - S1 - carry-in (the lane's bit of VCC, or of src2 in VOP3); the borrow out goes to VCC (or the
    VOP3 scalar destination)."""
    if inst.dpp is not None:
        raise Unsupported(f"{inst.name} at {inst.address:#x} with DPP")
    a, b = (wave.vector(f.src[i], f.lit(i)).astype(np.int64) for i in range(2))
    vop3 = inst.encoding == "VOP3"
    borrow_in = wave.lane_mask(wave.read_mask(f.src[2] if vop3 else VCC_LO)).astype(np.int64)
    diff = a - b - borrow_in
    exec_ = wave.exec_mask
    wave.write_vgpr(f.dst, (diff & 0xFFFFFFFF).astype(np.uint32), exec_)
    wave.write_mask(f.sdst if vop3 else VCC_LO, wave.bits_of((diff < 0) & exec_))


CARRY = {"v_mad_u64_u32": _mad_u64_u32, "v_sub_co_ci_u32": _sub_co_ci_u32}


def _cndmask(wave: Wave, inst: Instruction, f: Fields) -> None:
    (a, valid), (b, _) = (_read(wave, inst, f, i, False, True) for i in range(2))
    select = wave.read_mask(f.src[2]) if inst.encoding == "VOP3" else wave.read_mask(VCC_LO)
    result = np.where(wave.lane_mask(select), b, a).astype(np.uint32)
    _write(wave, inst, f, result, _write_mask(wave, inst, valid), False)


def _permlanex16(wave: Wave, inst: Instruction, f: Fields) -> None:
    """Each lane reads the lane of the other 16-lane half that src1 (lanes 0-7) and src2 (lanes 8-15) name,
    four bits per lane. op_sel[0] is fetch-inactive, op_sel[1] bound_ctrl."""
    select = wave.scalar(f.src[1], f.lit(1)) | wave.scalar(f.src[2], f.lit(2)) << 32
    lane = np.arange(wave.lanes)
    picks = np.array([select >> 4 * i & 0xF for i in range(16)])
    sources = ((lane & 16) ^ 16) + picks[lane & 15]
    values = wave.vector(f.src[0], f.lit(0))[sources]
    fetch_inactive, bound_zero = bool(f.opsel & 1), bool(f.opsel >> 1 & 1)
    valid = wave.exec_mask[sources] | fetch_inactive
    if bound_zero:
        values, valid = np.where(valid, values, np.uint32(0)).astype(np.uint32), wave.all_lanes
    wave.write_vgpr(f.dst, values, wave.exec_mask & valid)


def _fma_mix(wave: Wave, inst: Instruction, f: Fields) -> None:
    """v_fma_mix*: each source is binary32, or (op_sel_hi set) the binary16 half op_sel picks, widened;
    neg_hi is the absolute-value modifier here. One rounding: to binary32, or to binary16 for mixlo/mixhi."""
    sources = []
    for i in range(3):
        raw = wave.vector(f.src[i], f.lit(i), half=bool(f.opsel_hi >> i & 1))
        if f.opsel_hi >> i & 1:
            value = f16_to_f32(raw >> 16 if f.opsel >> i & 1 else raw)
        else:
            value = as_f32(raw)
        bits = modify_f32(bits_of(value), bool(f.neg_hi >> i & 1), bool(f.neg >> i & 1))
        sources.append(as_f32(bits))
    exact_odd = fma_odd(*sources)
    if inst.name == "v_fma_mix_f32":
        wave.write_vgpr(f.dst, bits_of(exact_odd.astype(np.float32)), wave.exec_mask)
        return
    with np.errstate(all="ignore"):
        half = exact_odd.astype(np.float16).view(np.uint16).astype(np.uint32)
    old = wave.vgpr[f.dst]
    merged = (old & np.uint32(0xFFFF0000)) | half if inst.name == "v_fma_mixlo_f16" else \
        (old & np.uint32(0xFFFF)) | half << 16
    wave.write_vgpr(f.dst, merged.astype(np.uint32), wave.exec_mask)


# -- the division sequence ------------------------------------------------------------------------------------
# From the RDNA3 ISA pseudocode (as tinygrad 0.14.0's rdna3 tables carry it): v_div_scale scales numerator or
# denominator out of ranges where the reciprocal-and-refine steps would lose precision and says so in VCC,
# v_div_fmas undoes the scale, v_div_fixup handles zeros, infinities and NaN and restores the sign.

def _exponent(bits: U32) -> U32:
    return bits >> 23 & np.uint32(0xFF)


def _is_denormal(bits: U32) -> np.ndarray:
    return (_exponent(bits) == 0) & ((bits & np.uint32(0x7FFFFF)) != 0)


def _ldexp(bits: U32, power: int) -> U32:
    with np.errstate(all="ignore"):
        return bits_of(np.ldexp(as_f32(bits), power).astype(np.float32))


def _div_scale(wave: Wave, inst: Instruction, f: Fields) -> None:
    s0, s1, s2 = (_read(wave, inst, f, i, False, True)[0] for i in range(3))
    n1, n2 = as_f32(s1), as_f32(s2)
    with np.errstate(all="ignore"):
        quotient = bits_of((n2 / n1).astype(np.float32))
    gap = _exponent(s2).astype(np.int64) - _exponent(s1).astype(np.int64)
    result, vcc = s0.copy(), np.zeros(wave.lanes, bool)
    undecided = np.ones(wave.lanes, dtype=bool)

    def case(when: np.ndarray, value: U32 | None, flag: bool) -> None:
        nonlocal result
        hit = undecided & when
        if value is not None:
            result = np.where(hit, value, result).astype(np.uint32)
        vcc[hit] = flag
        undecided[hit] = False

    up = _ldexp(s0, 64)
    case((n2 == 0) | (n1 == 0), np.full(wave.lanes, 0x7FC00000, np.uint32), False)
    case(gap >= 96, np.where(as_f32(s0) == n1, up, s0), True)
    case(_is_denormal(s1), up, False)
    # 1/S1 as binary64 is never a binary64 denormal for a binary32 S1: those two branches cannot be taken.
    case(_is_denormal(quotient), np.where(as_f32(s0) == n2, up, s0), True)
    case(_exponent(s2) <= 23, up, False)
    exec_ = wave.exec_mask
    wave.write_vgpr(f.dst, result, exec_)
    wave.write_mask(f.sdst, wave.bits_of(vcc & exec_))


def _div_fmas(wave: Wave, inst: Instruction, f: Fields) -> None:
    """The fused result, scaled back where VCC says v_div_scale scaled one operand by 2^64. tinygrad's text of
    the pseudocode prints the scale as `2.0F ** 32`, which cannot undo a 2^64 scale (quotients that are
    binary32 denormals came out 2^96 too large with it); the model scales by 2^64 when S2 (the quotient
    estimate) has a biased exponent above 127 and by 2^-64 otherwise, and the division test checks the
    whole sequence against correctly rounded quotients, denormal ones included."""
    s0, s1, s2 = (as_f32(_read(wave, inst, f, i, False, True)[0]) for i in range(3))
    fused = fma_odd(s0, s1, s2)
    scaled = wave.lane_mask(wave.read_mask(VCC_LO))
    power = np.where(_exponent(bits_of(s2)) > 127, 2.0**64, 2.0**-64)
    with np.errstate(all="ignore"):
        result = np.where(scaled, fused * power, fused).astype(np.float32)  # a power of two: exact in binary64
    wave.write_vgpr(f.dst, bits_of(result), wave.exec_mask)


def _div_fixup(wave: Wave, inst: Instruction, f: Fields) -> None:
    s0, s1, s2 = (_read(wave, inst, f, i, False, True)[0] for i in range(3))
    n1, n2 = as_f32(s1), as_f32(s2)
    negative = ((s1 ^ s2) >> 31).astype(bool)
    sign = np.where(negative, np.uint32(0x80000000), np.uint32(0))
    magnitude = s0 & np.uint32(0x7FFFFFFF)
    rules = [
        (np.isnan(n2), s2 | np.uint32(0x400000)),
        (np.isnan(n1), s1 | np.uint32(0x400000)),
        ((n1 == 0) & (n2 == 0), np.uint32(0xFFC00000)),
        (np.isinf(n1) & np.isinf(n2), np.uint32(0xFFC00000)),
        ((n1 == 0) | np.isinf(n2), sign | np.uint32(0x7F800000)),
        (np.isinf(n1) | (n2 == 0), sign),
    ]
    decided = np.any([when for when, _ in rules], axis=0)
    # The pseudocode's last two cases return UNDERFLOW_F32 / OVERFLOW_F32, constants it does not define:
    # the model stops there rather than guess.
    extreme = (_exponent(s2).astype(np.int64) - _exponent(s1).astype(np.int64) < -150) | (_exponent(s1) == 255)
    if np.any(extreme & ~decided & wave.exec_mask):
        raise Unsupported(f"v_div_fixup_f32 at {inst.address:#x}: a quotient that under- or overflows")
    result = sign | magnitude
    for when, value in reversed(rules):  # the first rule that holds wins
        result = np.where(when, value, result)
    wave.write_vgpr(f.dst, result.astype(np.uint32), wave.exec_mask)


DIVISION = {"v_div_scale_f32": _div_scale, "v_div_fmas_f32": _div_fmas, "v_div_fixup_f32": _div_fixup}
MIX = ("v_fma_mix_f32", "v_fma_mixlo_f16", "v_fma_mixhi_f16")


def _dual(wave: Wave, inst: Instruction, f: Fields) -> None:
    """Two independent operations; both read their sources before either writes."""
    results = []
    for name, dst, src, lits in ((inst.name, f.dst, f.src, f.lits), (inst.name_y or "", f.dst_y, f.src_y, f.lits_y)):
        if name == "v_dual_cndmask_b32":
            a, b = (wave.vector(code, lit) for code, lit in zip(src, lits, strict=True))
            results.append((dst, np.where(wave.lane_mask(wave.read_mask(VCC_LO)), b, a).astype(np.uint32)))
            continue
        op = ARITH[DUAL[name]]
        sources = [wave.vector(code, lit) for code, lit in zip(src, lits, strict=True)][:op.sources - op.accumulates]
        if op.accumulates:
            sources.append(wave.vgpr[dst].copy())
        results.append((dst, op.fn(*sources).astype(np.uint32)))
    for dst, values in results:
        wave.write_vgpr(dst, values, wave.exec_mask)


# What this module runs (VOPD's operations by their v_dual_ names).
MNEMONICS = frozenset({*ARITH, *COMPARES, *COMPARES64, *CARRY, *wide_ops.WIDE, *lanes.VECTOR, *matrix_ops.WMMA,
                       *matrix_ops.MFMA, *matrix_ops.ACCVGPR, *DIVISION, *MIX, *DUAL,
                       "v_dual_cndmask_b32", "v_cndmask_b32", "v_readfirstlane_b32", "v_permlanex16_b32"})
