"""Split-KV attention decode, written in FlyDSL: one object = a split kernel and a merge kernel.

    O[b, i, h, :] = softmax(scale * Q[b, i, h, :] . K[b, :, h // group, :]^T) V[b, :, h // group, :]

`sdpa_decode_split`: grid (num_splits, batch * heads_kv, ceil(group * seqlen_q / tile_m)).  A program
takes one KV head, `tile_m` packed query rows of its GQA group (row r = head_in_group * seqlen_q +
query_pos) and split s of the key axis (whole `chunk`-key steps).  Its waves form a waves_m x waves_n
grid: each wave owns 16 rows and chunk / waves_n keys of every step, keeps its own online-softmax
state and writes one partial (O rows in f32, normalised, and their base-2 LSE) to the workspace.
`sdpa_decode_merge`: one workgroup per output row folds that row's num_splits * waves_n partials in
slot order (deterministic, no atomics) into O (and LSE when asked).

Matrix work (16 x 16 tiles, MFMA on CDNA, WMMA on RDNA), transposed so that every lane owns one query
row: S^T = K Q^T (A = K rows straight from global memory, B = Q^T), then O^T += V^T P^T (A = V^T from
LDS, B = P^T, which is S^T's accumulator re-typed in place).  The online-softmax rescale is then a
per-lane scalar.  The contraction order inside an MMA is free, so K and Q fragments are loaded as
16-byte runs with the same lane -> head-dim mapping on both sides.  Kernel arguments: see SOURCE.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from common.arch import check_wave, target_arch
from common.buffers import buffer_rsrc
from common.fx_types import FX_TYPES, NULL_STREAM, TORCH_TYPES
from common.trace import tree
from flydsl.expr import rocdl
from sdpa_decode.spec import (
    ELEM_BYTES,
    LDS_PAD_KEYS,
    MERGE_THREADS,
    MMA_TILE,
    STAGE_COLS,
    check_row,
    num_waves,
    stage_plan,
    waves_m,
    waves_n,
)

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
# Running-max start: finite, so exp2(m_old - m_new) never evaluates inf - inf.
NEG_INIT = -1.0e30
NEG_INF = float("-inf")
# Buffer descriptor bound for Q (never out of range; rows are clamped instead).
UNBOUNDED = 0x7FFFFFFF
# Merge kernel: slots whose loads are issued together.
MERGE_UNROLL = 4
# Small trace shapes: only dtypes reach the object, never these sizes.
_TRACE = {"batch": 1, "seqlen_q": 2, "seqlen_k": 80, "heads_q": 4, "heads_kv": 2, "num_splits": 2}


@dataclass(frozen=True)
class Mma:
    """How one target's 16x16 MMA spreads its operands over a wave (lane l, group g = l // 16).

    A (16 x k) and B (k x 16): lane l holds row / column l % 16 and `op_elems` k-slots; on CDNA and
    gfx12 group g holds k-slots [g * op_elems, ...), on gfx11 every lane holds all 16 (replicated).
    C (16 x 16 f32): lane l holds column l % 16 and `acc_elems` rows, row(v) given by `acc_row`.
    """

    family: str  # "cdna" | "gfx11" | "gfx12"
    wave: int
    qk_step: int  # head-dim columns per fragment load step of S^T = K Q^T
    lane_cols: int  # contiguous head-dim columns one lane loads per step
    op_elems: int  # operand elements per lane per MMA
    acc_elems: int  # f32 accumulator elements per lane

    @property
    def groups(self) -> int:
        return self.wave // MMA_TILE

    def lane_col(self, grp: Any) -> Any:
        """First head-dim column (within a load step) of lane group `grp`."""
        return 0 if self.family == "gfx11" else grp * self.lane_cols

    def acc_row(self, v: int, grp: Any) -> Any:
        """Row of the C tile held in accumulator element v by lane group `grp`."""
        if self.family == "gfx11":
            return grp + 2 * v
        return grp * self.acc_elems + v

    def pv_key(self, grp: Any) -> Any:
        """First key (k-slot) of the V^T / P^T operand held by lane group `grp`."""
        return 0 if self.family == "gfx11" else grp * self.op_elems


def mma_for(arch: str) -> Mma:
    """The MMA layout of the target being compiled for."""
    if arch.startswith("gfx11"):
        return Mma("gfx11", 32, 16, 16, 16, 8)
    if arch.startswith("gfx12"):
        return Mma("gfx12", 32, 16, 8, 8, 8)
    if arch.startswith("gfx9"):
        return Mma("cdna", 64, 32, 8, 4, 4)
    raise ValueError(f"sdpa_decode has no MMA layout for target {arch!r} (gfx9 CDNA, gfx11, gfx12 only)")


def _i64(x: Any) -> fx.Int64:
    return fx.Int64(x)


def _exp2(x: Any) -> fx.Float32:
    # v_exp_f32: exp2(-inf) = 0, which masked scores rely on.
    return fx.Float32(rocdl.exp2(fx.T.f32, fx.Float32(x).ir_value()))


def _log2(x: Any) -> fx.Float32:
    return fx.Float32(rocdl.log(fx.T.f32, fx.Float32(x).ir_value()))


def _fmax(a: Any, b: Any) -> fx.Float32:
    return fx.Float32(fx.arith.maxnumf(fx.Float32(a), fx.Float32(b)))


def _load16(rsrc: Any, voff: Any, soff: Any, elem_t: type) -> fx.Vector:
    """Eight 16-bit elements (one 16-byte buffer load) at byte voff (per lane) + soff (wave-uniform).

    The uniform part goes to the instruction's SGPR offset: left in the VGPR offset, LLVM hoisted
    every `lane offset + constant` out of the loop as its own VGPR (tens of them on gfx11).
    """
    raw = rocdl.raw_ptr_buffer_load(fx.T.vec(4, fx.T.i32), rsrc, voff, soff)
    return fx.Vector(raw).bitcast(elem_t)


def _store_f32(rsrc: Any, byte_off: Any, values: list) -> None:
    """Store consecutive f32 values (4 at a time when possible)."""
    for i in range(0, len(values), 4):
        part = values[i : i + 4]
        if len(part) == 1:
            data = fx.Float32(part[0]).ir_value()
        else:
            data = fx.Vector.from_elements(part, fx.Float32).ir_value()
        rocdl.raw_ptr_buffer_store(data, rsrc, fx.Int32(byte_off + 4 * i).ir_value(), fx.Int32(0).ir_value())


def _xlane_sum(m: Mma, x: Any) -> fx.Float32:
    """Sum over the lane groups that share a query row (lanes l, l ^ 16, l ^ 32, ...)."""
    x = fx.Float32(x)
    for off in [16 * (1 << i) for i in range(m.groups.bit_length() - 1)]:
        x = x + fx.Float32(fx.gpu.shuffle_xor(x, off, m.wave))
    return x


def _xlane_max(m: Mma, x: Any) -> fx.Float32:
    x = fx.Float32(x)
    for off in [16 * (1 << i) for i in range(m.groups.bit_length() - 1)]:
        x = _fmax(x, fx.gpu.shuffle_xor(x, off, m.wave))
    return x


class Plan:
    """Compile-time shape of one object (from the knobs and the target's MMA layout)."""

    def __init__(self, knobs: dict, m: Mma) -> None:
        self.mma = m
        self.dtype = knobs["dtype"]
        self.bf16 = self.dtype == "bf16"
        self.elem_t = FX_TYPES[self.dtype]
        self.d = knobs["head_dim"]
        self.causal = knobs["mask"] == "causal"
        self.chunk = knobs["chunk"]
        self.tile_m = knobs["tile_m"]
        self.wm = waves_m(self.tile_m)
        self.wn = waves_n(self.tile_m, self.chunk, m.wave)
        self.threads = num_waves(self.tile_m, self.chunk, m.wave) * m.wave
        self.kpw = self.chunk // self.wn  # keys per wave per step
        self.nsub = self.kpw // MMA_TILE  # 16-key MMA tiles per wave per step
        self.qk_steps = self.d // m.qk_step
        self.d_blocks = self.d // MMA_TILE
        self.pitch_w = (self.chunk + LDS_PAD_KEYS) // 2  # V^T row pitch in 32-bit words
        plan = stage_plan(self.d, self.chunk, self.threads)
        if plan is None:
            raise ValueError(f"no V staging plan for head_dim={self.d}, chunk={self.chunk}, {self.threads} threads")
        self.run, self.units = plan
        self.n_runs = self.chunk // self.run
        # Q^T fragments stay in registers for the whole loop unless they would crowd out the O^T
        # accumulator (RDNA at D = 256: 64-128 VGPRs); then they are re-read per step (L1 hits).
        self.q_regs = {"cdna": True, "gfx12": self.d <= 128, "gfx11": self.d <= 64}[m.family]
        # CDNA: the next step's K fragments and V staging loads are issued before this step's PV phase
        # (its barriers do not wait for outstanding loads there).  RDNA: a workgroup barrier waits for
        # every load (WGP mode), so K is loaded in a window during the S phase; V is loaded before
        # the S phase at D <= 128 (`v_early`), else after the softmax one staging unit at a time
        # (`stage_window` 0: at D = 256 the O^T accumulator alone is 128 VGPRs).
        self.prefetch = m.family == "cdna"
        # V staging rows in the VGPR offset where the SGPR offset does not count in the buffer range check (gfx9)
        self.row_in_voffset = m.family == "cdna"
        self.v_early = self.d <= 128
        self.stage_window = 0 if self.d == 256 else self.units
        # S phase: ~128 bytes of K (and re-read Q) loads in flight per lane; PV phase: V^T operands.
        item_bytes = m.lane_cols * ELEM_BYTES * (1 if self.q_regs else 2)
        self.window = max(1, 128 // item_bytes)
        self.pv_window = 4


# ---------------------------------------------------------------------------------------------
# Split-kernel building blocks (trace-time Python; no run-time `if`, so the AST rewriter never sees them)
# ---------------------------------------------------------------------------------------------


def mma(p: Plan, a: fx.Vector, b: fx.Vector, acc: fx.Vector) -> fx.Vector:
    """acc + A x B on one 16x16 tile."""
    if p.mma.family == "cdna":
        if p.bf16:
            return fx.Vector(rocdl.mfma_f32_16x16x16bf16_1k(acc.type, [a.bitcast(fx.Int16), b.bitcast(fx.Int16), acc,
                                                                        0, 0, 0]))
        return fx.Vector(rocdl.mfma_f32_16x16x16f16(acc.type, [a, b, acc, 0, 0, 0]))
    if p.bf16:
        op, a, b = rocdl.wmma_f32_16x16x16_bf16, a.bitcast(fx.Int16), b.bitcast(fx.Int16)
    else:
        op = rocdl.wmma_f32_16x16x16_f16
    return fx.Vector(op(acc.type, a.ir_value(), b.ir_value(), acc.ir_value()).result)


def load_step(p: Plan, rsrc: Any, row_off: Any, row_soff: Any, s: int) -> list:
    """MMA operands of head-dim step s for the lane's row at byte `row_off` + `row_soff` (uniform).

    Step s covers columns [s * qk_step, ...); the lane loads its `lane_cols` columns there.
    """
    m = p.mma
    soff = row_soff + s * m.qk_step * ELEM_BYTES
    v = _load16(rsrc, row_off, soff, p.elem_t)
    if m.lane_cols == 16:
        v = v.shuffle(_load16(rsrc, row_off, soff + 16, p.elem_t), list(range(16)))
    if m.op_elems == m.lane_cols:
        return [v]
    return [v.shuffle(v, list(range(j, j + m.op_elems))) for j in range(0, m.lane_cols, m.op_elems)]


def pipelined(n: int, window: int, issue: Callable, consume: Callable) -> None:
    """Issue item i + window's loads before consuming item i; a scheduling barrier per item keeps the
    compiler from hoisting every load of the step (which ran RDNA out of VGPRs)."""
    staged = {i: issue(i) for i in range(min(window, n))}
    for i in range(n):
        if i + window < n:
            staged[i + window] = issue(i + window)
        rocdl.sched_barrier(0)
        consume(i, staged.pop(i))


def q_source(p: Plan, q_rs: Any, q_row: Any) -> Callable:
    """Q^T operands by head-dim step: loaded once and kept in VGPRs, or (where they would crowd out
    the O^T accumulator) re-read per use, which hits L1."""
    if not p.q_regs:
        return lambda s: load_step(p, q_rs, q_row, 0, s)
    frags = [load_step(p, q_rs, q_row, 0, s) for s in range(p.qk_steps)]
    return lambda s: frags[s]


def k_tile_rsrc(p: Plan, k_step: Any, k_stride: Any, first: Any, n_keys: Any) -> Any:
    """Descriptor over the 16 K rows from key `first` of the step: rows at or past n_keys read 0.

    One descriptor per tile keeps every load offset a lane VGPR plus a small constant."""
    rows = n_keys - first
    nbytes = fx.arith.max((_i64(rows - 1) * _i64(k_stride) + p.d) * ELEM_BYTES, _i64(0))
    return buffer_rsrc(k_step + _i64(first) * _i64(k_stride), nbytes)


def score_phase(p: Plan, k_rsrcs: list, k_row: Any, q_src: Callable) -> list:
    """S^T tiles (16 keys x 16 query rows each) of this wave's keys in the current step."""
    items = [(t, s) for t in range(p.nsub) for s in range(p.qk_steps)]
    accs = [fx.Vector.filled(p.mma.acc_elems, 0.0, fx.Float32) for _ in range(p.nsub)]

    def issue(i: int) -> tuple:
        t, s = items[i]
        return load_step(p, k_rsrcs[t], k_row, 0, s), q_src(s)

    def consume(i: int, frags: tuple) -> None:
        t = items[i][0]
        for a, b in zip(*frags, strict=True):
            accs[t] = mma(p, a, b, accs[t])

    pipelined(len(items), p.window, issue, consume)
    return accs


class KvSource:
    """K/V of one (batch, KV head) and this wave's lane offsets (a plain record: kernel code calls the
    functions below with it, because FlyDSL's AST rewriter turns an object whose method is called in
    a loop into loop state)."""

    def __init__(self, p: Plan, k_head: Any, v_head: Any, k_stride: Any, v_stride: Any, seqlen_k: Any,
                 wave_key: Any, k_row: Any, tid: Any) -> None:
        self.p, self.k_head, self.v_head = p, k_head, v_head
        self.k_stride, self.v_stride, self.seqlen_k = k_stride, v_stride, seqlen_k
        self.wave_key, self.k_row, self.tid = wave_key, k_row, tid


def kv_rsrcs(kv: KvSource, step: Any, step_hi: Any) -> tuple:
    """(per-tile K descriptors of this wave, V descriptor) of `step`; empty past the last key and for
    steps at or past `step_hi` (the end of the split: a prefetch there must not read the next split)."""
    p = kv.p
    key0 = step * p.chunk
    n_keys = (step < step_hi).select(fx.arith.min(kv.seqlen_k - key0, p.chunk), fx.Int32(0))
    k_step = kv.k_head + _i64(key0) * _i64(kv.k_stride)
    k_rsrcs = [k_tile_rsrc(p, k_step, kv.k_stride, kv.wave_key + t * MMA_TILE, n_keys) for t in range(p.nsub)]
    v_bytes = fx.arith.max((_i64(n_keys - 1) * _i64(kv.v_stride) + p.d) * ELEM_BYTES, _i64(0))
    return k_rsrcs, buffer_rsrc(kv.v_head + _i64(key0) * _i64(kv.v_stride), v_bytes)


def kv_prefetch(kv: KvSource, step: Any, step_hi: Any) -> tuple:
    """All K fragments (raw 16-byte vectors, tile-major) and V staging loads of `step`, or two empty
    lists where the target does not prefetch.  A step past the split reads nothing (empty bounds)."""
    p = kv.p
    if not p.prefetch:
        return [], []
    k_rsrcs, v_rs = kv_rsrcs(kv, step, step_hi)
    k_raw = [_load16(k_rsrcs[t], kv.k_row, s * p.mma.qk_step * ELEM_BYTES, p.elem_t)
             for t in range(p.nsub) for s in range(p.qk_steps)]
    v_raw = [x for u in range(p.units) for x in stage_load(p, v_rs, kv.tid, kv.v_stride, u)]
    return k_raw, v_raw


def v_step_loads(kv: KvSource, v_rs: Any) -> list:
    """Without prefetch: the step's V staging loads issued ahead of the S phase (flat), where VGPRs
    allow (`v_early`), else an empty list (V is then loaded after the softmax)."""
    p = kv.p
    if not p.v_early:
        return []
    return [x for u in range(p.units) for x in stage_load(p, v_rs, kv.tid, kv.v_stride, u)]


def score_phase_loaded(p: Plan, k_raw: list, q_src: Callable) -> list:
    """S^T tiles from prefetched K fragments (CDNA: one 16-byte vector = two MFMA operands)."""
    accs = [fx.Vector.filled(p.mma.acc_elems, 0.0, fx.Float32) for _ in range(p.nsub)]
    for t in range(p.nsub):
        for s in range(p.qk_steps):
            v = k_raw[t * p.qk_steps + s]
            ops = [v.shuffle(v, list(range(j, j + p.mma.op_elems))) for j in range(0, p.mma.lane_cols, p.mma.op_elems)]
            for a, b in zip(ops, q_src(s), strict=True):
                accs[t] = mma(p, a, b, accs[t])
    return accs


def mask_scores(p: Plan, s: fx.Vector, key0: Any, limit: Any, grp: Any, scale2: Any) -> list:
    """Scale to base 2 and mask keys >= limit (the lane's query row bound) to -inf."""
    out = []
    for v in range(p.mma.acc_elems):
        key = key0 + p.mma.acc_row(v, grp)
        out.append((key < limit).select(fx.Float32(s[v]) * scale2, fx.Float32(NEG_INF)))
    return out


def p_operand(p: Plan, probs: list, grp: Any) -> fx.Vector:
    """P^T as the B operand of O^T += V^T P^T (its k-slots are the keys of S^T's accumulator)."""
    own = fx.Vector.from_elements(probs, fx.Float32).to(p.elem_t)
    if p.mma.family != "gfx11":
        return own
    # gfx11: a lane holds keys 2v + g of S^T but the B operand needs all 16 keys (both half-waves
    # alike): swap halves with lane l ^ 16 and interleave (slot 2v = group 0's key, 2v + 1 = group 1's).
    words = own.bitcast(fx.Int32)
    peer = fx.Vector.from_elements([fx.Int32(fx.gpu.shuffle_xor(words[i], 16, p.mma.wave)) for i in range(4)],
                                   fx.Int32).bitcast(p.elem_t)
    first = grp == 0
    lo = first.select(own, peer)
    hi = first.select(peer, own)
    return lo.shuffle(hi, [x for i in range(8) for x in (i, 8 + i)])


def vt_operand(p: Plan, lds: Any, d_row: Any, key: Any) -> fx.Vector:
    """V^T[d_row, key ...] from LDS: the A operand of O^T += V^T P^T (op_elems keys)."""
    words = p.mma.op_elems // 2
    ptr = fx.add_offset(lds.ptr, d_row * p.pitch_w + key // 2)
    return fx.Vector(fx.ptr_load(ptr, fx.T.vec(words, fx.T.i32))).bitcast(p.elem_t)


def _unit_base(p: Plan, tid: Any, u: int, v_stride: Any) -> tuple:
    """(run, 8-column group, lane byte offset in the step's V rows) of staging unit u.

    Consecutive lanes take consecutive runs of one column group: their transposed LDS writes land
    in consecutive words (no bank conflicts); each global load then reads 16 bytes per key row."""
    unit = tid + u * p.threads
    run, col8 = unit % p.n_runs, unit // p.n_runs
    return run, col8, (run * p.run * v_stride + col8 * STAGE_COLS) * ELEM_BYTES


def stage_load(p: Plan, v_rs: Any, tid: Any, v_stride: Any, u: int) -> list:
    """Staging unit u of this thread: `run` 16-byte loads (consecutive keys, 8 columns).

    A run may cross the step's last key: its rows past it must read 0 through the descriptor's bound. RDNA counts
    the SGPR offset in that check (offset + size > NUM_RECORDS - soffset), so there rows 1 .. run - 1 go in the
    SGPR offset (one VGPR per unit); GFX9/CDNA's ISA guides check only the instruction and VGPR offsets (raw
    buffer: out of range if inst_offset + vgpr_offset >= NUM_RECORDS), so there the whole row offset is in the
    VGPR offset (`row_in_voffset`), which is in range by either reading of the check."""
    base = _unit_base(p, tid, u, v_stride)[2]
    if p.row_in_voffset:
        return [_load16(v_rs, base + r * v_stride * ELEM_BYTES, 0, p.elem_t) for r in range(p.run)]
    return [_load16(v_rs, base, r * v_stride * ELEM_BYTES, p.elem_t) for r in range(p.run)]


def stage_store(p: Plan, lds: Any, raw: list, tid: Any, u: int) -> None:
    """Write staging unit u transposed: V^T[column, run keys], one LDS store per column."""
    words = p.run // 2
    run, col8, _ = _unit_base(p, tid, u, 0)
    for e in range(STAGE_COLS):
        vals = fx.Vector.from_elements([raw[r][e] for r in range(p.run)], p.elem_t).bitcast(fx.Int32)
        ptr = fx.add_offset(lds.ptr, (col8 * STAGE_COLS + e) * p.pitch_w + run * words)
        fx.ptr_store((vals[0] if words == 1 else vals).ir_value(), ptr)


def stage_v(p: Plan, lds: Any, v_rs: Any, tid: Any, v_stride: Any, loaded: list) -> None:
    """Stage this step's V tile into LDS as V^T; `loaded` holds its prefetched loads (flat, unit-major)."""
    if loaded:
        for u in range(p.units):
            stage_store(p, lds, loaded[u * p.run : (u + 1) * p.run], tid, u)
        return
    pipelined(p.units, p.stage_window, lambda u: stage_load(p, v_rs, tid, v_stride, u),
              lambda u, raw: stage_store(p, lds, raw, tid, u))


def online_update(p: Plan, tiles: list, m_run: Any, l_run: Any, oacc: list) -> tuple:
    """Online softmax over this step's masked base-2 scores (`tiles`: per 16-key tile, a list)."""
    flat = [x for t in tiles for x in t]
    m_new = _fmax(m_run, _xlane_max(p.mma, tree(flat, _fmax)))
    alpha = _exp2(m_run - m_new)
    probs = [[_exp2(x - m_new) for x in t] for t in tiles]
    l_new = l_run * alpha + tree([x for t in probs for x in t])
    return m_new, l_new, [o * alpha for o in oacc], probs


def pv_phase(p: Plan, lds: Any, p_ops: list, oacc: list, lane16: Any, grp: Any, wave_key: Any) -> list:
    """O^T += V^T P^T over this wave's 16-key tiles (V^T operands read from LDS a few ahead)."""
    items = [(t, db) for t in range(p.nsub) for db in range(p.d_blocks)]
    out = list(oacc)

    def issue(i: int) -> fx.Vector:
        t, db = items[i]
        return vt_operand(p, lds, db * MMA_TILE + lane16, wave_key + t * MMA_TILE + p.mma.pv_key(grp))

    def consume(i: int, a: fx.Vector) -> None:
        t, db = items[i]
        out[db] = mma(p, a, p_ops[t], out[db])

    pipelined(len(items), p.pv_window, issue, consume)
    return out


def finish(p: Plan, ws_o: Any, ws_l: Any, lane16: Any, grp: Any, m_run: Any, l_run: Any, oacc: list,
           slots: Any) -> None:
    """Write this wave's partial: O rows normalised by their sum, and the base-2 LSE."""
    l_tot = _xlane_sum(p.mma, l_run)
    has = l_tot > 0.0
    inv = has.select(1.0 / l_tot, fx.Float32(0.0))
    lse2 = has.select(m_run + _log2(l_tot), fx.Float32(NEG_INF))
    row_off = lane16 * slots * (p.d * 4)
    m = p.mma
    for db in range(p.d_blocks):
        vals = [fx.Float32(oacc[db][v]) * inv for v in range(m.acc_elems)]
        if m.family == "gfx11":  # rows 2v + g: not contiguous
            for v in range(m.acc_elems):
                _store_f32(ws_o, row_off + (db * MMA_TILE + m.acc_row(v, grp)) * 4, [vals[v]])
        else:
            _store_f32(ws_o, row_off + (db * MMA_TILE + m.acc_row(0, grp)) * 4, vals)
    # Every lane of the row's groups writes the same value (no predicate needed).
    _store_f32(ws_l, lane16 * slots * 4, [lse2])


def merge_lse(rs: Any, s: Any, slots: Any) -> fx.Float32:
    """Partial LSE of slot s (base 2), -inf past the last slot."""
    x = fx.Float32(rocdl.raw_ptr_buffer_load(fx.T.f32, rs, s * 4, 0))
    return (s < slots).select(x, fx.Float32(NEG_INF))


def merge_step(o_rs: Any, lse_rs: Any, s0: Any, slots: Any, ref: Any, col: Any, acc: Any, wsum: Any, d: int,
               e: int) -> tuple:
    """Fold slots s0 .. s0 + MERGE_UNROLL - 1 into (acc, wsum), in slot order."""
    ty = fx.T.f32 if e == 1 else fx.T.vec(e, fx.T.f32)
    ws_ = [_exp2(merge_lse(lse_rs, s0 + u, slots) - ref) for u in range(MERGE_UNROLL)]
    os_ = [rocdl.raw_ptr_buffer_load(ty, o_rs, ((s0 + u) * d + col) * 4, 0) for u in range(MERGE_UNROLL)]
    for u in range(MERGE_UNROLL):
        o_u = fx.Vector.from_elements([fx.Float32(os_[u])], fx.Float32) if e == 1 else fx.Vector(os_[u])
        acc = fx.math.fma(fx.Vector.filled(e, 0.0, fx.Float32) + ws_[u], o_u, acc)
        wsum = wsum + ws_[u]
    return acc, wsum


def store_row(rs: Any, byte_off: Any, out: fx.Vector, out_t: type) -> None:
    """Round the f32 columns once to `out_t` and store them (2, 4 or 8 bytes)."""
    e = len(out)
    vals = out.to(out_t)
    if e == 1:
        data = vals.bitcast(fx.Int16)[0]
    elif e == 2:
        data = vals.bitcast(fx.Int32)[0]
    else:
        data = vals.bitcast(fx.Int32)
    rocdl.raw_ptr_buffer_store(data.ir_value(), rs, fx.Int32(byte_off).ir_value(), fx.Int32(0).ir_value())


# ---------------------------------------------------------------------------------------------
# The launcher
# ---------------------------------------------------------------------------------------------


def _build(knobs: dict, m: Mma) -> Callable:
    """The @flyc.jit launcher for one knob row on a target with MMA layout `m`."""
    p = Plan(knobs, m)
    d, chunk, tile_m, wm, wn, kpw = p.d, p.chunk, p.tile_m, p.wm, p.wn, p.kpw
    out_t = p.elem_t
    merge_e = d // MERGE_THREADS  # head-dim columns per merge thread

    @flyc.kernel(name="sdpa_decode_split")
    def sdpa_decode_split(
        q: fx.Pointer, k: fx.Pointer, v: fx.Pointer, ws: fx.Pointer,
        batch: fx.Int32, seqlen_q: fx.Int32, seqlen_k: fx.Int32,
        heads_q: fx.Int32, heads_kv: fx.Int32, num_splits: fx.Int32,
        q_stride_b: fx.Int32, q_stride_s: fx.Int32, q_stride_h: fx.Int32,
        k_stride_b: fx.Int32, k_stride_s: fx.Int32, k_stride_h: fx.Int32,
        v_stride_b: fx.Int32, v_stride_s: fx.Int32, v_stride_h: fx.Int32,
        softmax_scale: fx.Float32,
    ):
        check_wave(m.wave, "sdpa_decode_split")
        lds = fx.SharedAllocator().allocate(fx.Array[fx.Int32, d * p.pitch_w, 16]).peek()
        tid = fx.thread_idx.x
        lane = tid % m.wave
        lane16 = lane % MMA_TILE
        grp = lane // MMA_TILE
        # The wave index is uniform: readfirstlane keeps everything derived from it in SGPRs.
        wave_id = fx.Int32(rocdl.readfirstlane(fx.T.i32, fx.Int32(tid // m.wave).ir_value()))
        wm_idx = wave_id % wm
        wn_idx = wave_id // wm
        split = fx.block_idx.x
        bh = fx.block_idx.y
        b = bh // heads_kv
        kvh = bh % heads_kv
        group = heads_q // heads_kv
        m_total = group * seqlen_q
        slots = num_splits * wn
        # This wave's 16 packed rows; the lane's row is clamped so its Q loads stay in bounds.
        r0 = fx.block_idx.z * tile_m + wm_idx * MMA_TILE
        r = fx.arith.min(r0 + lane16, m_total - 1)
        h_local = r // seqlen_q
        qpos = r - h_local * seqlen_q
        head = kvh * group + h_local
        limit = seqlen_k
        if fx.const_expr(p.causal):
            limit = seqlen_k - seqlen_q + qpos + 1
        scale2 = softmax_scale * LOG2E

        q_rs = buffer_rsrc(q + _i64(b) * _i64(q_stride_b), UNBOUNDED)
        q_row = (qpos * q_stride_s + head * q_stride_h + m.lane_col(grp)) * ELEM_BYTES
        q_src = q_source(p, q_rs, q_row)
        k_head = k + (_i64(b) * _i64(k_stride_b) + _i64(kvh) * _i64(k_stride_h))
        v_head = v + (_i64(b) * _i64(v_stride_b) + _i64(kvh) * _i64(v_stride_h))
        k_row = (lane16 * k_stride_s + m.lane_col(grp)) * ELEM_BYTES
        wave_key = wn_idx * kpw

        # Split s covers steps [s * per_split, ...) of the key axis.
        n_steps = (seqlen_k + (chunk - 1)) // chunk
        per_split = (n_steps + num_splits - 1) // num_splits
        step_lo = fx.arith.min(split * per_split, n_steps)
        step_hi = fx.arith.min(step_lo + per_split, n_steps)

        m_run = fx.Float32(NEG_INIT)
        l_run = fx.Float32(0.0)
        oacc = [fx.Vector.filled(m.acc_elems, 0.0, fx.Float32) for _db in fx.range_constexpr(p.d_blocks)]
        kv = KvSource(p, k_head, v_head, k_stride_s, v_stride_s, seqlen_k, wave_key, k_row, tid)
        k_cur, v_cur = kv_prefetch(kv, step_lo, step_hi)
        for step in range(step_lo, step_hi):
            k_rsrcs, v_rs = kv_rsrcs(kv, step, step_hi)
            if fx.const_expr(p.prefetch):
                s_tiles = score_phase_loaded(p, k_cur, q_src)
            else:
                v_cur = v_step_loads(kv, v_rs)
                s_tiles = score_phase(p, k_rsrcs, k_row, q_src)
            rocdl.sched_barrier(0)
            tiles = [mask_scores(p, s_tiles[t], step * chunk + wave_key + t * MMA_TILE, limit, grp, scale2)
                     for t in fx.range_constexpr(p.nsub)]
            m_run, l_run, oacc, probs = online_update(p, tiles, m_run, l_run, oacc)
            p_ops = [p_operand(p, pr, grp) for pr in probs]
            stage_v(p, lds, v_rs, tid, v_stride_s, v_cur)
            fx.gpu.barrier()
            k_cur, v_cur = kv_prefetch(kv, step + 1, step_hi)
            oacc = pv_phase(p, lds, p_ops, oacc, lane16, grp, wave_key)
            fx.gpu.barrier()

        # Partial slot of this wave: split * waves_n + wn_idx; rows past m_total are dropped by the bounds.
        slot = split * wn + wn_idx
        row0 = bh * m_total + r0
        n_rows = fx.arith.max(fx.arith.min(m_total - r0, MMA_TILE), 0)
        ws_o = buffer_rsrc(ws + (_i64(row0) * _i64(slots) + _i64(slot)) * d,
                     fx.arith.max(_i64(n_rows - 1) * _i64(slots) * (d * 4) + d * 4, _i64(0)))
        # LSE partials follow the O partials: [rows = batch * heads_q * seqlen_q][slots] f32.
        lse_region = _i64(batch) * _i64(heads_q) * _i64(seqlen_q) * _i64(slots) * d
        ws_l = buffer_rsrc(ws + (lse_region + _i64(row0) * _i64(slots) + _i64(slot)),
                     fx.arith.max(_i64(n_rows - 1) * _i64(slots) * 4 + 4, _i64(0)))
        finish(p, ws_o, ws_l, lane16, grp, m_run, l_run, oacc, slots)

    @flyc.kernel(name="sdpa_decode_merge")
    def sdpa_decode_merge(
        ws: fx.Pointer,
        o: fx.Pointer,
        lse: fx.Pointer,
        batch: fx.Int32,
        seqlen_q: fx.Int32,
        heads_q: fx.Int32,
        num_splits: fx.Int32,
        o_stride_b: fx.Int32,
        o_stride_s: fx.Int32,
        o_stride_h: fx.Int32,
        return_lse: fx.Int32,
    ):
        row = fx.block_idx.x  # (b * heads_q + head) * seqlen_q + qpos
        tid = fx.thread_idx.x
        slots = num_splits * wn
        rows = batch * heads_q * seqlen_q
        qpos = row % seqlen_q
        bh = row // seqlen_q
        head = bh % heads_q
        b = bh // heads_q
        lse_rs = buffer_rsrc(ws + (_i64(rows) * _i64(slots) * d + _i64(row) * _i64(slots)), _i64(slots) * 4)
        o_rs = buffer_rsrc(ws + _i64(row) * _i64(slots) * d, _i64(slots) * (d * 4))
        col = tid * merge_e
        # Pass 1: the largest partial LSE (every thread, same order); pass 2: weighted sum.
        mx = fx.Float32(NEG_INF)
        for s in range(0, slots, MERGE_UNROLL):
            mx = _fmax(mx, tree([merge_lse(lse_rs, s + u, slots) for u in fx.range_constexpr(MERGE_UNROLL)], _fmax))
        ref = (mx == NEG_INF).select(fx.Float32(0.0), mx)
        acc = fx.Vector.filled(merge_e, 0.0, fx.Float32)
        wsum = fx.Float32(0.0)
        for s in range(0, slots, MERGE_UNROLL):
            acc, wsum = merge_step(o_rs, lse_rs, s, slots, ref, col, acc, wsum, d, merge_e)
        has = wsum > 0.0
        out = acc * has.select(1.0 / wsum, fx.Float32(0.0))
        o_row = o + (_i64(b) * _i64(o_stride_b) + _i64(qpos) * _i64(o_stride_s) + _i64(head) * _i64(o_stride_h))
        store_row(buffer_rsrc(o_row, d * ELEM_BYTES), col * ELEM_BYTES, out, out_t)
        # LSE (natural log) only when asked: otherwise the descriptor is empty and the store vanishes.
        lse_rs_out = buffer_rsrc(lse, (return_lse != 0).select(_i64(rows) * 4, _i64(0)))
        lse_val = has.select((ref + _log2(wsum)) * LN2, fx.Float32(NEG_INF))
        _store_f32(lse_rs_out, row * 4, [lse_val])

    @flyc.jit
    def launch(
        q: fx.Tensor, k: fx.Tensor, v: fx.Tensor, o: fx.Tensor, lse: fx.Tensor, workspace: fx.Tensor,
        batch: fx.Int32, seqlen_q: fx.Int32, seqlen_k: fx.Int32,
        heads_q: fx.Int32, heads_kv: fx.Int32, num_splits: fx.Int32,
        q_stride_b: fx.Int32, q_stride_s: fx.Int32, q_stride_h: fx.Int32,
        k_stride_b: fx.Int32, k_stride_s: fx.Int32, k_stride_h: fx.Int32,
        v_stride_b: fx.Int32, v_stride_s: fx.Int32, v_stride_h: fx.Int32,
        o_stride_b: fx.Int32, o_stride_s: fx.Int32, o_stride_h: fx.Int32,
        softmax_scale: fx.Float32, return_lse: fx.Int32, stream: fx.Stream = NULL_STREAM,
    ):
        m_total = (heads_q // heads_kv) * seqlen_q
        sdpa_decode_split(
            fx.get_iter(q), fx.get_iter(k), fx.get_iter(v), fx.get_iter(workspace),
            batch, seqlen_q, seqlen_k, heads_q, heads_kv, num_splits,
            q_stride_b, q_stride_s, q_stride_h, k_stride_b, k_stride_s, k_stride_h,
            v_stride_b, v_stride_s, v_stride_h, softmax_scale,
        ).launch(grid=(num_splits, batch * heads_kv, (m_total + (tile_m - 1)) // tile_m), block=(p.threads, 1, 1),
                 stream=stream)  # fmt: skip
        sdpa_decode_merge(
            fx.get_iter(workspace), fx.get_iter(o), fx.get_iter(lse),
            batch, seqlen_q, heads_q, num_splits, o_stride_b, o_stride_s, o_stride_h, return_lse,
        ).launch(grid=(batch * heads_q * seqlen_q, 1, 1), block=(MERGE_THREADS, 1, 1), stream=stream)  # fmt: skip

    return launch


def launcher_and_args(knobs: dict) -> tuple[Callable, tuple]:
    """Return a @flyc.jit launcher and CPU torch args.

    Calling launcher(*args) under COMPILE_ONLY traces and compiles one object holding both kernels;
    the trace sizes are not part of it: batch, both sequence lengths, both head counts, every stride,
    the scale, the split count and return_lse are kernel arguments.
    """
    check_row(knobs)
    launcher = _build(knobs, mma_for(target_arch()))
    t = _TRACE
    dt, d = TORCH_TYPES[knobs["dtype"]], knobs["head_dim"]
    q = torch.zeros(t["batch"], t["seqlen_q"], t["heads_q"], d, dtype=dt)
    k = torch.zeros(t["batch"], t["seqlen_k"], t["heads_kv"], d, dtype=dt)
    v = torch.zeros_like(k)
    o = torch.empty_like(q)
    lse = torch.empty(t["batch"], t["heads_q"], t["seqlen_q"], dtype=torch.float32)
    slots = t["num_splits"] * waves_n(knobs["tile_m"], knobs["chunk"], mma_for(target_arch()).wave)
    rows = t["batch"] * t["heads_q"] * t["seqlen_q"]
    workspace = torch.empty(rows * slots * (d + 1), dtype=torch.float32)
    args = (
        q, k, v, o, lse, workspace,
        t["batch"], t["seqlen_q"], t["seqlen_k"], t["heads_q"], t["heads_kv"], t["num_splits"],
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        d**-0.5, 1,
    )  # fmt: skip
    return launcher, args
