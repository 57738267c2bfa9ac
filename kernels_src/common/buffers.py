"""Buffer resource descriptors: every global access in these kernels goes through one."""

from __future__ import annotations

from typing import Any

import flydsl.expr as fx
from flydsl.expr import rocdl


def buffer_rsrc(ptr: Any, nbytes: Any) -> Any:
    """A descriptor over `nbytes` bytes from `ptr`: loads past the bound read 0, stores past it are dropped.

    `nbytes` may be a Python int, an fx.Int32 or an fx.Int64 (FlyDSL wants the bound as i64; an Int64
    passes through unchanged, so no extra op is emitted), or None for FlyDSL's unchecked maximum.
    """
    bound = None if nbytes is None else fx.Int64(nbytes)
    return rocdl.get_buffer_rsrc(rocdl.make_buffer_ptr(ptr, num_records_bytes=bound))
