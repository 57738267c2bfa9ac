"""Every use of a FlyDSL internal (anything under `flydsl._mlir`, or an underscore attribute) by the
kernels, in one place.  FlyDSL 0.3.4 has no public form for these; each says which public API would
replace it.  Changing any of them changes the IR, so a replacement must be proven byte-identical on
every object it reaches (build the rows, compare with the golden digests) before it lands.
"""

from __future__ import annotations

from typing import Any

import flydsl.expr as fx
from flydsl._mlir import ir
from flydsl._mlir.dialects import llvm

# Why each is needed:
# - LDS by byte address (lds_load, lds_store): the attention kernels compute LDS addresses as i32
#   byte offsets (swizzled rows, padded pitches) and access them with a stated alignment.  The
#   public route, fx.Pointer arithmetic plus fx.generic_load / fx.generic_store, takes an element
#   pointer and emits different address arithmetic, hence different code.
# - lds_barrier: fx.gpu.barrier passes `address_spaces` through as an MLIR attribute, and FlyDSL has
#   no public constructor for `#gpu.address_space<workgroup>`.  A public fx.gpu.barrier(lds_only=...)
#   flag would replace it.
# - allocation_address: the i32 LDS address of a raw-bytes SharedAllocator allocation, through the
#   storage's underlying `_ptr`.  The public path, fx.Int32(fx.ptrtoint(storage.peek().ptr)), is what
#   sdpa_rdna uses; in sdpa_cdna it gave byte-identical objects for the 6 rows tried (gfx90a, gfx942,
#   gfx950, both schedules) but is not adopted until all of sdpa_cdna's rows are rebuilt and compared.
# - ir_value / the i32-vector type helpers: raw ir.Value checks for values that arrive from MLIR
#   builders (fx.as_ir_value is the public converter).


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


def allocation_address(storage: Any) -> fx.Int32:
    """The LDS byte address (i32) of a SharedAllocator().allocate(nbytes) storage."""
    return fx.Int32(llvm.ptrtoint(fx.T.i32, fx.to_llvm_ptr(storage._ptr)))
