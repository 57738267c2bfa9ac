"""Knob contract of the `sdpa_cdna` and `sdpa_cdna_dualwave` ops (attention forward, CDNA MFMA).

Pure Python on purpose: the farm imports this at expansion time, before any GPU toolchain is
loaded, so nothing here may import torch or flydsl.  `make_plan` is the one place the tile
geometry (waves, MFMA shape, load mapping, LDS layout) is derived, so the checker and the kernel
builder never disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.knobs import check_choice, check_keys

DTYPES: tuple[str, ...] = ("bf16", "f16")
ELEM_BYTES = 2

# Head-dim buckets (QK head dim == V head dim).  An object compiled for bucket B serves every
# run-time head_dim in (previous bucket, B] (any multiple of 8 <= B is computed correctly; the
# dispatcher picks the smallest bucket >= head_dim).  Loads past head_dim read zeros, stores past
# head_dim are dropped.
HEAD_BUCKETS: tuple[int, ...] = (64, 96, 128, 160, 192, 256)
# Unequal (QK, V) head-dim pairs: DeepSeek MLA prefill (192 = 128 nope + 64 rope; V 128).
SPLIT_HEADS: tuple[tuple[int, int], ...] = ((192, 128),)

SCHEDULES: tuple[str, ...] = ("single", "dualwave")
# LDS budget a schedule's objects must fit: `single` is built for gfx90a/gfx942 (64 KiB) as well
# as gfx950; `dualwave` only for gfx950 (160 KiB).
LDS_LIMIT = {"single": 65536, "dualwave": 163840}

WAVE = 64          # CDNA is wave64 only
VEC_ELEMS = 8      # one global access moves 16 bytes = 8 elements
# LDS row padding in elements.  K rows: MFMA operand reads are 8 bytes (gfx90a/gfx942) or
# 16 bytes (gfx950); a pad of one read keeps a 16-lane (8-lane) read phase on distinct banks.
# V is stored transposed (V^T[d][n]) and read 8 bytes at a time.  The plan reserves the larger pad.
K_PAD_MAX = 8
V_PAD = 4

_TILE_RE = re.compile(r"^m(\d+)n(\d+)w(\d+)$")


@dataclass(frozen=True)
class Plan:
    """Compile-time geometry of one object (every size here is baked; nothing run-time is)."""

    dtype: str
    hd: int            # QK head-dim bucket
    hdv: int           # V / O head-dim bucket
    causal: bool
    schedule: str      # single: one wave per row tile; dualwave: two waves split each KV block
    block_m: int       # query rows per workgroup
    block_n: int       # keys staged in LDS per iteration (for the whole workgroup)
    waves: int
    mn: int            # MFMA M = N (32: 32x32 instructions, 16: 16x16) = query rows per row tile
    split: int         # waves sharing one row tile (1 or 2)
    wave_n: int        # keys each wave consumes per iteration = block_n // split
    threads: int
    k_loads: int       # 16-byte K loads per thread per iteration
    v_rows: int        # V rows one thread transposes at once (4, 2 or 1)
    v_units: int       # (v_rows x 8)-element V blocks per thread per iteration
    k_pitch: int       # K row pitch in LDS (elements), worst-case pad
    v_pitch: int       # V^T row pitch in LDS (elements)
    lds_kv_bytes: int
    merge_bytes: int   # dualwave: partial (O, m, l) of the second wave of each pair, 16 B per lane-quad
    lds_bytes: int


def parse_tile(tile: str) -> tuple[int, int, int]:
    """'m128n64w4' -> (block_m, block_n, waves)."""
    match = _TILE_RE.match(tile) if isinstance(tile, str) else None
    if not match:
        raise ValueError(f"knob tile={tile!r} is not of the form 'm<BLOCK_M>n<BLOCK_N>w<WAVES>' (e.g. 'm128n64w4')")
    return int(match[1]), int(match[2]), int(match[3])


def _v_split(block_n: int, hdv: int, threads: int) -> tuple[int, int]:
    """Rows per V transpose unit and units per thread: the largest unit that spreads evenly."""
    for rows in (4, 2, 1):
        units = block_n // rows * (hdv // VEC_ELEMS)
        if block_n % rows == 0 and units % threads == 0 and units >= threads:
            return rows, units // threads
    raise ValueError(
        f"knob tile: BLOCK_N={block_n} x head_dim_v={hdv} does not split into whole 8-element V loads over "
        f"{threads} threads; use a BLOCK_N or wave count that divides it"
    )


def make_plan(knobs: dict) -> Plan:
    """The geometry of a validated row (raises ValueError like check_row)."""
    check_knob_values(knobs)
    dtype, hd = knobs["dtype"], knobs["head_dim"]
    hdv = knobs.get("head_dim_v", hd)
    schedule = knobs.get("schedule", "single")
    block_m, block_n, waves = parse_tile(knobs["tile"])
    split = 2 if schedule == "dualwave" else 1
    where = f"knob tile={knobs['tile']!r} (schedule {schedule})"
    if waves not in (2, 4, 8):
        raise ValueError(f"{where}: {waves} waves; accepted 2, 4 or 8")
    if waves % split:
        raise ValueError(f"{where}: the dualwave schedule pairs waves, so the wave count must be even")
    row_tiles = waves // split
    if block_m % row_tiles or block_m // row_tiles not in (16, 32):
        raise ValueError(f"{where}: BLOCK_M / row tiles = {block_m}/{row_tiles} must be 16 or 32 query rows "
                         "(the 16x16 or 32x32 MFMA)")
    mn = block_m // row_tiles
    if block_n % split or (block_n // split) % 32:
        raise ValueError(f"{where}: each wave's share of BLOCK_N ({block_n}/{split}) must be a multiple of 32")
    threads = waves * WAVE
    k_chunks = block_n * hd // VEC_ELEMS
    if k_chunks % threads or k_chunks < threads:
        raise ValueError(f"{where}: BLOCK_N x head_dim = {block_n}x{hd} does not split into whole 16-byte K loads "
                         f"over {threads} threads")
    v_rows, v_units = _v_split(block_n, hdv, threads)
    k_pitch = hd + K_PAD_MAX
    v_pitch = block_n + V_PAD
    lds_kv = (block_n * k_pitch + hdv * v_pitch) * ELEM_BYTES
    # The merge buffer aliases the K/V region after the last iteration.
    merge = (row_tiles * WAVE * (hdv * mn // WAVE + 4) * 4) if split == 2 else 0
    lds = max(lds_kv, merge)
    if lds > LDS_LIMIT[schedule]:
        raise ValueError(f"{where} with head_dim {hd}/{hdv} needs {lds} bytes of LDS; the {schedule} schedule's "
                         f"targets allow {LDS_LIMIT[schedule]}: use a smaller BLOCK_N")
    return Plan(dtype=dtype, hd=hd, hdv=hdv, causal=bool(knobs["causal"]), schedule=schedule, block_m=block_m,
                block_n=block_n, waves=waves, mn=mn, split=split, wave_n=block_n // split, threads=threads,
                k_loads=k_chunks // threads, v_rows=v_rows, v_units=v_units, k_pitch=k_pitch, v_pitch=v_pitch,
                lds_kv_bytes=lds_kv, merge_bytes=merge, lds_bytes=lds)


def check_knob_values(knobs: dict) -> None:
    """Every knob present, of the right type and in its accepted set (geometry checked by make_plan)."""
    check_keys("sdpa_cdna", knobs, ("dtype", "head_dim", "causal", "tile"), ("head_dim_v", "schedule"))
    check_choice("dtype", knobs["dtype"], DTYPES)
    check_choice("schedule", knobs.get("schedule", "single"), SCHEDULES)
    if knobs["causal"] not in (0, 1) or isinstance(knobs["causal"], float):
        raise ValueError(f"knob causal={knobs['causal']!r}; accepted: 0 or 1")
    hd = knobs["head_dim"]
    hdv = knobs.get("head_dim_v", hd)  # absent: V head dim == QK head dim
    for name, value in (("head_dim", hd), ("head_dim_v", hdv)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"knob {name}={value!r} must be an int")
    if not ((hd == hdv and hd in HEAD_BUCKETS) or (hd, hdv) in SPLIT_HEADS):
        raise ValueError(
            f"knobs head_dim={hd}, head_dim_v={hdv}: no object serves this pair; accepted: equal buckets "
            f"{list(HEAD_BUCKETS)} (each serves run-time head dims up to it) or (QK, V) pairs {list(SPLIT_HEADS)}"
        )
    parse_tile(knobs["tile"])


def check_row(knobs: dict) -> None:
    """Raise ValueError if the kernel cannot serve this knob row."""
    make_plan(knobs)


def bucket_for(head_dim: int) -> int:
    """The bucket object a dispatcher picks for a run-time head_dim (equal QK/V head dims)."""
    for bucket in HEAD_BUCKETS:
        if head_dim <= bucket:
            return bucket
    raise ValueError(f"head_dim={head_dim} exceeds the largest bucket {HEAD_BUCKETS[-1]}")
