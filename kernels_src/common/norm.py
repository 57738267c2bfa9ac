"""What the two RMSNorm ops (rmsnorm, rmsnorm_bwd) share: dtype forms, widths, workgroup quantum, and
the check of a baked width.  Pure Python: both spec modules import it at expansion time."""

from __future__ import annotations

from common.dtypes import ELEM_BYTES, VEC_BYTES
from common.dtypes import vec_elems as elem_vec

# dtype knob -> (x/y element type, gamma element type); accumulation is f32.
NORM_FORMS: dict[str, tuple[str, str]] = {
    "bf16": ("bf16", "bf16"),
    "f16": ("f16", "f16"),
    "f32": ("f32", "f32"),
    "bf16_f32gamma": ("bf16", "f32"),
    "f16_f32gamma": ("f16", "f32"),
}
# Largest baked width: a row of 16384 16-bit elements (32 KiB) one workgroup streams at full width.
MAX_N = 16384
# Workgroup sizes are multiples of 64 so they are whole waves on both wave64 (CDNA) and wave32 (RDNA).
THREAD_QUANTUM = 64
MAX_THREADS = 512


def vec_elems(dtype: str) -> int:
    """Elements of x per 16-byte access for a dtype knob."""
    return elem_vec(NORM_FORMS[dtype][0])


def sixteen_bit_forms() -> list[str]:
    """The dtype knobs whose x type is 16-bit (the only ones with baked widths), sorted."""
    return sorted(d for d, f in NORM_FORMS.items() if ELEM_BYTES[f[0]] == 2)


def check_width(n: int, dtype: str, generic: str) -> None:
    """A baked width n > 0: at most MAX_N, a 16-bit x form, whole 16-byte vectors.
    `generic` names the generic-tier alternative (e.g. 'n=0')."""
    if n > MAX_N:
        raise ValueError(f"knob n={n} exceeds the largest baked width {MAX_N}; use {generic} instead")
    if ELEM_BYTES[NORM_FORMS[dtype][0]] != 2:
        raise ValueError(f"knob n={n} (baked width) is only offered for 16-bit x forms "
                         f"{sixteen_bit_forms()}; dtype={dtype!r} accepts only {generic}")
    vec = vec_elems(dtype)
    if n % vec:
        raise ValueError(f"knob n={n} is not a multiple of the vector width {vec} elements "
                         f"({VEC_BYTES}-byte accesses) for dtype={dtype!r}; use a multiple of {vec} or n=0")
