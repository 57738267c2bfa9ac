"""Every use of a FlyDSL internal (anything under `flydsl._mlir`, or an underscore attribute) by the
kernels, in one place.  FlyDSL 0.3.4 has no public form for these; each says which public API would
replace it.  A replacement may change the IR, so it must be proven byte-identical on every object it
reaches (build the rows, compare with the golden digests) before it lands.
"""

from __future__ import annotations

from typing import Any

import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import llvm

# Why each is needed:
# - LDS by byte address (lds_load, lds_store): the attention kernels compute LDS addresses as i32
#   byte offsets (swizzled rows, padded pitches) and access them with a stated alignment.  The
#   public route, fx.Pointer arithmetic plus fx.generic_load / fx.generic_store, builds element-pointer
#   arithmetic instead of i32 byte addresses; it has not been tried for byte identity yet.
# - lds_barrier: fx.gpu.barrier passes `address_spaces` through as an MLIR attribute, and FlyDSL has
#   no public constructor for `#gpu.address_space<workgroup>`.  A public fx.gpu.barrier(lds_only=...)
#   flag would replace it.
# - ir_value: the raw ir.Value check lds_load / lds_store use on their operands; families call the
#   public fx.as_ir_value instead (sdpa_cdna switched with all its objects byte-identical).


def ir_value(x: Any) -> ir.Value:
    """`x` as a raw MLIR value (a DSL value's ir_value(), or `x` itself when it already is one)."""
    return x if isinstance(x, ir.Value) else x.ir_value()


def _lds_ptr(addr: Any) -> ir.Value:
    # LDS byte address -> addrspace(3) pointer; alignment is stated on each access instead.
    addr = addr if isinstance(addr, fx.Int32) else fx.Int32(addr)
    return llvm.inttoptr(ir.Type.parse("!llvm.ptr<3>"), ir_value(addr))


def lds_load(words: int, addr: Any, align: int | None = None) -> fx.Vector:
    """`words` dwords (as an i32 vector) from LDS byte address `addr`, `align`-byte aligned
    (default: the load's own size up to 16, which the caller's addressing guarantees)."""
    align = min(4 * words, 16) if align is None else align
    return fx.Vector(llvm.LoadOp(fx.T.vec(words, fx.T.i32), _lds_ptr(addr), alignment=align).result)


def lds_store(value: Any, addr: Any, align: int) -> None:
    """Store `value` at LDS byte address `addr`, `align`-byte aligned."""
    llvm.StoreOp(ir_value(value), _lds_ptr(addr), alignment=align)


def lds_barrier() -> None:
    """Workgroup barrier whose memory fence covers LDS only.

    A plain fx.gpu.barrier() fences every address space, and on RDNA (WGP mode) that waits for every
    outstanding global load (a prefetch of the next row, say) before the barrier.
    """
    lds_space = ir.Attribute.parse("#gpu.address_space<workgroup>")
    fx.gpu.barrier(address_spaces=ir.ArrayAttr.get([lds_space]))
