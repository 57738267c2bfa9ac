"""Element types as the kernels store them, and how far an emulated output may be from the reference.

bf16 has no numpy type: values travel as their 16-bit patterns, rounded from binary32 to nearest even.
The reference is computed in binary64 from the same (already rounded) inputs the kernel reads.

The error of one element is |out - ref| / max(|ref|, rms of ref's row): relative to the value, but never to
less than the row's typical size, so a value that cancels to near zero is judged at the row's scale. The
tolerance per output type is a few units in the last place of that type (the kernels compute in binary32
and round once on the store): bf16 2^-6, f16 2^-9, f32 2^-16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOLERANCE = {"bf16": 2.0**-6, "f16": 2.0**-9, "f32": 2.0**-16}
BYTES = {"bf16": 2, "f16": 2, "f32": 4}


@dataclass(frozen=True)
class Form:
    """A row's element types: x, dy, dx and y in `data`; gamma (and dgamma) in `gamma`."""

    data: str
    gamma: str

    @classmethod
    def of(cls, dtype_knob: str) -> Form:
        data, _, rest = dtype_knob.partition("_")
        if data not in TOLERANCE or rest not in ("", "f32gamma"):
            raise ValueError(f"dtype {dtype_knob!r} is not an RMSNorm element form the model knows")
        return cls(data, "f32" if rest else data)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """binary32/64 values stored as `dtype` (bf16: uint16 patterns, rounded to nearest even)."""
    if dtype == "f32":
        return values.astype(np.float32)
    if dtype == "f16":
        return values.astype(np.float16)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + (bits >> 16 & 1)) >> 16).astype(np.uint16)


def decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements (any array of the right bytes) as binary64 values."""
    raw = np.ascontiguousarray(raw).view(np.uint8)
    if dtype == "f32":
        return raw.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return raw.view(np.float16).astype(np.float64)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def errors(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Each element's error (see the module's description); rows are the last axis. NaN counts as huge."""
    ref2 = np.atleast_2d(ref)
    scale = np.sqrt(np.mean(ref2 * ref2, axis=-1, keepdims=True))
    err = np.abs(np.atleast_2d(out) - ref2) / np.maximum(np.abs(ref2), np.maximum(scale, 1e-30))
    return np.where(np.isfinite(err), err, np.inf)
