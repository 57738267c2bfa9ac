"""Knob contract and tile plans of the RDNA attention-forward ops `sdpa_rdna` and `sdpa_rdna4`.

Pure Python on purpose: the farm imports this at expansion time, before any GPU toolchain is
loaded, so nothing here may import torch or flydsl.  The plan (waves, key block, LDS layout)
lives here too, so the kernel builder and the knob checks never disagree.

Knobs (both ops):
    dtype        bf16 | f16            Q, K, V and O element type (accumulation is f32)
    head_dim     D > 0: baked head dim (a multiple of 16, at most 256);
                 0: generic tier, the head dim is read at run time (a multiple of 8 up to head_dim_max)
    head_dim_max 0 with a baked head_dim; the generic tier's bound otherwise
    mask         none | causal         causal is bottom-right aligned (query i sees keys <= i + Sk - Sq)
    bias         none | qdtype | f32   optional additive bias [B, Hq, Sq, Sk] broadcast by run-time strides
"""

from __future__ import annotations

from dataclasses import dataclass

from common.knobs import check_choice, check_int, check_keys

DTYPES: tuple[str, ...] = ("bf16", "f16")
MASKS: tuple[str, ...] = ("none", "causal")
BIASES: tuple[str, ...] = ("none", "qdtype", "f32")
ELEM_BYTES = 2  # Q/K/V/O are 16-bit

# WMMA 16x16x16: head dims of baked objects are whole 16-wide K steps.
WMMA = 16
BAKED_QUANTUM = WMMA
# Generic tiers read the head dim at run time; 16-byte (8-element) accesses stay whole.
GENERIC_QUANTUM = 8
MAX_HEAD_DIM = 256
# Generic tiers per op: the bound is the compile-time tile width (unused columns are zero-filled).
GENERIC_TIERS: dict[str, tuple[int, ...]] = {"sdpa_rdna": (64, 128, 256), "sdpa_rdna4": (128, 256)}
OPS: tuple[str, ...] = ("sdpa_rdna", "sdpa_rdna4")
# Which RDNA generations each op is built for (gfx11 = RDNA3/3.5, gfx12 = RDNA4).
OP_ARCHES: dict[str, tuple[str, ...]] = {"sdpa_rdna": ("gfx11", "gfx12"), "sdpa_rdna4": ("gfx12",)}

WAVE = 32
LDS_BYTES = 65536
# Row padding (elements) of every LDS tile: 16 bytes, keeps rows 16-byte aligned and staggers banks.
LDS_PAD = 8
KNOBS: tuple[str, ...] = ("dtype", "head_dim", "head_dim_max", "mask", "bias")


