"""The GPU architecture a kernel is being compiled for, resolved one way for every family."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.runtime.device import get_rocm_arch, get_warp_size


def target_arch() -> str:
    """The concrete arch (lower case, e.g. 'gfx942', 'gfx1100') a kernel plans for.

    Read from FLYDSL_GPU_ARCH through FlyDSL's own `get_rocm_arch()` (hardware detection when it is
    unset), not from ARCH: ARCH names the object's target and may be a generic one
    (gfx11-generic), which no prefix test on a chip name matches, while FLYDSL_GPU_ARCH is always
    a concrete member and is what FlyDSL's own Python-side checks (buffer descriptors, wave size)
    see.  The farm's compile process sets both (farm/worker/isolate.py).  A kernel's choices
    (wave size, MMA forms) must agree with FlyDSL's, so they read the same variable.
    """
    return get_rocm_arch().lower()


def wave_size() -> int:
    """Lanes per wave of the target arch (64 on CDNA, 32 on RDNA)."""
    return get_warp_size(target_arch())


def check_wave(planned: int, what: str) -> None:
    """Refuse, at trace time, a kernel planned for `planned` lanes when the compile target's waves differ.

    Called from kernel bodies: num_warp_threads() is a Python int, so this emits no IR."""
    lanes = fx.gpu.num_warp_threads()
    if lanes != planned:
        raise ValueError(f"{what} is planned for {planned}-lane waves; the compile target has {lanes} lanes")
