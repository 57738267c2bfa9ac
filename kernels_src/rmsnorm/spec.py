"""Knob contract of the `rmsnorm` op (forward RMSNorm).

Pure Python on purpose: the farm imports this at expansion time, before any
GPU toolchain is loaded, so nothing here may import torch or flydsl.  The
constants the kernel builder needs too live here so the two never disagree.
"""

from __future__ import annotations

# dtype knob -> (x/y element type, gamma element type).  Accumulation is f32.
DTYPE_FORMS: dict[str, tuple[str, str]] = {
    "bf16": ("bf16", "bf16"),
    "f16": ("f16", "f16"),
    "f32": ("f32", "f32"),
    "bf16_f32gamma": ("bf16", "f32"),
    "f16_f32gamma": ("f16", "f32"),
}
ELEM_BYTES: dict[str, int] = {"bf16": 2, "f16": 2, "f32": 4}

PHASES: tuple[str, ...] = ("infer", "train")

# Baked widths the farm expands today; any other multiple of the vector width
# up to MAX_N is accepted as well.
BAKED_WIDTHS: tuple[int, ...] = (2560, 3072, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384)
MAX_N = 16384

# One global access moves 16 bytes (dwordx4).
VEC_BYTES = 16

# Workgroup sizes are multiples of 64 so they are whole waves on both wave64
# (CDNA) and wave32 (RDNA) targets.
THREAD_QUANTUM = 64
MAX_THREADS = 512
# Generic tier (N known only at run time): fixed workgroup size.
GENERIC_THREADS = 256
# A baked plan keeps at least this many threads when an exact split allows it.
MIN_EXACT_THREADS = 256


def vec_elems(dtype: str) -> int:
    """Elements of x per 16-byte access for a dtype knob."""
    return VEC_BYTES // ELEM_BYTES[DTYPE_FORMS[dtype][0]]


def block_plan(n: int, vec: int, block: int | None) -> tuple[int, int]:
    """(threads, vectors per thread): the automatic plan, or `block` threads when a row tunes it
    (then the last round may be partial; the row-bounded buffer descriptor drops the tail)."""
    if not n:
        return (block or GENERIC_THREADS), 0
    if block is None:
        return baked_plan(n, vec)
    return block, -(-(n // vec) // block)


def baked_plan(n: int, vec: int) -> tuple[int, int]:
    """(threads, vectors per thread) for a baked width n with `vec` elements per access.

    Prefer an exact split (every lane owns the same number of whole vectors, so
    no lane ever touches memory past the row); otherwise spread the vectors
    over as few rounds as MAX_THREADS allows and let the bounds-checked buffer
    descriptor drop the tail.
    """
    nvec = n // vec
    rounds = -(-nvec // MAX_THREADS)
    threads = -(-nvec // rounds)
    threads = -(-threads // THREAD_QUANTUM) * THREAD_QUANTUM
    for t in range(MAX_THREADS, THREAD_QUANTUM - 1, -THREAD_QUANTUM):
        if nvec % t == 0:
            if t >= min(MIN_EXACT_THREADS, threads):
                return t, nvec // t
            break
    return threads, rounds


def check_row(knobs: dict) -> None:
    """Raise ValueError if the kernel cannot serve this knob row."""
    if not isinstance(knobs, dict):
        raise ValueError(f"knobs must be a dict with keys dtype, phase, n; got {type(knobs).__name__}")
    missing = [k for k in ("dtype", "phase", "n") if k not in knobs]
    if missing:
        raise ValueError(f"knobs missing {missing}; rmsnorm needs dtype, phase and n")
    extra = sorted(set(knobs) - {"dtype", "phase", "n", "block"})
    if extra:
        raise ValueError(f"unknown knobs {extra}; rmsnorm accepts dtype, phase, n and optionally block")
    block = knobs.get("block")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block % THREAD_QUANTUM
                              or not THREAD_QUANTUM <= block <= MAX_THREADS):
        raise ValueError(f"knob block={block!r} (threads per workgroup) must be a multiple of {THREAD_QUANTUM} "
                         f"from {THREAD_QUANTUM} to {MAX_THREADS}")

    dtype, phase, n = knobs["dtype"], knobs["phase"], knobs["n"]
    if dtype not in DTYPE_FORMS:
        raise ValueError(f"knob dtype={dtype!r} not supported; accepted: {sorted(DTYPE_FORMS)}")
    if phase not in PHASES:
        raise ValueError(f"knob phase={phase!r} not supported; accepted: {list(PHASES)}")
    accepted_n = f"0 (generic, N at run time) or a baked width, a multiple of the vector width, up to {MAX_N}"
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"knob n={n!r} must be an int; accepted: {accepted_n}")
    if n < 0:
        raise ValueError(f"knob n={n} is negative; accepted: {accepted_n}")
    if n == 0:
        return
    if n > MAX_N:
        raise ValueError(f"knob n={n} exceeds the largest baked width {MAX_N}; use n=0 (generic) instead")
    x_type = DTYPE_FORMS[dtype][0]
    if ELEM_BYTES[x_type] != 2:
        raise ValueError(
            f"knob n={n} (baked width) is only offered for 16-bit x forms "
            f"{sorted(d for d, f in DTYPE_FORMS.items() if ELEM_BYTES[f[0]] == 2)}; "
            f"dtype={dtype!r} accepts only n=0 (generic)"
        )
    vec = vec_elems(dtype)
    if n % vec:
        raise ValueError(
            f"knob n={n} is not a multiple of the vector width {vec} elements "
            f"({VEC_BYTES}-byte accesses) for dtype={dtype!r}; use a multiple of {vec} or n=0"
        )
