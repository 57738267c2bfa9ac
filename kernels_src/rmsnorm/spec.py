"""Knob contract of the `rmsnorm` op (forward RMSNorm).

Pure Python on purpose: the farm imports this at expansion time, before any
GPU toolchain is loaded, so nothing here may import torch or flydsl.  The
constants the kernel builder needs too live here so the two never disagree.
"""

from __future__ import annotations

from common.knobs import check_choice, check_int, check_keys
from common.norm import MAX_N, MAX_THREADS, NORM_FORMS, THREAD_QUANTUM, check_width, vec_elems

__all__ = ["DTYPE_FORMS", "block_plan", "check_row", "vec_elems"]

# dtype knob -> (x/y element type, gamma element type), shared with rmsnorm_bwd (common/norm.py).
DTYPE_FORMS = NORM_FORMS
PHASES: tuple[str, ...] = ("infer", "train")

# Generic tier (N known only at run time): fixed workgroup size.
GENERIC_THREADS = 256
# A baked plan keeps at least this many threads when an exact split allows it.
MIN_EXACT_THREADS = 256


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
    check_keys("rmsnorm", knobs, ("dtype", "phase", "n"), ("block",))
    block = knobs.get("block")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block % THREAD_QUANTUM
                              or not THREAD_QUANTUM <= block <= MAX_THREADS):
        raise ValueError(f"knob block={block!r} (threads per workgroup) must be a multiple of {THREAD_QUANTUM} "
                         f"from {THREAD_QUANTUM} to {MAX_THREADS}")
    dtype, phase, n = knobs["dtype"], knobs["phase"], knobs["n"]
    check_choice("dtype", dtype, sorted(DTYPE_FORMS))
    check_choice("phase", phase, PHASES)
    accepted_n = f"0 (generic, N at run time) or a baked width, a multiple of the vector width, up to {MAX_N}"
    check_int("n", n, accepted_n)
    if n < 0:
        raise ValueError(f"knob n={n} is negative; accepted: {accepted_n}")
    if n:
        check_width(n, dtype, "n=0 (generic)")
