"""Knob contract of the `rmsnorm_bwd` op (RMSNorm backward: dx and a deterministic dgamma).

Pure Python on purpose: the farm imports this at expansion time, before any GPU
toolchain is loaded, so nothing here may import torch or flydsl.  The plan
functions live here too so the kernel builder and the docs never disagree.
"""

from __future__ import annotations

__all__ = [
    "BAKED_WIDTHS",
    "DTYPE_FORMS",
    "ELEM_BYTES",
    "KNOBS",
    "MAX_N",
    "N_MAX_TIERS",
    "PREFETCH_MAX_SLOTS",
    "REDUCE_COLS",
    "REDUCE_GROUPS",
    "REDUCE_UNROLL",
    "VEC_BYTES",
    "check_row",
    "partial_plan",
    "vec_elems",
]

KNOBS: tuple[str, ...] = ("dtype", "n", "n_max")

# dtype knob -> (x/dy/dx element type, gamma/dgamma element type); accumulation is f32.  The same
# forms as the forward op, kept here rather than imported from rmsnorm.spec: the farm digests every
# source file a compile reads, so importing it would rebuild all backward objects on any edit of
# the forward's spec.
DTYPE_FORMS: dict[str, tuple[str, str]] = {
    "bf16": ("bf16", "bf16"),
    "f16": ("f16", "f16"),
    "f32": ("f32", "f32"),
    "bf16_f32gamma": ("bf16", "f32"),
    "f16_f32gamma": ("f16", "f32"),
}
ELEM_BYTES: dict[str, int] = {"bf16": 2, "f16": 2, "f32": 4}
# One global access moves 16 bytes (dwordx4).
VEC_BYTES = 16

# Baked widths the farm expands today; any other multiple of the vector width
# up to MAX_N is accepted as well.
BAKED_WIDTHS: tuple[int, ...] = (1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384)
MAX_N = 16384
# Generic tiers (N at run time): the bound sets how many dgamma columns each lane keeps in
# registers, so every bound is its own object.
N_MAX_TIERS: tuple[int, ...] = (1024, 8192, 16384)

# Partial kernel: workgroup sizes are multiples of 64 (whole waves on wave64 and wave32).
THREAD_QUANTUM = 64
MAX_THREADS = 512

# The partial kernel prefetches the next row's x and dy (raw, 2 x 4 VGPRs per slot) only up to
# this many slots per lane: beyond it (the f32 n_max=16384 tier) it would not fit in 256 VGPRs.
PREFETCH_MAX_SLOTS = 4

# Reduce kernel (256 threads): a workgroup owns REDUCE_COLS columns (128-byte rows of the
# workspace); REDUCE_GROUPS lanes per column split the programs (group g sums p = g, g + G, ...),
# each lane keeping REDUCE_UNROLL loads in flight.  A thread waits on num_programs / (G * U)
# round trips, so the reduce stays short next to the partial kernel even for small N.
REDUCE_COLS = 32
REDUCE_GROUPS = 8
REDUCE_UNROLL = 8


def vec_elems(dtype: str) -> int:
    """Elements of x per 16-byte access for a dtype knob."""
    return VEC_BYTES // ELEM_BYTES[DTYPE_FORMS[dtype][0]]


def partial_plan(n_cols: int, vec: int) -> tuple[int, int]:
    """(threads, slots per lane) for the partial kernel over at most `n_cols` columns.

    A slot is one `vec`-element vector; lane t owns slots t, t + threads, ... and keeps
    their gamma and dgamma partials in registers for all its rows.  Prefer an exact split
    (no idle lanes) with as few slots as possible; otherwise spread over the fewest slots
    MAX_THREADS allows and let the buffer bound drop the tail.
    """
    nvec = -(-n_cols // vec)
    slots = -(-nvec // MAX_THREADS)
    for s in range(slots, 2 * slots + 1):
        if nvec % s == 0 and (nvec // s) % THREAD_QUANTUM == 0:
            return nvec // s, s
    threads = -(-nvec // slots)
    return -(-threads // THREAD_QUANTUM) * THREAD_QUANTUM, slots


def check_row(knobs: dict) -> None:
    """Raise ValueError if the kernel cannot serve this knob row."""
    if not isinstance(knobs, dict):
        raise ValueError(f"knobs must be a dict with keys {list(KNOBS)}; got {type(knobs).__name__}")
    missing = [k for k in KNOBS if k not in knobs]
    if missing:
        raise ValueError(f"knobs missing {missing}; rmsnorm_bwd needs {list(KNOBS)}")
    extra = sorted(set(knobs) - set(KNOBS))
    if extra:
        raise ValueError(f"unknown knobs {extra}; rmsnorm_bwd accepts only {list(KNOBS)}")

    dtype, n, n_max = knobs["dtype"], knobs["n"], knobs["n_max"]
    if dtype not in DTYPE_FORMS:
        raise ValueError(f"knob dtype={dtype!r} not supported; accepted: {sorted(DTYPE_FORMS)}")
    accepted = {
        "n": f"0 (generic tier) or a baked width, a multiple of the vector width, up to {MAX_N}",
        "n_max": f"0 with a baked n, or one of {list(N_MAX_TIERS)} with n=0",
    }
    for name, value in (("n", n), ("n_max", n_max)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"knob {name}={value!r} must be an int; accepted: {accepted[name]}")
    sixteen_bit = sorted(d for d, f in DTYPE_FORMS.items() if ELEM_BYTES[f[0]] == 2)

    if n < 0:
        raise ValueError(
            f"knob n={n} is negative; accepted: 0 (generic tier, N at run time) or a baked width "
            f"> 0, a multiple of the vector width, up to {MAX_N}"
        )
    if n == 0:
        if n_max not in N_MAX_TIERS:
            raise ValueError(f"knob n_max={n_max} is not a generic tier; with n=0 accepted n_max: {list(N_MAX_TIERS)}")
        return

    # Baked width.
    if n_max != 0:
        raise ValueError(f"knob n_max={n_max} must be 0 for a baked width (n={n}); n_max bounds only the n=0 tier")
    if n > MAX_N:
        raise ValueError(f"knob n={n} exceeds the largest baked width {MAX_N}; use n=0 with an n_max tier instead")
    if ELEM_BYTES[DTYPE_FORMS[dtype][0]] != 2:
        raise ValueError(
            f"knob n={n} (baked width) is only offered for 16-bit x forms {sixteen_bit}; "
            f"dtype={dtype!r} accepts only n=0 with n_max in {list(N_MAX_TIERS)}"
        )
    vec = vec_elems(dtype)
    if n % vec:
        raise ValueError(
            f"knob n={n} is not a multiple of the vector width {vec} elements "
            f"({VEC_BYTES}-byte accesses) for dtype={dtype!r}; use a multiple of {vec} or n=0"
        )
