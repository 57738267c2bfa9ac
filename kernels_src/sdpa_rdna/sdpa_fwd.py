"""Generator of op `sdpa_rdna`: attention forward for RDNA3 (gfx11) and RDNA4 (gfx12) with WMMA.

One LDS buffer per workgroup: each key block is loaded (global -> registers -> LDS) between two
barriers and then consumed; see sdpa_core.py for the algorithm and SOURCE.md for the contract.
"""

from __future__ import annotations

from collections.abc import Callable

from common.arch import target_arch
from sdpa_rdna.sdpa_core import build, trace_args
from sdpa_rdna.spec import OP_ARCHES, check_row_for, make_plan

OP = "sdpa_rdna"
SYMBOL = "sdpa_rdna_fwd_0"


def target_generation(op: str) -> str:
    """gfx11 or gfx12 for the arch being compiled for (common/arch.py)."""
    arch = target_arch()
    for gen in OP_ARCHES[op]:
        if arch.startswith(gen):
            return gen
    raise ValueError(f"op {op} targets {list(OP_ARCHES[op])} (RDNA WMMA); FlyDSL arch is {arch!r}")


def launcher_and_args(knobs: dict) -> tuple[Callable, tuple]:
    """A @flyc.jit launcher and CPU trace args; every size, stride and the scale are kernel arguments."""
    check_row_for(OP, knobs)
    plan = make_plan(OP, target_generation(OP), knobs)
    return build(plan, SYMBOL), trace_args(plan)
