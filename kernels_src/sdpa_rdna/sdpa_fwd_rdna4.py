"""Generator of op `sdpa_rdna4`: a second attention-forward pipeline for RDNA4 (gfx12) only.

8 waves per workgroup (128 queries), K/V double-buffered in LDS: while block j is consumed from
one LDS stage, block j+1 is fetched into registers and written to the other stage afterwards,
so each key block costs one barrier.  Q stays in registers for every head dim (RDNA4's WMMA
operands hold 8 elements per lane, half of RDNA3's).  See sdpa_core.py and SOURCE.md.
"""

from __future__ import annotations

from collections.abc import Callable

from sdpa_rdna.sdpa_core import build, trace_args
from sdpa_rdna.sdpa_fwd import target_generation
from sdpa_rdna.spec import check_row_for, make_plan

OP = "sdpa_rdna4"
SYMBOL = "sdpa_rdna4_fwd_0"


def launcher_and_args(knobs: dict) -> tuple[Callable, tuple]:
    """A @flyc.jit launcher and CPU trace args; every size, stride and the scale are kernel arguments."""
    check_row_for(OP, knobs)
    plan = make_plan(OP, target_generation(OP), knobs)
    return build(plan, SYMBOL), trace_args(plan)
