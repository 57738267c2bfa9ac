"""`sdpa_rdna_decode` (RDNA, wave32) and `sdpa_cdna_decode` (CDNA, wave64) objects on the model, one check for
both (one generator, the same kernarg layouts and launch): per case the split kernel, then the merge kernel,
launched as kernels_src/sdpa_decode/SOURCE.md documents them (split: grid (num_splits, batch * heads_kv,
ceil(group * seqlen_q / tile_m)), its block from .reqd_workgroup_size; merge: grid (batch * heads_q * seqlen_q),
64 threads), sharing an f32 workspace of rows * slots * (D + 1) elements (slots = num_splits * waves_n, waves_n =
the split block's waves / (tile_m / 16), its waves counted in the kernel's own wavefront size). O and LSE against
the binary64 reference; the low-precision twin goes through the same split and merge (reference.split_attention)."""

from __future__ import annotations

import numpy as np

from amdgpu_models.core.memory import guard_pattern
from amdgpu_models.core.workgroup import Decoder, Launch, Runner
from farm.emulate.attention import reference, tolerance
from farm.emulate.attention.buffers import Buffers, Strided, kernarg, layout
from farm.emulate.attention.cases import DecodeCase, decode_cases
from farm.emulate.attention.judge import judged_o
from farm.emulate.launch import NotLaunchable, Program, block, kernel
from farm.emulate.numerics import decode, encode
from farm.emulate.outcome import CaseOutcome

OPS = ("sdpa_rdna_decode", "sdpa_cdna_decode")
MMA_ROWS = 16
MERGE_THREADS = 64
SPLIT_ARGS = layout(
    ("q", 0, "ptr"), ("k", 8, "ptr"), ("v", 16, "ptr"), ("workspace", 24, "ptr"),
    *((name, 32 + 4 * i, "i32") for i, name in enumerate(
        ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "num_splits", "q_sb", "q_ss", "q_sh",
         "k_sb", "k_ss", "k_sh", "v_sb", "v_ss", "v_sh"))),
    ("softmax_scale", 92, "f32"),
)
MERGE_ARGS = layout(
    ("workspace", 0, "ptr"), ("o", 8, "ptr"), ("lse", 16, "ptr"),
    *((name, 24 + 4 * i, "i32") for i, name in enumerate(
        ("batch", "seqlen_q", "heads_q", "num_splits", "o_sb", "o_ss", "o_sh", "return_lse"))),
)


def waves_n(split_threads: int, tile_m: int, wave: int) -> int:
    """Waves along the key axis of the split kernel: its waves (of `wave` lanes, the kernel's wavefront size) over
    the waves along M (tile_m / 16)."""
    waves, along_m = split_threads // wave, tile_m // MMA_ROWS
    if waves % along_m:
        raise NotLaunchable(f"the split kernel's {waves} waves do not divide into tile_m {tile_m} / 16 rows")
    return waves // along_m


