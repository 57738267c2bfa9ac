"""The cases each attention object runs: seeded (SEED and the case's index), small (the model is an
interpreter), and chosen so that every object meets what its kernel treats apart:

Forward (`sdpa_rdna`, `sdpa_rdna4`; block_m = 64 or 128 query rows per workgroup, 16- or 32-key blocks):
- "aligned": Sq = Sk = block_m (whole query and key blocks), batch 1, 2 query heads on 1 KV head (GQA,
  two workgroups), BSHD rows; the generic tiers at their largest head dim (the bound).
- "ragged": Sq = block_m + 13, Sk = block_m + 21 (two query blocks, the last key block partial), batch 2,
  head-major rows padded by 8 elements; a bias broadcast over the batch (stride 0) with one query row all
  -inf (a fully masked row) and a few -inf keys elsewhere; the generic tiers at their smallest head dim (8).
- "masked" (causal objects): Sk < Sq, so the first Sq - Sk queries see no key; the generic tiers at the bound
  minus 8 (a head dim that is not a whole WMMA step).
Forward on CDNA (`sdpa_cdna`, `sdpa_cdna_dualwave`; head-dim buckets, no bias, an LSE output): the same three
cases (`bucket_forward_cases`), "aligned" at the buckets (QK and V/O) with write_lse = 0 (the LSE buffer must
stay as it was), "ragged" and "masked" at the buckets minus 8 (the columns past the run-time head dims are
loaded as zeros and O's are not stored) with write_lse = 1.
Decode (`sdpa_rdna_decode`; a split kernel, then a merge kernel):
- "aligned": Sk = 2 chunks, 2 splits of one step each, 2 query positions of 4 query heads on 2 KV heads,
  return_lse = 0 (the LSE buffer must stay as it was).
- "ragged": Sk = 1 chunk + 5, 3 splits of 2 steps (the last split empty), batch 2, GQA group 2, 9 query
  positions (18 packed rows: two row tiles at tile_m 16), head-major K and V padded by 8.
- "masked" (causal objects): Sk < Sq (rows that see no key: O = 0, LSE = -inf); "empty cache" (non-causal
  objects): Sk = 0, every split empty, every row masked.
Scores have a spread of 3 (q, k standard normal, scale = 3 / sqrt(D)): P is peaked enough that a scale off by
1% moves O past the elementwise bound (tolerance.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from farm.emulate.outcome import Fact

SEED = 20261206
SPREAD = 3.0


class _SeededCase:
    """What both kinds of case share: the softmax scale from the spread, the seeded inputs, the report's facts."""

    spread: float
    head_dim: int
    index: int
    measured: dict[str, Fact]

    @property
    def scale(self) -> float:
        return self.spread / self.head_dim**0.5

    def rng(self) -> np.random.Generator:
        """The case's inputs come from this generator alone (the same on every run)."""
        return np.random.default_rng([SEED, self.index])

    def facts(self) -> dict[str, Fact]:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "measured"}
        return {**own, "scale": self.scale, "seed": f"numpy default_rng([{SEED}, {self.index}])", **self.measured}


@dataclass
class _Attention(_SeededCase):
    """The attention problem both kinds of case run (their own fields follow)."""

    name: str
    batch: int
    heads_q: int
    heads_kv: int
    seqlen_q: int
    seqlen_k: int
    head_dim: int
    causal: bool


@dataclass
class ForwardCase(_Attention):
    bias: str  # none | qdtype | f32
    order: str  # bshd | bhsd
    pad: int  # elements after each row (sequence position)
    bias_batch_broadcast: bool = False
    masked_bias_row: bool = False  # one query row's bias all -inf, and a few -inf keys
    head_dim_v: int = 0  # V and O's head dim; 0: head_dim
    write_lse: bool = False  # the kernel writes LSE (CDNA's run-time write_lse)
    spread: float = SPREAD
    index: int = 0  # the case's place in its object's list: its seed
    measured: dict[str, Fact] = field(default_factory=dict)  # what the run adds (the reference errors)


@dataclass
class DecodeCase(_Attention):
    num_splits: int
    return_lse: bool
    order: str
    pad: int
    spread: float = SPREAD
    index: int = 0
    measured: dict[str, Fact] = field(default_factory=dict)


def forward_cases(knobs: dict, block_m: int) -> list[ForwardCase]:
    baked = int(knobs["head_dim"])
    bound = baked or int(knobs["head_dim_max"])
    causal = knobs["mask"] == "causal"
    bias = str(knobs["bias"])
    cases = [
        ForwardCase("aligned", 1, 2, 1, block_m, block_m, bound, causal, bias, "bshd", 0),
        ForwardCase("ragged", 2, 1, 1, block_m + 13, block_m + 21, baked or 8, causal, bias, "bhsd", 8,
                    bias_batch_broadcast=True, masked_bias_row=bias != "none"),
    ]
    if causal:
        cases.append(ForwardCase("masked", 1, 1, 1, 40, 23, baked or bound - 8, causal, bias, "bshd", 8))
    return _numbered(cases)


def bucket_forward_cases(knobs: dict, block_m: int) -> list[ForwardCase]:
    """The CDNA forward cases (knobs dtype, head_dim, head_dim_v (absent: head_dim), causal, tile)."""
    d = int(knobs["head_dim"])
    dv = int(knobs.get("head_dim_v") or d)
    causal = bool(int(knobs["causal"]))
    cases = [
        ForwardCase("aligned", 1, 2, 1, block_m, block_m, d, causal, "none", "bshd", 0, head_dim_v=dv),
        ForwardCase("ragged", 2, 1, 1, block_m + 13, block_m + 21, d - 8, causal, "none", "bhsd", 8,
                    head_dim_v=dv - 8, write_lse=True),
    ]
    if causal:
        cases.append(ForwardCase("masked", 1, 1, 1, 40, 23, d - 8, causal, "none", "bshd", 8, head_dim_v=dv - 8,
                                 write_lse=True))
    return _numbered(cases)


def decode_cases(knobs: dict) -> list[DecodeCase]:
    d, chunk, causal = int(knobs["head_dim"]), int(knobs["chunk"]), knobs["mask"] == "causal"
    cases = [
        DecodeCase("aligned", 1, 4, 2, 2, 2 * chunk, d, causal, 2, False, "bshd", 0),
        DecodeCase("ragged", 2, 2, 1, 9, chunk + 5, d, causal, 3, True, "bhsd", 8),
    ]
    if causal:
        cases.append(DecodeCase("masked", 1, 2, 2, 5, 3, d, causal, 1, True, "bshd", 0))
    else:
        cases.append(DecodeCase("empty cache", 1, 2, 1, 2, 0, d, causal, 2, True, "bshd", 0))
    return _numbered(cases)


def _numbered(cases: list) -> list:
    for index, case in enumerate(cases):
        case.index = index
    return cases
