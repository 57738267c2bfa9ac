"""Attention forward (flash-attention style) for RDNA3/RDNA4 with WMMA, written in FlyDSL.

    O[b, hq, i, :] = softmax_j(scale * Q[b, hq, i, :] . K[b, hk, j, :] + bias[b, hq, i, j] [+ causal]) V[b, hk, j, :]

Shared by the two ops of this family (see spec.Plan):
  - `sdpa_rdna` (gfx11 + gfx12): one LDS buffer, load-then-compute per key block;
  - `sdpa_rdna4` (gfx12 only): two LDS buffers, the next block prefetched into registers while
    the current one is computed, one barrier per block, 8 waves per workgroup.

The math runs transposed: each wave computes S^T = K Q^T for its 16 queries (A = K from LDS,
B = Q^T), so a lane holds one query's scores over 8 keys and the softmax row statistics need
only in-lane work plus one cross-half exchange (v_permlanex16).  O^T = V^T P^T (A = V^T from
LDS, stored transposed there; B = P^T, which is the S^T accumulator layout itself on RDNA4).
On RDNA3 the A-operand rows are permuted (row r holds key/dim (r%2)*8 + r//2) so that the
accumulator layout matches RDNA4's: lanes 0-15 rows 0-7, lanes 16-31 rows 8-15.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from common.arch import check_wave
from common.buffers import buffer_rsrc
from common.flydsl_compat import lds_load, lds_store
from common.fx_types import FX_TYPES, NULL_STREAM, TORCH_TYPES
from common.trace import tree
from flydsl.expr import rocdl
from sdpa_rdna.spec import ELEM_BYTES, WAVE, WMMA, Plan

LOG2E = 1.4426950408889634
# Running-max start value: finite, so exp2(m_old - m_new) never computes inf - inf.
NEG_INIT = -1.0e30
# A buffer offset past every bound this kernel sets: loads read 0, stores are dropped.
OOB = 0x7FFFFFF0
# v_permlanex16 lane selects: lane i of one 16-lane half reads lane i of the other.
_X16_LO, _X16_HI = 0x76543210, -0x01234568  # 0xFEDCBA98 as a signed i32



# ----------------------------------------------------------------------------- small IR helpers


def _raw(x: Any) -> Any:
    return x.ir_value() if hasattr(x, "ir_value") else x


def _gload4(rsrc: Any, off: fx.Int32) -> fx.Vector:
    return fx.Vector(rocdl.raw_ptr_buffer_load(fx.T.vec(4, fx.T.i32), rsrc, off, 0))


def _gstore(rsrc: Any, off: fx.Int32, value: Any) -> None:
    rocdl.raw_ptr_buffer_store(_raw(value), rsrc, _raw(fx.Int32(off)), _raw(fx.Int32(0)))


def _concat(a: fx.Vector, b: fx.Vector) -> fx.Vector:
    return a.shuffle(b, list(range(a.numel + b.numel)))


def _x16(value: Any) -> fx.Int32:
    """The same register of the lane in the other 16-lane half (lane ^ 16)."""
    v = _raw(fx.Int32(value))
    return fx.Int32(rocdl.permlanex16(fx.T.i32, v, v, _raw(fx.Int32(_X16_LO)), _raw(fx.Int32(_X16_HI)),
                                      False, False))


def _x16_f32(value: fx.Float32) -> fx.Float32:
    return _x16(value.bitcast(fx.Int32)).bitcast(fx.Float32)


def _exp2(x: fx.Float32) -> fx.Float32:
    return fx.Float32(rocdl.exp2(fx.T.f32, _raw(x)))


def _wmma(plan: Plan, a: fx.Vector, b: fx.Vector, c: fx.Vector) -> fx.Vector:
    """D = A B + C on one 16x16x16 tile; a, b are i32-packed 16-bit operands (4 dwords on RDNA4, 8 on RDNA3)."""
    if plan.dtype == "f16":
        op, et = rocdl.wmma_f32_16x16x16_f16, fx.Float16
    else:  # the bf16 intrinsic takes bf16 bits as i16
        op, et = rocdl.wmma_f32_16x16x16_bf16, fx.Int16
    return fx.Vector(op(c.type, _raw(a.bitcast(et)), _raw(b.bitcast(et)), _raw(c)).result)


def _op_dwords(plan: Plan) -> int:
    # RDNA3 operands carry all 16 K values per lane (both halves replicated); RDNA4 carries 8.
    return 8 if plan.arch == "gfx11" else 4


def _perm_row(plan: Plan, r: fx.Int32) -> fx.Int32:
    # RDNA3: A row r feeds accumulator row r -> (lane half r%2, element r//2); reading source row
    # (r%2)*8 + r//2 there gives the RDNA4 accumulator layout (half h holds rows 8h..8h+7).
    if plan.arch == "gfx11":
        return (r % 2) * 8 + r // 2
    return r


# ----------------------------------------------------------------------------- tile copies


def _units(plan: Plan, rows: int, cpr: int) -> list[tuple[Any, Any]]:
    """(row, 16-byte column) of each staging unit a thread owns, `rows` x `cpr` units in all."""
    t, total = plan.threads, rows * cpr
    tid = fx.Int32(fx.thread_idx.x)
    out = []
    if t % cpr == 0 and total % t == 0:  # affine: one division, then compile-time row steps
        row0, col = tid // cpr, tid % cpr
        return [(row0 + i * (t // cpr), col) for i in range(total // t)]
    for i in range(-(-total // t)):
        u = fx.min(tid + i * t, fx.Int32(total - 1))  # surplus threads repeat the last unit
        out.append((u // cpr, u % cpr))
    return out


def _col_ok(c: SimpleNamespace, col8: Any) -> Any:
    """Generic tier: a 16-byte chunk starting at column `col8` holds real head-dim columns."""
    return col8 < c.head_dim


def _masked_off(plan: Plan, c: SimpleNamespace, off: Any, col8: Any) -> Any:
    if plan.head_dim:
        return off
    return _col_ok(c, col8).select(off, fx.Int32(OOB))


def _rows_bytes(rows: Any, stride: Any, width: Any) -> fx.Int64:
    """Byte bound of `rows` (>= 0) rows of `width` elements `stride` apart (0 when rows == 0)."""
    span = (fx.Int64(rows) - 1) * fx.Int64(stride) + fx.Int64(width)
    return (rows > 0).select(span * ELEM_BYTES, fx.Int64(0))


def _kv_rsrc(plan: Plan, c: SimpleNamespace, base: Any, stride: Any, n0: Any) -> Any:
    rows = fx.max(fx.min(c.seqlen_k - n0, fx.Int32(plan.block_n)), fx.Int32(0))
    return buffer_rsrc(base + fx.Int64(n0) * fx.Int64(stride), _rows_bytes(rows, stride, c.width))


def _fetch_k(plan: Plan, c: SimpleNamespace, j: Any) -> list:
    """Global loads of key block j's K rows into registers (zeros past Sk)."""
    rs = _kv_rsrc(plan, c, c.k_head, c.k_ss, j * plan.block_n)
    return [_gload4(rs, _masked_off(plan, c, row * c.k_ss * ELEM_BYTES + col * 16, col * 8))
            for row, col in c.k_units]