def run_case(split: Runner, merge: Runner, knobs: dict, case: DecodeCase, rng: np.random.Generator,
             ) -> CaseOutcome:
    dtype, tile_m, chunk = str(knobs["dtype"]), int(knobs["tile_m"]), int(knobs["chunk"])
    b, hq, hkv, sq, sk, d = case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_k, case.head_dim
    slots_per_split = waves_n(block(split.kernel)[0], tile_m, split.kernel.wavefront_size)
    data = {"q": encode(rng.standard_normal((b, hq, sq, d)), dtype),
            "k": encode(rng.standard_normal((b, hkv, sk, d)), dtype),
            "v": encode(rng.standard_normal((b, hkv, sk, d)), dtype)}
    place = {"q": Strided.of((b, hq, sq, d), "bshd", case.pad),  # queries: [B, S, H, D] rows
             "k": Strided.of((b, hkv, sk, d), case.order, case.pad),
             "v": Strided.of((b, hkv, sk, d), case.order, case.pad),
             "o": Strided.of((b, hq, sq, d), "bshd", case.pad)}
    rows, slots = b * hq * sq, case.num_splits * slots_per_split
    buffers = Buffers()
    for name in ("q", "k", "v"):
        buffers.add(name, place[name].place(data[name], dtype), is_input=True)
    buffers.add("o", guard_pattern(place["o"].elements * 2), is_input=False)
    buffers.add("lse", guard_pattern(max(rows, 1) * 4), is_input=False)
    buffers.add("workspace", guard_pattern(max(rows * slots * (d + 1), 1) * 4), is_input=False)
    at = buffers.address
    values = {"q": at["q"], "k": at["k"], "v": at["v"], "workspace": at["workspace"], "batch": b, "seqlen_q": sq,
              "seqlen_k": sk, "heads_q": hq, "heads_kv": hkv, "num_splits": case.num_splits,
              "softmax_scale": case.scale}
    for name in ("q", "k", "v"):
        values.update({f"{name}_sb": place[name].batch, f"{name}_ss": place[name].seq,
                       f"{name}_sh": place[name].head})
    memory = buffers.memory
    grid = (case.num_splits, b * hkv, -(-(hq // hkv) * sq // tile_m))
    split.run(Launch(split.kernel, grid, block(split.kernel), kernarg(memory, split.kernel, SPLIT_ARGS, values)),
              memory)
    values = {"workspace": at["workspace"], "o": at["o"], "lse": at["lse"], "batch": b, "seqlen_q": sq,
              "heads_q": hq, "num_splits": case.num_splits, "o_sb": place["o"].batch, "o_ss": place["o"].seq,
              "o_sh": place["o"].head, "return_lse": int(case.return_lse)}
    if block(merge.kernel) != (MERGE_THREADS, 1, 1):
        raise NotLaunchable(f"the merge kernel's block is {block(merge.kernel)}, SOURCE.md documents "
                            f"{MERGE_THREADS} threads")
    merge.run(Launch(merge.kernel, (rows, 1, 1), block(merge.kernel),
                     kernarg(memory, merge.kernel, MERGE_ARGS, values)), memory)

    q, k, v = (decode(data[name], dtype).reshape(data[name].shape) for name in ("q", "k", "v"))
    exact = reference.attention(q, k, v, case.scale, None, case.causal)
    key_slots = reference.decode_slots(sk, chunk, case.num_splits, slots_per_split)
    lowp, _ = reference.split_attention(q, k, v, case.scale, key_slots, case.causal, dtype)
    outcome = judged_o(case, buffers, place["o"], exact, lowp, dtype, sk, v)
    case.measured.update(slots=slots)
    raw_lse = buffers.contents("lse")
    if case.return_lse:
        lse = decode(raw_lse, "f32")[:rows].reshape(b, hq, sq)
        floor = tolerance.lse_floor(q, k, case.scale, exact.lse)
        measures, error32 = tolerance.measure_lse(lse, exact.lse, exact.visible,
                                                  reference.lse_binary32(q, k, case.scale, None, case.causal), floor)
        outcome.measures.extend(measures)
        case.measured.update(lse_binary32_error=error32)
    elif not np.array_equal(raw_lse, guard_pattern(len(raw_lse))):
        outcome.add("lse", "unwritten (return_lse = 0)", float("inf"), 0.0)
    buffers.check_untouched(outcome)
    return outcome


def check(program: Program, op: str, knobs: dict, decoder: Decoder) -> list[CaseOutcome]:
    """Every case of one decode object, inputs seeded by the case's index."""
    if op not in OPS:
        raise NotLaunchable(f"op {op!r} is not an attention decode op ({', '.join(OPS)})")
    split = Runner(program, kernel(program, "sdpa_decode_split"), decoder)
    merge = Runner(program, kernel(program, "sdpa_decode_merge"), decoder)
    return [run_case(split, merge, knobs, case, case.rng()) for case in decode_cases(knobs)]
