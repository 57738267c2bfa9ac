"""Float arithmetic the way the kernels' float mode asks for it: round to nearest even, denormals kept
(the RMSNorm descriptors set FLOAT_ROUND_MODE 0 and FLOAT_DENORM_MODE 3 for both 32-bit and 16/64-bit).
numpy's float32/float16 arithmetic is IEEE 754 binary32/binary16 with exactly that mode; the one operation
numpy has no single-rounding form of is fused multiply-add, done here by rounding to odd.

Values travel as uint32 lane arrays (the register file's bits); these helpers view them as floats.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U32 = npt.NDArray[np.uint32]
F32 = npt.NDArray[np.float32]

SIGN32 = np.uint32(0x80000000)


def as_f32(bits: U32) -> F32:
    return bits.view(np.float32)


def bits_of(values: F32) -> U32:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def f16_to_f32(half_bits: U32) -> F32:
    """The low 16 bits of each lane as binary16, widened exactly to binary32."""
    return (half_bits & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)


def f32_to_f16(values: F32) -> U32:
    """binary32 rounded to nearest even binary16 (numpy's conversion rounds correctly), as 16-bit patterns."""
    with np.errstate(all="ignore"):
        return values.astype(np.float16).view(np.uint16).astype(np.uint32)


def fma_odd(a: F32, b: F32, c: F32) -> npt.NDArray[np.float64]:
    """a*b+c in binary64 rounded to odd: converting that to binary32 or binary16 rounds the exact fused
    result once, correctly. The product of two binary32 values is exact in binary64, and a sum rounded to
    odd with at least two more bits than the final format rounds as the exact sum would (Boldo and
    Melquiond, "Emulation of FMA and correctly rounded sums", IEEE Trans. Computers 2008)."""
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        # TwoSum: the exact rounding error of s (Knuth), zero when s is exact.
        bv = s - p
        err = (p - (s - bv)) + (c64 - bv)
        even = (s.view(np.int64) & 1) == 0
        fix = np.isfinite(s) & np.isfinite(err) & (err != 0) & even
        toward = np.where(err > 0, np.inf, -np.inf)
        s = np.where(fix, np.nextafter(s, toward), s)
        return s


def modify_f32(bits: U32, abs_: bool, neg: bool) -> U32:
    """VOP3's input modifiers on a binary32 operand: sign bit cleared, then flipped (bits only, as the
    hardware does: a NaN stays a NaN)."""
    if abs_:
        bits = bits & ~SIGN32
    if neg:
        bits = bits ^ SIGN32
    return bits

