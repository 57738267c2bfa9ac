"""Knob contract of the `rmsnorm_bwd` op (RMSNorm backward: dx and a deterministic dgamma).

Pure Python on purpose: the farm imports this at expansion time, before any GPU
toolchain is loaded, so nothing here may import torch or flydsl.  The plan
functions live here too so the kernel builder and the docs never disagree.
"""

from __future__ import annotations

from common.knobs import check_choice, check_int, check_keys
from common.norm import MAX_N, MAX_THREADS, NORM_FORMS, THREAD_QUANTUM, check_width, vec_elems

__all__ = ["DTYPE_FORMS", "KNOBS", "N_MAX_TIERS", "PREFETCH_MAX_SLOTS", "REDUCE_COLS", "REDUCE_GROUPS",
           "REDUCE_UNROLL", "check_row", "partial_plan", "vec_elems"]

KNOBS: tuple[str, ...] = ("dtype", "n", "n_max")
# dtype knob -> (x/dy/dx element type, gamma/dgamma element type): the forward op's forms
# (common/norm.py), so the two ops always offer the same dtypes.
DTYPE_FORMS = NORM_FORMS
# Generic tiers (N at run time): the bound sets how many dgamma columns each lane keeps in
# registers, so every bound is its own object.
N_MAX_TIERS: tuple[int, ...] = (1024, 8192, 16384)

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
    check_keys("rmsnorm_bwd", knobs, KNOBS)
    dtype, n, n_max = knobs["dtype"], knobs["n"], knobs["n_max"]
    check_choice("dtype", dtype, sorted(DTYPE_FORMS))
    check_int("n", n, f"0 (generic tier) or a baked width, a multiple of the vector width, up to {MAX_N}")
    check_int("n_max", n_max, f"0 with a baked n, or one of {list(N_MAX_TIERS)} with n=0")
    if n < 0:
        raise ValueError(
            f"knob n={n} is negative; accepted: 0 (generic tier, N at run time) or a baked width "
            f"> 0, a multiple of the vector width, up to {MAX_N}"
        )
    if n == 0:
        if n_max not in N_MAX_TIERS:
            raise ValueError(f"knob n_max={n_max} is not a generic tier; with n=0 accepted n_max: {list(N_MAX_TIERS)}")
        return
    if n_max != 0:
        raise ValueError(f"knob n_max={n_max} must be 0 for a baked width (n={n}); n_max bounds only the n=0 tier")
    check_width(n, dtype, f"n=0 with n_max in {list(N_MAX_TIERS)}")