def _fetch_v(plan: Plan, c: SimpleNamespace, j: Any) -> list:
    """Global loads of key block j's V rows: per unit, `v_rows` adjacent keys x 8 columns."""
    rs = _kv_rsrc(plan, c, c.v_head, c.v_ss, j * plan.block_n)
    r = plan.v_rows
    return [_gload4(rs, _masked_off(plan, c, (grp * r + rr) * c.v_ss * ELEM_BYTES + col * 16, col * 8))
            for grp, col in c.v_units for rr in range(r)]


def _publish_k(plan: Plan, c: SimpleNamespace, data: list, stage_off: Any) -> None:
    """K chunks -> LDS as [key][d]."""
    for (row, col), chunk in zip(c.k_units, data, strict=True):
        lds_store(chunk, c.k_lds + stage_off + row * (plan.k_pitch * ELEM_BYTES) + col * 16, 16)


def _publish_v(plan: Plan, c: SimpleNamespace, data: list, stage_off: Any) -> None:
    """V chunks -> LDS transposed as [d][key], so the PV A-operand reads are row reads."""
    r = plan.v_rows
    for u, (grp, col) in enumerate(c.v_units):
        rows = [data[u * r + rr].bitcast(fx.Int16) for rr in range(r)]
        base = c.vt_lds + stage_off + col * (8 * plan.vt_pitch * ELEM_BYTES) + grp * (r * ELEM_BYTES)
        for e in range(8):  # head-dim column col*8+e: the unit's r keys are adjacent in V^T
            if r == 1:
                run = rows[0][e]
            elif r == 2:
                run = rows[0].shuffle(rows[1], [e, 8 + e]).bitcast(fx.Int32)[0]
            else:
                pair01 = rows[0].shuffle(rows[1], [e, 8 + e])
                pair23 = rows[2].shuffle(rows[3], [e, 8 + e])
                run = pair01.shuffle(pair23, [0, 1, 2, 3]).bitcast(fx.Int32)
            lds_store(run, base + e * (plan.vt_pitch * ELEM_BYTES), r * ELEM_BYTES)


