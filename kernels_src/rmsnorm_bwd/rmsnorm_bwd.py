"""RMSNorm backward, written in FlyDSL: dx per row and a deterministic dgamma.

    x_hat = x * inv_rms[r],  wdy = gamma * dy
    dx[r, :] = inv_rms[r] * (wdy - x_hat * mean(x_hat * wdy))
    dgamma   = sum over rows of dy * x_hat

Two kernels in one object, both launched by the same @flyc.jit launcher:

- `rmsnorm_bwd_partial`: `num_programs` workgroups (a run-time argument); program p
  handles rows p, p + num_programs, ... .  Each lane owns fixed column slots for the whole
  launch, so gamma and the program's dgamma partial stay in registers across its rows; at
  the end every program writes its f32 partial row to `workspace[p, :N]`.
- `rmsnorm_bwd_reduce`: sums `workspace` over programs into dgamma in a fixed order
  (no atomics), so dx and dgamma are bitwise reproducible run to run (for the same
  object, M, N and num_programs; the partition into programs sets the summation order).

Every global access goes through a buffer descriptor whose byte bound is the row (or
the workspace), so tail lanes load zeros and their stores are dropped without masks.
Kernel arguments: see SOURCE.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from common.arch import check_wave, wave_size
from common.buffers import buffer_rsrc
from common.dtypes import ELEM_BYTES, VEC_BYTES
from common.flydsl_compat import lds_barrier
from common.fx_types import FX_TYPES, NULL_STREAM
from common.norm_trace import TRACE_M, trace_rows
from common.trace import put, tree
from flydsl.expr import rocdl
from rmsnorm_bwd.spec import (
    DTYPE_FORMS,
    PREFETCH_MAX_SLOTS,
    REDUCE_COLS,
    REDUCE_GROUPS,
    REDUCE_UNROLL,
    check_row,
    partial_plan,
    vec_elems,
)

# Programs of the trace: not part of the object (num_programs is a kernel argument).
_TRACE_PROGRAMS = 2
_REDUCE_THREADS = REDUCE_COLS * REDUCE_GROUPS


def _bits_type(nbytes: int) -> tuple[Any, type]:
    return (fx.T.i16, fx.Int16) if nbytes == 2 else (fx.T.i32, fx.Int32)


def _load_elem(rsrc: Any, offset: Any, t: type, nbytes: int) -> fx.Float32:
    """One element at byte `offset`, as f32."""
    ir_ty, bits_t = _bits_type(nbytes)
    raw = rocdl.raw_ptr_buffer_load(ir_ty, rsrc, offset, 0)
    return bits_t(raw).bitcast(t).to(fx.Float32)


def _store_elem(rsrc: Any, offset: Any, value: fx.Float32, t: type, nbytes: int) -> None:
    """Round `value` once to `t` and store it at byte `offset`."""
    bits = value.to(t).bitcast(_bits_type(nbytes)[1])
    rocdl.raw_ptr_buffer_store(bits.ir_value(), rsrc, fx.Int32(offset).ir_value(), fx.Int32(0).ir_value())


def _fence_schedule() -> None:
    # Keep the scheduler from hoisting every slot's f32->16-bit rounding together: without a
    # bf16 convert instruction (gfx90a/gfx942) each rounding holds a NaN-test lane mask in an
    # SGPR pair (wave64), and 32 of them at once overflowed the SGPR file.
    rocdl.sched_barrier(0)


def _load_raw(rsrc: Any, slot: Any) -> fx.Vector:
    """The 16 bytes of slot `slot` as raw i32x4 (converted only when used)."""
    return fx.Vector(rocdl.raw_ptr_buffer_load(fx.T.vec(4, fx.T.i32), rsrc, slot * VEC_BYTES, 0))


def _load_slot(rsrc: Any, slot: Any, vec: int, t: type, nbytes: int, wide: bool) -> fx.Vector:
    """The `vec` elements of slot `slot` (elements slot*vec ...), as f32.

    wide: 16-byte accesses (the slot is 16-byte aligned); else one access per element.
    """
    # Offsets are written `base + constant` so LLVM can fold the constant into the instruction's
    # immediate offset (it does where the address is computed in the load's block).
    base = slot * (vec * nbytes)
    if not wide:
        return fx.Vector.from_elements([_load_elem(rsrc, base + e * nbytes, t, nbytes) for e in range(vec)], fx.Float32)
    parts = vec * nbytes // VEC_BYTES
    raw = [
        fx.Vector(rocdl.raw_ptr_buffer_load(fx.T.vec(4, fx.T.i32), rsrc, base + p * VEC_BYTES, 0)).bitcast(t)
        for p in range(parts)
    ]
    v = raw[0] if parts == 1 else raw[0].shuffle(raw[1], list(range(vec)))
    return v.to(fx.Float32)


def _store_slot(rsrc: Any, slot: Any, value: fx.Vector, vec: int, t: type, nbytes: int, wide: bool) -> None:
    """Round the f32 `value` once to `t` and store it to slot `slot`."""
    base = slot * (vec * nbytes)
    if not wide:
        for e in range(vec):
            _store_elem(rsrc, base + e * nbytes, value[e], t, nbytes)
        return
    raw = value.to(t).bitcast(fx.Int32)
    parts = vec * nbytes // VEC_BYTES
    for p in range(parts):
        chunk = raw if parts == 1 else raw.shuffle(raw, list(range(4 * p, 4 * p + 4)))
        rocdl.raw_ptr_buffer_store(chunk, rsrc, fx.Int32(base + p * VEC_BYTES).ir_value(), fx.Int32(0).ir_value())


def _build(dtype: str, n_baked: int, n_max: int, wave: int) -> Callable:
    """The @flyc.jit launcher for one knob row, planned for a `wave`-lane target."""
    x_name, g_name = DTYPE_FORMS[dtype]
    x_t, g_t = FX_TYPES[x_name], FX_TYPES[g_name]
    x_bytes, g_bytes = ELEM_BYTES[x_name], ELEM_BYTES[g_name]
    vec = vec_elems(dtype)  # x elements per 16-byte access = columns per slot
    threads, slots = partial_plan(n_baked or n_max, vec)
    n_waves = threads // wave
    reduce_grid_baked = -(-n_baked // REDUCE_COLS)

    def _load_slots(rsrc: Any, ids: list, t: type, nbytes: int, wide: bool) -> list[fx.Vector]:
        return [_load_slot(rsrc, i, vec, t, nbytes, wide) for i in ids]

    # Explicit names: the symbols do not depend on FlyDSL's per-launcher kernel counter.
    @flyc.kernel(name="rmsnorm_bwd_partial")
    def rmsnorm_bwd_partial(
        x: fx.Pointer, gamma: fx.Pointer, dy: fx.Pointer, inv_rms: fx.Pointer, dx: fx.Pointer, workspace: fx.Pointer,
        m: fx.Int32, n: fx.Int32, num_programs: fx.Int32,
        x_row_stride: fx.Int32, dy_row_stride: fx.Int32, dx_row_stride: fx.Int32,
    ):
        check_wave(wave, "rmsnorm_bwd_partial")
        pid = fx.block_idx.x
        tid = fx.thread_idx.x
        lds = None
        if fx.const_expr(n_waves > 1):
            # Two banks, alternating by row: a row's writes can never overwrite partials a
            # slower wave still reads, so one barrier per row suffices.  A bank has a slot
            # per lane so every lane stores unconditionally: no branch in the row loop,
            # which would let LLVM sink work past the barrier and lengthen live ranges.
            lds = fx.SharedAllocator().allocate(fx.Array[fx.Float32, 2 * threads, 16]).peek()

        def block_sum(v: fx.Float32, bank: fx.Int32) -> fx.Float32:
            v = fx.coop.warp_reduce(v, fx.ReductionOp.ADD)
            if fx.const_expr(n_waves == 1):
                return v
            base = bank * threads
            put(lds, base + tid, v)
            lds_barrier()
            # Every lane folds the waves' totals (each wave's lane-0 slot) in one fixed tree.
            return tree([lds[base + w * wave] for w in fx.range_constexpr(n_waves)])

        def row_rsrc(base: fx.Pointer, stride: fx.Int32, row: fx.Int32, row_bytes: fx.Int64) -> Any:
            # Rows at or past M get an empty descriptor: their (prefetch) loads touch no memory.
            nbytes = (row < m).select(row_bytes, fx.Int64(0))
            return buffer_rsrc(base + fx.Int64(row) * fx.Int64(stride), nbytes)

        def row_update(xs: list, dys: list, rstd: fx.Float32, gs: list, acc: list, bank: fx.Int32) -> tuple:
            """x_hat, gamma*dy, the row's sum of x_hat*gamma*dy (workgroup-wide), updated acc."""
            xh = [xs[s] * rstd for s in fx.range_constexpr(slots)]
            wdy = [dys[s] * gs[s] for s in fx.range_constexpr(slots)]
            part = xh[0] * wdy[0]
            for s in fx.range_constexpr(1, slots):
                part = fx.math.fma(xh[s], wdy[s], part)
            # dgamma before the reduction: dy is then dead across the barrier (fewer VGPRs).
            acc = [fx.math.fma(dys[s], xh[s], acc[s]) for s in fx.range_constexpr(slots)]
            return xh, wdy, block_sum(part.reduce(fx.ReductionOp.ADD), bank), acc

        def store_dx(row: Any, row_bytes: Any, ids: list, xh: list, wdy: list, c: Any, rstd: Any, wide: bool) -> None:
            dx_rs = row_rsrc(dx, dx_row_stride, row, row_bytes)
            for s in fx.range_constexpr(slots):
                _store_slot(dx_rs, ids[s], (wdy[s] - xh[s] * c) * rstd, vec, x_t, x_bytes, wide)
                _fence_schedule()

        def program_rows(n_cols: Any, inv_n: Any, wide: bool) -> None:
            # Lane tid owns slots tid + s*threads (columns slot*vec ...) for every row, so
            # gamma and the dgamma partial stay in registers across the program's rows.
            ids = [tid + s * threads for s in fx.range_constexpr(slots)]
            row_bytes = fx.Int64(n_cols) * x_bytes
            gs = _load_slots(buffer_rsrc(gamma, fx.Int64(n_cols) * g_bytes), ids, g_t, g_bytes, wide)
            rstd_rs = buffer_rsrc(inv_rms, fx.Int64(m) * 4)
            acc = [fx.Vector.filled(vec, 0.0, fx.Float32) for _s in fx.range_constexpr(slots)]
            bank = fx.Int32(0)
            if fx.const_expr(wide and slots <= PREFETCH_MAX_SLOTS):
                # 16-byte path: the next row's x, dy and inv_rms are loaded (raw) while this row
                # is reduced and stored, so their latency hides behind the barrier and the stores.
                def fetch(row: fx.Int32) -> tuple:
                    x_rs = row_rsrc(x, x_row_stride, row, row_bytes)
                    dy_rs = row_rsrc(dy, dy_row_stride, row, row_bytes)
                    return (
                        [_load_raw(x_rs, i) for i in ids],
                        [_load_raw(dy_rs, i) for i in ids],
                        _load_elem(rstd_rs, row * 4, fx.Float32, 4),
                    )

                cur_x, cur_dy, cur_rstd = fetch(pid)
                for row in range(pid, m, num_programs):
                    # inv_rms is wave-uniform: an SGPR copy keeps packed VALU ops from pairing
                    # it with a VGPR the next row's loads are still writing.
                    rstd = fx.Float32(rocdl.readfirstlane(fx.T.f32, cur_rstd))
                    # Converted before the next loads are issued, so those land in the same
                    # registers (no copies at the loop back-edge, which would wait for them).
                    xs = [fx.Vector(v).bitcast(x_t).to(fx.Float32) for v in cur_x]
                    dys = [fx.Vector(v).bitcast(x_t).to(fx.Float32) for v in cur_dy]
                    cur_x, cur_dy, cur_rstd = fetch(row + num_programs)
                    xh, wdy, total, acc = row_update(xs, dys, rstd, gs, acc, bank)
                    store_dx(row, row_bytes, ids, xh, wdy, total * inv_n, rstd, True)
                    bank = 1 - bank
            else:
                # No prefetch (the n_max=16384 f32 tier: it would not fit in 256 VGPRs; and the
                # element path).  The element path re-reads x and dy after the barrier (cache
                # hits) rather than keeping one VGPR per element live across it.
                for row in range(pid, m, num_programs):
                    x_rs = row_rsrc(x, x_row_stride, row, row_bytes)
                    dy_rs = row_rsrc(dy, dy_row_stride, row, row_bytes)
                    rstd = _load_elem(rstd_rs, row * 4, fx.Float32, 4)
                    xs = _load_slots(x_rs, ids, x_t, x_bytes, wide)
                    dys = _load_slots(dy_rs, ids, x_t, x_bytes, wide)
                    xh, wdy, total, acc = row_update(xs, dys, rstd, gs, acc, bank)
                    if fx.const_expr(not wide):
                        xh = [v * rstd for v in _load_slots(x_rs, ids, x_t, x_bytes, False)]
                        wdy = [v * g for v, g in zip(_load_slots(dy_rs, ids, x_t, x_bytes, False), gs, strict=True)]
                    store_dx(row, row_bytes, ids, xh, wdy, total * inv_n, rstd, wide)
                    bank = 1 - bank
            # This program's dgamma partial row (zeros if it had no rows).
            ws_rs = buffer_rsrc(workspace + fx.Int64(pid) * fx.Int64(n_cols), fx.Int64(n_cols) * 4)
            for s in fx.range_constexpr(slots):
                _store_slot(ws_rs, ids[s], acc[s], vec, fx.Float32, 4, wide)

        if fx.const_expr(n_baked > 0):
            program_rows(n_baked, 1.0 / n_baked, True)
        else:
            inv_n = 1.0 / n.to(fx.Float32)
            # 16-byte accesses need whole vectors per row and 16-byte aligned rows; the
            # workspace rows (stride N f32) are then 16-byte aligned too.
            ptrs = fx.ptrtoint(x) | fx.ptrtoint(dy) | fx.ptrtoint(dx) | fx.ptrtoint(gamma) | fx.ptrtoint(workspace)
            uneven = (n | x_row_stride | dy_row_stride | dx_row_stride) & (vec - 1)
            if ((ptrs & (VEC_BYTES - 1)) == 0) & (uneven == 0):
                program_rows(n, inv_n, True)
            else:
                program_rows(n, inv_n, False)

    @flyc.kernel(name="rmsnorm_bwd_reduce")
    def rmsnorm_bwd_reduce(
        workspace: fx.Pointer, dgamma: fx.Pointer,
        n: fx.Int32, num_programs: fx.Int32,
    ):
        tid = fx.thread_idx.x
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Float32, _REDUCE_THREADS, 16]).peek()
        if fx.const_expr(n_baked > 0):
            n_cols = n_baked
        else:
            n_cols = n
        lane = tid % REDUCE_COLS
        group = tid // REDUCE_COLS
        col = fx.block_idx.x * REDUCE_COLS + lane
        # One descriptor over the whole workspace: rows p >= num_programs read as 0.
        ws_rs = buffer_rsrc(workspace, fx.Int64(num_programs) * fx.Int64(n_cols) * 4)
        acc = fx.Float32(0.0)
        # Programs group, group + G, ... summed strictly in increasing order.
        for p in range(group, num_programs, REDUCE_GROUPS * REDUCE_UNROLL):
            vals = [
                _load_elem(ws_rs, ((p + u * REDUCE_GROUPS) * n_cols + col) * 4, fx.Float32, 4)
                for u in fx.range_constexpr(REDUCE_UNROLL)
            ]
            for u in fx.range_constexpr(REDUCE_UNROLL):
                acc = acc + vals[u]
        put(lds, tid, acc)
        lds_barrier()
        if group == 0:
            total = lds[lane]
            for g in fx.range_constexpr(1, REDUCE_GROUPS):
                total = total + lds[g * REDUCE_COLS + lane]
            _store_elem(buffer_rsrc(dgamma, fx.Int64(n_cols) * g_bytes), col * g_bytes, total, g_t, g_bytes)

    @flyc.jit
    def launch(
        x: fx.Tensor, gamma: fx.Tensor, dy: fx.Tensor, inv_rms: fx.Tensor,
        dx: fx.Tensor, dgamma: fx.Tensor, workspace: fx.Tensor,
        m: fx.Int32, n: fx.Int32, num_programs: fx.Int32,
        x_row_stride: fx.Int32, dy_row_stride: fx.Int32, dx_row_stride: fx.Int32,
        stream: fx.Stream = NULL_STREAM,
    ):
        rmsnorm_bwd_partial(
            fx.get_iter(x),
            fx.get_iter(gamma),
            fx.get_iter(dy),
            fx.get_iter(inv_rms),
            fx.get_iter(dx),
            fx.get_iter(workspace),
            m,
            n,
            num_programs,
            x_row_stride,
            dy_row_stride,
            dx_row_stride,
        ).launch(grid=(num_programs, 1, 1), block=(threads, 1, 1), stream=stream)
        if fx.const_expr(n_baked > 0):
            reduce_grid = reduce_grid_baked
        else:
            reduce_grid = (n + (REDUCE_COLS - 1)) // REDUCE_COLS
        rmsnorm_bwd_reduce(fx.get_iter(workspace), fx.get_iter(dgamma), n, num_programs).launch(
            grid=(reduce_grid, 1, 1), block=(_REDUCE_THREADS, 1, 1), stream=stream
        )

    return launch


def launcher_and_args(knobs: dict) -> tuple[Callable, tuple]:
    """Return a @flyc.jit launcher and CPU torch args.

    Calling launcher(*args) under COMPILE_ONLY traces and compiles one object holding both
    kernels; the trace shapes (M=4, N=n or 64, 2 programs) are not part of it: M, N,
    num_programs and the strides are kernel arguments.
    """
    check_row(knobs)
    dtype, n, n_max = knobs["dtype"], knobs["n"], knobs["n_max"]
    launcher = _build(dtype, n, n_max, wave_size())
    x, gamma = trace_rows(dtype, n)
    cols = x.shape[1]
    dy = torch.zeros_like(x)
    inv_rms = torch.ones(TRACE_M, dtype=torch.float32)
    dx = torch.empty_like(x)
    dgamma = torch.empty_like(gamma)
    workspace = torch.empty(_TRACE_PROGRAMS, cols, dtype=torch.float32)
    args = (
        x, gamma, dy, inv_rms, dx, dgamma, workspace,
        TRACE_M, cols, _TRACE_PROGRAMS, x.stride(0), dy.stride(0), dx.stride(0),
    )  # fmt: skip
    return launcher, args