@dataclass(frozen=True)
class Plan:
    """Everything about an object that is fixed at compile time."""

    op: str
    arch: str  # gfx11 | gfx12
    dtype: str
    head_dim: int  # baked D, or 0 (run time)
    d_tile: int  # columns the kernel covers: D, or the generic bound
    causal: bool
    bias: str
    waves: int  # waves per workgroup; each wave owns 16 query rows
    block_n: int  # keys per KV block
    q_in_lds: bool  # Q operand re-read from LDS every block (else held in registers)
    stages: int  # LDS K/V buffers: 1 = load-then-compute, 2 = prefetch next block while computing

    @property
    def threads(self) -> int:
        return self.waves * WAVE

    @property
    def block_m(self) -> int:
        return self.waves * WMMA

    @property
    def k_pitch(self) -> int:  # K tile row pitch in elements ([key][d])
        return self.d_tile + LDS_PAD

    @property
    def vt_pitch(self) -> int:  # V^T tile row pitch in elements ([d][key])
        return self.block_n + LDS_PAD

    @property
    def q_pitch(self) -> int:
        return self.d_tile + LDS_PAD

    @property
    def stage_bytes(self) -> int:
        return (self.block_n * self.k_pitch + self.d_tile * self.vt_pitch) * ELEM_BYTES

    @property
    def q_bytes(self) -> int:
        return self.block_m * self.q_pitch * ELEM_BYTES if self.q_in_lds else 0

    @property
    def lds_bytes(self) -> int:
        return self.stages * self.stage_bytes + self.q_bytes

    @property
    def v_rows(self) -> int:
        """Keys per V staging unit: each unit writes `v_rows` keys of 8 head-dim rows of V^T."""
        for rows in (4, 2):
            if (self.block_n // rows) * (self.d_tile // 8) % self.threads == 0:
                return rows
        return 1


def make_plan(op: str, arch: str, knobs: dict) -> Plan:
    """The compile-time plan of a (checked) knob row for one RDNA generation."""
    d_tile = knobs["head_dim"] or knobs["head_dim_max"]
    common = dict(op=op, arch=arch, dtype=knobs["dtype"], head_dim=knobs["head_dim"], d_tile=d_tile,
                  causal=knobs["mask"] == "causal", bias=knobs["bias"])
    if op == "sdpa_rdna":
        # 4 waves x 16 queries, 32-key blocks (64-key blocks double S, P and the bias registers and
        # spill).  Q is held in registers only while that is cheap (RDNA3 replicates
        # every operand across both lane halves: 16 elements per lane per 16 columns); otherwise the
        # Q tile is staged in LDS once and re-read per block.  Wide heads (O alone is D/2 VGPRs per
        # lane at D=256) take 16-key blocks so S, the staging registers and the bias stay small.
        q_in_lds = d_tile > 128 or (arch == "gfx11" and d_tile > 64)
        return Plan(**common, waves=4, block_n=32 if d_tile <= 128 else 16, q_in_lds=q_in_lds, stages=1)
    # sdpa_rdna4: 8 waves x 16 queries, Q in registers (RDNA4's 8-element operands make that
    # affordable at D=256), K/V double-buffered in LDS with the next block prefetched in registers.
    return Plan(**common, waves=8, block_n=32 if d_tile <= 128 else 16, q_in_lds=False, stages=2)


def check_row_for(op: str, knobs: dict) -> None:
    """Raise ValueError if op `op` cannot serve this knob row."""
    check_keys(op, knobs, KNOBS)
    check_choice("dtype", knobs["dtype"], DTYPES)
    check_choice("mask", knobs["mask"], MASKS)
    if knobs["bias"] not in BIASES:
        raise ValueError(f"knob bias={knobs['bias']!r} not supported; accepted: {list(BIASES)} "
                         "(qdtype = the bias has the Q/K/V dtype)")
    tiers = GENERIC_TIERS[op]
    baked = f"a multiple of {BAKED_QUANTUM} from {BAKED_QUANTUM} to {MAX_HEAD_DIM}"
    head_dim = check_int("head_dim", knobs["head_dim"], f"0 (generic tier) or {baked}")
    d_max = check_int("head_dim_max", knobs["head_dim_max"], f"0 with a baked head_dim, else one of {list(tiers)}")
    if head_dim == 0:
        if d_max not in tiers:
            raise ValueError(f"knob head_dim_max={d_max} (generic tier bound) not offered by {op}; "
                             f"accepted: {list(tiers)} (the run-time head dim must be a multiple of "
                             f"{GENERIC_QUANTUM} up to the bound)")
    else:
        if d_max != 0:
            raise ValueError(f"knob head_dim_max={d_max} must be 0 with a baked head_dim={head_dim}; "
                             f"use head_dim=0 for a generic tier")
        if head_dim < 0 or head_dim > MAX_HEAD_DIM or head_dim % BAKED_QUANTUM:
            raise ValueError(f"knob head_dim={head_dim} has no object; accepted: 0 (generic tier) or {baked} "
                             f"(other multiples of {GENERIC_QUANTUM} are served by the generic tiers {list(tiers)})")
    for arch in OP_ARCHES[op]:
        plan = make_plan(op, arch, knobs)
        if plan.lds_bytes > LDS_BYTES:
            raise ValueError(f"knobs {knobs} need {plan.lds_bytes} bytes of LDS (limit {LDS_BYTES}); "
                             f"head_dim={head_dim or d_max} is too wide for {op}")


def check_row(knobs: dict) -> None:
    """Raise ValueError if `sdpa_rdna` cannot serve this knob row."""
    check_row_for("sdpa_rdna", knobs)
