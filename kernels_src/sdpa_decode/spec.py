"""Knob contract of the split-KV attention decode family (ops `sdpa_cdna_decode`, `sdpa_rdna_decode`).

Pure Python on purpose: the farm imports this at expansion time, before any GPU
toolchain is loaded, so nothing here may import torch or flydsl.  The plan the
kernel builder needs (waves, V staging shape, LDS bytes) is computed here too, so
the spec check and the kernel can never disagree.

Knobs (all compile time; every size, stride, the scale and the split count are run time):
    dtype     bf16 | f16          Q, K, V, O element type (accumulation is f32)
    head_dim  64 | 128 | 256      D of Q, K, V and O
    mask      none | causal       causal = bottom-right aligned (query i sees keys <= seqlen_k - seqlen_q + i)
    chunk     32 | 64 | 128       keys a workgroup stages per loop step (the split granularity)
    tile_m    16 | 32 | 64        packed query rows per program: (query head in the GQA group, query
                                  position) pairs; 16 rows per wave along M
"""

from __future__ import annotations

from common.knobs import check_choice, check_keys

DTYPES: tuple[str, ...] = ("bf16", "f16")
HEAD_DIMS: tuple[int, ...] = (64, 128, 256)
MASKS: tuple[str, ...] = ("none", "causal")
CHUNKS: tuple[int, ...] = (32, 64, 128)
TILES_M: tuple[int, ...] = (16, 32, 64)
KNOBS: tuple[str, ...] = ("dtype", "head_dim", "mask", "chunk", "tile_m")

ELEM_BYTES = 2
# Wave sizes of the targets (CDNA wave64, RDNA wave32); the plan depends on it.
WAVE_SIZES: tuple[int, ...] = (64, 32)
# One MMA tile is 16 x 16 on every target (MFMA 16x16x16 on CDNA, WMMA 16x16x16 on RDNA).
MMA_TILE = 16
# At most this many threads per workgroup: 4 waves on wave64 (CDNA), 8 on wave32 (RDNA).
MAX_THREADS = 256
# V^T rows in LDS are padded by this many keys (16 bytes: rows stay 16-byte aligned).
LDS_PAD_KEYS = 8
# The LDS every target offers at least (gfx950 has more; the spec stays target-independent).
LDS_LIMIT = 65536
# V staging: one thread moves `run` consecutive keys x 8 head-dim columns (eight 16-byte loads
# at most) and writes them transposed; the largest run that gives every thread whole units.
STAGE_COLS = 8
STAGE_RUNS: tuple[int, ...] = (8, 4, 2)
# Threads of the merge kernel (whole waves on wave32 and wave64).
MERGE_THREADS = 64


def waves_m(tile_m: int) -> int:
    """Waves along M (one 16-row MMA tile each)."""
    return tile_m // MMA_TILE


def waves_n(tile_m: int, chunk: int, wave: int) -> int:
    """Waves along the key axis: each takes chunk / waves_n keys of every staged chunk, and writes
    its own partial (so a split has waves_n partial slots)."""
    return max(1, min(MAX_THREADS // wave // waves_m(tile_m), chunk // MMA_TILE))


def num_waves(tile_m: int, chunk: int, wave: int) -> int:
    return waves_m(tile_m) * waves_n(tile_m, chunk, wave)


def lds_bytes(head_dim: int, chunk: int) -> int:
    """LDS of the split kernel: the V^T tile, D rows of (chunk + pad) keys."""
    return head_dim * (chunk + LDS_PAD_KEYS) * ELEM_BYTES


def stage_plan(head_dim: int, chunk: int, threads: int) -> tuple[int, int] | None:
    """(run keys, units per thread) for staging V^T, or None when no run length fits."""
    for run in STAGE_RUNS:
        if run > chunk:
            continue
        units = (chunk // run) * (head_dim // STAGE_COLS)
        if units % threads == 0:
            return run, units // threads
    return None


def check_row(knobs: dict) -> None:
    """Raise ValueError if the kernel cannot serve this knob row."""
    check_keys("sdpa_decode", knobs, KNOBS)
    for name, values in (("dtype", DTYPES), ("head_dim", HEAD_DIMS), ("mask", MASKS),
                         ("chunk", CHUNKS), ("tile_m", TILES_M)):
        check_choice(name, knobs[name], values)
    head_dim, chunk, tile_m = knobs["head_dim"], knobs["chunk"], knobs["tile_m"]
    for wave in WAVE_SIZES:
        wn = waves_n(tile_m, chunk, wave)
        if chunk % (wn * MMA_TILE):
            raise ValueError(f"knob chunk={chunk} does not split into {wn} waves x {MMA_TILE}-key MMA tiles "
                             f"(tile_m={tile_m}, wave{wave}); use a chunk that is a multiple of {wn * MMA_TILE}")
    need = lds_bytes(head_dim, chunk)
    if need > LDS_LIMIT:
        fits = [c for c in CHUNKS if lds_bytes(head_dim, c) <= LDS_LIMIT]
        raise ValueError(f"knob chunk={chunk} with head_dim={head_dim} needs {need} bytes of LDS for the V^T tile "
                         f"(limit {LDS_LIMIT}); accepted chunks for this head_dim: {fits}")
    for wave in WAVE_SIZES:
        threads = num_waves(tile_m, chunk, wave) * wave
        if stage_plan(head_dim, chunk, threads) is None:
            raise ValueError(f"knob chunk={chunk} with head_dim={head_dim}, tile_m={tile_m}: the V tile does not "
                             f"split into whole staging units for {threads} threads; use another chunk")