# ----------------------------------------------------------------------------- Q operand


def _q_operand_regs(plan: Plan, c: SimpleNamespace) -> list:
    """B operand Q^T per 16-column d tile, loaded once from global memory (rows past Sq read 0)."""
    ops = []
    for dt in range(plan.d_tile // WMMA):
        if plan.arch == "gfx12":
            col = dt * WMMA + c.half * 8
            ops.append(_gload4(c.q_rs, _masked_off(plan, c, c.q_row_off + col * ELEM_BYTES, col)))
        else:
            lo, hi = dt * WMMA, dt * WMMA + 8
            a = _gload4(c.q_rs, _masked_off(plan, c, c.q_row_off + lo * ELEM_BYTES, fx.Int32(lo)))
            b = _gload4(c.q_rs, _masked_off(plan, c, c.q_row_off + hi * ELEM_BYTES, fx.Int32(hi)))
            ops.append(_concat(a, b))
    return ops


def _stage_q_lds(plan: Plan, c: SimpleNamespace) -> None:
    """Whole Q tile -> LDS once (D > 128 in sdpa_rdna: too many registers to hold it)."""
    cpr = plan.d_tile // 8
    units = _units(plan, plan.block_m, cpr)
    data = [_gload4(c.q_rs, _masked_off(plan, c, row * c.q_ss * ELEM_BYTES + col * 16, col * 8))
            for row, col in units]
    for (row, col), chunk in zip(units, data, strict=True):
        lds_store(chunk, c.q_lds + row * (plan.q_pitch * ELEM_BYTES) + col * 16, 16)


def _q_operand(plan: Plan, c: SimpleNamespace, q_regs: list, dt: int) -> fx.Vector:
    if not plan.q_in_lds:
        return q_regs[dt]
    return lds_load(_op_dwords(plan), c.q_rd + dt * WMMA * ELEM_BYTES, 16)


# ----------------------------------------------------------------------------- one key block


def _bias_values(plan: Plan, c: SimpleNamespace, n0: Any, masked: bool) -> list:
    """bias * log2(e) for this lane's query and its 8 keys per 16-key slice (indices clamped in range)."""
    if plan.bias == "none":
        return []
    eb = 4 if plan.bias == "f32" else ELEM_BYTES
    rs = buffer_rsrc(c.bias_qblk + fx.Int64(n0) * fx.Int64(c.b_sk), None)
    out = []
    k_last = c.seqlen_k - 1 - n0
    for s in range(plan.block_n // WMMA):
        for i in range(8):
            kl = s * WMMA + i  # key within the block, minus this lane half's 8h
            # Masked blocks clamp the key (keys past Sk must not address memory past the bias).
            # Full blocks: when VGPRs are the scarce resource (D > 128) the uniform key term rides
            # in soffset, so no per-element VGPR offset is hoisted out of the loop; otherwise it
            # stays in the VGPR offset (SGPRs run short first there).  Every such access is in bounds.
            if masked:
                off, soff = c.bias_q_off + fx.min(c.half8 + kl, k_last) * (c.b_sk * eb), fx.Int32(0)
            elif plan.d_tile > 128:
                off, soff = c.bias_h_off, fx.Int32(kl) * (c.b_sk * eb)
            else:
                off, soff = c.bias_h_off + kl * (c.b_sk * eb), fx.Int32(0)
            if plan.bias == "f32":
                val = fx.Int32(rocdl.raw_ptr_buffer_load(fx.T.i32, rs, off, soff)).bitcast(fx.Float32)
            else:
                raw = fx.Int16(rocdl.raw_ptr_buffer_load(fx.T.i16, rs, off, soff))
                val = raw.bitcast(FX_TYPES[plan.dtype]).to(fx.Float32)
            out.append(val * LOG2E)
    return out


def _p_operand(plan: Plan, c: SimpleNamespace, p: list) -> fx.Vector:
    """B operand P^T for one 16-key slice from this lane's 8 probabilities."""
    own = fx.Vector.from_elements(p, fx.Float32).to(FX_TYPES[plan.dtype]).bitcast(fx.Int32)
    if plan.arch == "gfx12":
        return own  # RDNA4: K index 8h..8h+7 of the B operand is exactly what this lane holds
    # RDNA3 wants all 16 keys in every lane: swap halves, then order (keys 0-7, keys 8-15).
    mine = [own[i] for i in range(4)]
    other = [_x16(x) for x in mine]
    lo = [c.is_lo.select(a, b) for a, b in zip(mine, other, strict=True)]
    hi = [c.is_lo.select(b, a) for a, b in zip(mine, other, strict=True)]
    return fx.Vector.from_elements(lo + hi, fx.Int32)


def _pipelined(steps: int, load: Callable, mma: Callable) -> None:
    """Issue step i+1's LDS operand reads before step i's WMMAs.  The scheduling barriers pin that
    order: left alone, the compiler hoists every read of the block and runs out of VGPRs."""
    nxt = load(0)
    for i in range(steps):
        cur = nxt
        if i + 1 < steps:
            nxt = load(i + 1)
        rocdl.sched_barrier(0)
        mma(i, cur)
    rocdl.sched_barrier(0)


def _attend(plan: Plan, c: SimpleNamespace, n0: Any, stage_off: Any, state: tuple, q_regs: list,
            bias: list, masked: bool, after_s: Callable | None = None) -> tuple:
    """Online-softmax update of (m, l, O^T tiles) with the key block at n0, read from LDS.

    `after_s` (if given) runs once S is complete: loads issued there overlap softmax and PV.
    """
    m_i, l_i, acc = state
    nd, ns = plan.d_tile // WMMA, plan.block_n // WMMA
    dw = _op_dwords(plan)
    s_acc = [fx.Vector.filled(8, 0.0, fx.Float32)] * ns
    k_rd, v_rd = c.k_rd + stage_off, c.vt_rd + stage_off

    def load_qk(dt: int) -> tuple:
        ks = [lds_load(dw, k_rd + (s * WMMA * plan.k_pitch + dt * WMMA) * ELEM_BYTES, 16) for s in range(ns)]
        return _q_operand(plan, c, q_regs, dt), ks

    def mma_qk(dt: int, ops: tuple) -> None:
        for s in range(ns):
            s_acc[s] = _wmma(plan, ops[1][s], ops[0], s_acc[s])

    _pipelined(nd, load_qk, mma_qk)
    if after_s is not None:
        after_s()
    # scores in log2 units: S * scale * log2(e) (+ bias * log2(e)); masked keys -> -inf
    t = []
    for s in range(ns):
        for i in range(8):
            x = s_acc[s][i] * c.qk_scale
            if bias:
                x = x + bias[s * 8 + i]
            if masked:
                x = (fx.Int32(s * WMMA + i) < c.lim_h - n0).select(x, fx.Float32(float("-inf")))
            t.append(x)
    m_blk = tree(list(t), fx.maxnumf)
    m_blk = fx.maxnumf(m_blk, _x16_f32(m_blk))
    m_new = fx.maxnumf(m_i, m_blk)
    alpha = _exp2(m_i - m_new)
    p = [_exp2(x - m_new) for x in t]
    l_i = l_i * alpha + tree(list(p))
    acc = [a * alpha for a in acc]
    p_ops = [_p_operand(plan, c, p[s * 8:(s + 1) * 8]) for s in range(ns)]

    def load_pv(dt: int) -> list:
        return [lds_load(dw, v_rd + (dt * WMMA * plan.vt_pitch + s * WMMA) * ELEM_BYTES, 16) for s in range(ns)]

    def mma_pv(dt: int, v_ops: list) -> None:
        for s in range(ns):
            acc[dt] = _wmma(plan, v_ops[s], p_ops[s], acc[dt])

    _pipelined(nd, load_pv, mma_pv)
    return m_new, l_i, acc


def block_single(plan: Plan, c: SimpleNamespace, j: Any, m_i: Any, l_i: Any, acc: list, q_regs: list,
                 masked: bool) -> tuple:
    """sdpa_rdna: stage block j (global -> registers -> LDS) between two barriers, then attend.

    K is fetched before the first barrier (its latency overlaps the wait), V after K is stored,
    and the bias last: at most one of them occupies staging registers at a time.
    """
    n0 = j * plan.block_n
    k_data = _fetch_k(plan, c, j)
    fx.gpu.barrier()  # every wave is done reading the previous block
    _publish_k(plan, c, k_data, fx.Int32(0))
    _publish_v(plan, c, _fetch_v(plan, c, j), fx.Int32(0))
    bias = _bias_values(plan, c, n0, masked)
    fx.gpu.barrier()
    return _attend(plan, c, n0, fx.Int32(0), (m_i, l_i, acc), q_regs, bias, masked)


def block_double(plan: Plan, c: SimpleNamespace, j: Any, m_i: Any, l_i: Any, acc: list, q_regs: list,
                 masked: bool) -> tuple:
    """sdpa_rdna4: block j is in LDS stage j%2; block j+1 is fetched into registers meanwhile.

    Past the last block the K/V bound is 0, so the extra fetch reads zeros.  D <= 128: K and V
    of block j+1 are fetched before block j's math.  D > 128 (Q and O alone are 192 VGPRs):
    K is fetched once S is done and V after the math, so no prefetch is live during S.
    """
    n0 = j * plan.block_n
    wide = plan.d_tile > 128
    nxt_data: dict = {}

    def fetch_k() -> None:
        nxt_data["k"] = _fetch_k(plan, c, j + 1)

    if not wide:
        fetch_k()
        nxt_data["v"] = _fetch_v(plan, c, j + 1)
    bias = _bias_values(plan, c, n0, masked)
    cur = (j % 2) * plan.stage_bytes
    m_i, l_i, acc = _attend(plan, c, n0, cur, (m_i, l_i, acc), q_regs, bias, masked,
                            after_s=fetch_k if wide else None)
    if wide:
        nxt_data["v"] = _fetch_v(plan, c, j + 1)
    nxt = plan.stage_bytes - cur
    _publish_k(plan, c, nxt_data["k"], nxt)
    _publish_v(plan, c, nxt_data["v"], nxt)
    fx.gpu.barrier()  # one barrier: stage (j+1)%2 complete, stage j%2 free for block j+2
    return m_i, l_i, acc


# ----------------------------------------------------------------------------- setup / epilogue


def setup(plan: Plan, a: SimpleNamespace) -> SimpleNamespace:
    """Per-workgroup and per-lane values shared by every block (`a` = the kernel arguments)."""
    c = SimpleNamespace(**vars(a))
    tid = fx.Int32(fx.thread_idx.x)
    wave = fx.Int32(rocdl.readfirstlane(fx.T.i32, _raw(tid // WAVE)))
    lane = tid % WAVE
    c.l16, c.half = lane % 16, lane // 16
    c.half8 = c.half * 8
    c.is_lo = c.half == 0
    c.width = a.head_dim if not plan.head_dim else fx.Int32(plan.head_dim)
    n_qb = (a.seqlen_q + (plan.block_m - 1)) // plan.block_m
    pid = fx.Int32(fx.block_idx.x)
    if plan.causal:  # heaviest query blocks (most keys) first
        pid = n_qb - 1 - pid
    hq, b = fx.Int32(fx.block_idx.y), fx.Int32(fx.block_idx.z)
    hk = hq // (a.heads_q // a.heads_kv)
    c.q0 = pid * plan.block_m
    qrow = wave * WMMA + c.l16  # this lane's query row within the block
    query = c.q0 + qrow

    q_rows = fx.min(a.seqlen_q - c.q0, fx.Int32(plan.block_m))
    c.q_rs = buffer_rsrc(a.q + (fx.Int64(b) * a.q_sb + fx.Int64(hq) * a.q_sh + fx.Int64(c.q0) * fx.Int64(a.q_ss)),
                   _rows_bytes(q_rows, a.q_ss, c.width))
    c.q_row_off = qrow * a.q_ss * ELEM_BYTES
    c.o_rs = buffer_rsrc(a.o + (fx.Int64(b) * a.o_sb + fx.Int64(hq) * a.o_sh + fx.Int64(c.q0) * fx.Int64(a.o_ss)),
                   _rows_bytes(q_rows, a.o_ss, c.width))
    c.o_row_off = qrow * a.o_ss * ELEM_BYTES
    c.k_head = a.k + (fx.Int64(b) * a.k_sb + fx.Int64(hk) * a.k_sh)
    c.v_head = a.v + (fx.Int64(b) * a.v_sb + fx.Int64(hk) * a.v_sh)
    if plan.bias != "none":
        eb = 4 if plan.bias == "f32" else ELEM_BYTES
        c.bias_qblk = a.bias + (fx.Int64(b) * a.b_sb + fx.Int64(hq) * a.b_sh + fx.Int64(c.q0) * fx.Int64(a.b_sq))
        q_local = fx.min(query, a.seqlen_q - 1) - c.q0  # rows past Sq reuse the last row (never stored)
        c.bias_q_off = q_local * (a.b_sq * eb)
        c.bias_h_off = c.bias_q_off + c.half8 * (a.b_sk * eb)

    # key-loop bounds (uniform per workgroup) and this lane's key limit
    c.qk_scale = a.scale * LOG2E
    if plan.causal:
        delta = a.seqlen_k - a.seqlen_q
        kv_end = fx.max(fx.min(c.q0 + plan.block_m + delta, a.seqlen_k), fx.Int32(0))
        kv_full = fx.max(fx.min(c.q0 + delta + 1, a.seqlen_k), fx.Int32(0))
        lim = fx.min(query + delta + 1, a.seqlen_k)
    else:
        kv_end = kv_full = lim = a.seqlen_k
    c.n_blocks = (kv_end + (plan.block_n - 1)) // plan.block_n
    c.n_full = kv_full // plan.block_n
    c.lim_h = lim - c.half8  # key k (block-relative, minus 8h) is visible iff k < lim_h - n0

    # LDS: [stage 0 | stage 1] each [K tile | V^T tile], then the Q tile
    lds = fx.SharedAllocator().allocate(fx.Array[fx.Int8, plan.lds_bytes, 16]).peek()
    base = fx.Int32(fx.ptrtoint(lds.ptr))
    c.k_lds = base
    c.vt_lds = base + plan.block_n * plan.k_pitch * ELEM_BYTES
    c.q_lds = base + plan.stages * plan.stage_bytes
    half_off = c.half * 16 if plan.arch == "gfx12" else fx.Int32(0)  # RDNA4: K index 8h..8h+7
    c.k_rd = c.k_lds + _perm_row(plan, c.l16) * (plan.k_pitch * ELEM_BYTES) + half_off
    c.vt_rd = c.vt_lds + _perm_row(plan, c.l16) * (plan.vt_pitch * ELEM_BYTES) + half_off
    c.q_rd = c.q_lds + qrow * (plan.q_pitch * ELEM_BYTES) + half_off
    c.k_units = _units(plan, plan.block_n, plan.d_tile // 8)
    c.v_units = _units(plan, plan.block_n // plan.v_rows, plan.d_tile // 8)
    return c


def epilogue(plan: Plan, c: SimpleNamespace, l_i: fx.Float32, acc: list) -> None:
    """O = O^T / l, rounded to the input type; lane writes 8 contiguous head-dim columns per tile."""
    l_tot = l_i + _x16_f32(l_i)
    inv = (l_tot > 0.0).select(fx.Float32(rocdl.rcp(fx.T.f32, _raw(l_tot))), fx.Float32(0.0))
    for dt in range(plan.d_tile // WMMA):
        col = dt * WMMA + c.half8
        out = (acc[dt] * inv).to(FX_TYPES[plan.dtype]).bitcast(fx.Int32)
        _gstore(c.o_rs, _masked_off(plan, c, c.o_row_off + col * ELEM_BYTES, col), out)


# ----------------------------------------------------------------------------- kernel + launcher


def build(plan: Plan, symbol: str) -> Callable:
    """The @flyc.jit launcher of one object."""
    nd = plan.d_tile // WMMA

    @flyc.kernel(name=symbol, known_block_size=[plan.threads, 1, 1])
    def sdpa_fwd(
        q: fx.Pointer, k: fx.Pointer, v: fx.Pointer, o: fx.Pointer, bias: fx.Pointer,
        q_sb: fx.Int64, q_sh: fx.Int64, k_sb: fx.Int64, k_sh: fx.Int64, v_sb: fx.Int64, v_sh: fx.Int64,
        o_sb: fx.Int64, o_sh: fx.Int64, b_sb: fx.Int64, b_sh: fx.Int64,
        q_ss: fx.Int32, k_ss: fx.Int32, v_ss: fx.Int32, o_ss: fx.Int32, b_sq: fx.Int32, b_sk: fx.Int32,
        batch: fx.Int32, seqlen_q: fx.Int32, seqlen_k: fx.Int32, heads_q: fx.Int32, heads_kv: fx.Int32,
        head_dim: fx.Int32, scale: fx.Float32,
    ):
        check_wave(WAVE, "sdpa_rdna (wave32)")
        c = setup(plan, SimpleNamespace(
            q=q, k=k, v=v, o=o, bias=bias, q_sb=q_sb, q_sh=q_sh, k_sb=k_sb, k_sh=k_sh, v_sb=v_sb, v_sh=v_sh,
            o_sb=o_sb, o_sh=o_sh, b_sb=b_sb, b_sh=b_sh, q_ss=q_ss, k_ss=k_ss, v_ss=v_ss, o_ss=o_ss,
            b_sq=b_sq, b_sk=b_sk, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q, heads_kv=heads_kv,
            head_dim=head_dim, scale=scale))
        q_regs = []
        if fx.const_expr(plan.q_in_lds):
            _stage_q_lds(plan, c)
        else:
            q_regs = _q_operand_regs(plan, c)
        m_i = fx.Float32(NEG_INIT)
        l_i = fx.Float32(0.0)
        acc = [fx.Vector.filled(8, 0.0, fx.Float32) for _ in fx.range_constexpr(nd)]
        if fx.const_expr(plan.stages == 1):
            for j in range(fx.Int32(0), c.n_full):
                m_i, l_i, acc = block_single(plan, c, j, m_i, l_i, acc, q_regs, False)
            for j in range(c.n_full, c.n_blocks):
                m_i, l_i, acc = block_single(plan, c, j, m_i, l_i, acc, q_regs, True)
        else:
            _publish_k(plan, c, _fetch_k(plan, c, fx.Int32(0)), fx.Int32(0))
            _publish_v(plan, c, _fetch_v(plan, c, fx.Int32(0)), fx.Int32(0))
            fx.gpu.barrier()
            for j in range(fx.Int32(0), c.n_full):
                m_i, l_i, acc = block_double(plan, c, j, m_i, l_i, acc, q_regs, False)
            for j in range(c.n_full, c.n_blocks):
                m_i, l_i, acc = block_double(plan, c, j, m_i, l_i, acc, q_regs, True)
        epilogue(plan, c, l_i, acc)

    @flyc.jit
    def launch(
        q: fx.Tensor, k: fx.Tensor, v: fx.Tensor, o: fx.Tensor, bias: fx.Tensor,
        q_sb: fx.Int64, q_sh: fx.Int64, k_sb: fx.Int64, k_sh: fx.Int64, v_sb: fx.Int64, v_sh: fx.Int64,
        o_sb: fx.Int64, o_sh: fx.Int64, b_sb: fx.Int64, b_sh: fx.Int64,
        q_ss: fx.Int32, k_ss: fx.Int32, v_ss: fx.Int32, o_ss: fx.Int32, b_sq: fx.Int32, b_sk: fx.Int32,
        batch: fx.Int32, seqlen_q: fx.Int32, seqlen_k: fx.Int32, heads_q: fx.Int32, heads_kv: fx.Int32,
        head_dim: fx.Int32, scale: fx.Float32, stream: fx.Stream = NULL_STREAM,
    ):
        sdpa_fwd(
            fx.get_iter(q), fx.get_iter(k), fx.get_iter(v), fx.get_iter(o), fx.get_iter(bias),
            q_sb, q_sh, k_sb, k_sh, v_sb, v_sh, o_sb, o_sh, b_sb, b_sh,
            q_ss, k_ss, v_ss, o_ss, b_sq, b_sk,
            batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, scale,
        ).launch(grid=((seqlen_q + (plan.block_m - 1)) // plan.block_m, heads_q, batch),
                 block=(plan.threads, 1, 1), stream=stream)

    return launch


def trace_args(plan: Plan, batch: int = 1, seqlen_q: int = 16, seqlen_k: int = 24, heads_q: int = 2,
               heads_kv: int = 1, head_dim: int | None = None, scale: float = 0.125) -> tuple:
    """Small CPU tensors (BSHD) and scalars to trace one object; no size here reaches the object."""
    d = head_dim or plan.head_dim or plan.d_tile
    et = TORCH_TYPES[plan.dtype]
    q = torch.zeros(batch, seqlen_q, heads_q, d, dtype=et)
    k = torch.zeros(batch, seqlen_k, heads_kv, d, dtype=et)
    v = torch.zeros(batch, seqlen_k, heads_kv, d, dtype=et)
    o = torch.empty_like(q)
    bias_t = TORCH_TYPES["f32" if plan.bias == "f32" else plan.dtype]
    # bias [1, Hq, Sq, Sk] broadcast over the batch (stride 0)
    bias = torch.zeros(1, heads_q, seqlen_q, seqlen_k, dtype=bias_t).expand(batch, -1, -1, -1)

    def bhs(t: torch.Tensor) -> list[int]:
        return [t.stride(0), t.stride(2), t.stride(1)]

    qs, ks, vs, os_ = bhs(q), bhs(k), bhs(v), bhs(o)
    bs = list(bias.stride())
    return (q, k, v, o, bias,
            qs[0], qs[1], ks[0], ks[1], vs[0], vs[1], os_[0], os_[1], bs[0], bs[1],
            qs[2], ks[2], vs[2], os_[2], bs[2], bs[3],
            batch, seqlen_q, seqlen_k, heads_q, heads_kv, d, scale)
