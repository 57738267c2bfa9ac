"""Expected binary32 values for the ISA semantics tests, from exact arithmetic: a float's bits and its exact
value, and the correctly rounded (nearest, ties to even) binary32 of an exact rational. Never numpy's float32
and never the model: the tests compare the model against these."""

from __future__ import annotations

import struct
from fractions import Fraction


def bits(x: float) -> int:
    """The binary32 bit pattern of x (rounded to binary32 first by struct)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def value(b: int) -> Fraction:
    """The exact value of the binary32 bit pattern b."""
    return Fraction(struct.unpack("<f", struct.pack("<I", b))[0])


def round_f32(q: Fraction) -> int:
    """The binary32 nearest the exact value q, ties to even (finite, normal or subnormal results)."""
    if q == 0:
        return 0
    sign, q = (0x80000000, -q) if q < 0 else (0, q)
    exponent = max(q.numerator.bit_length() - q.denominator.bit_length() + 1, -125)
    while q >= Fraction(2) ** exponent:
        exponent += 1
    while exponent > -125 and q < Fraction(2) ** (exponent - 1):
        exponent -= 1
    step = Fraction(2) ** (exponent - 24)  # the spacing of binary32 values below 2^exponent
    return sign | bits(float(round(q / step) * step))  # Python rounds a Fraction's half to even
