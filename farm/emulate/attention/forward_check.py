"""`sdpa_rdna` and `sdpa_rdna4` objects on the model: one launch per case as kernels_src/sdpa_rdna/SOURCE.md
documents it (the 172-byte argument block, grid (ceil(Sq / block_m), Hq, B), the block from
.reqd_workgroup_size, block_m = 16 query rows per wave), O against reference.attention, bias where the object
takes one (the input type or f32), fully masked rows exactly 0."""

from __future__ import annotations

import numpy as np

from amdgpu_models.core.memory import guard_pattern
from amdgpu_models.core.workgroup import Decoder, Launch, Runner
from farm.emulate.attention import reference
from farm.emulate.attention.buffers import Buffers, Strided, kernarg, layout
from farm.emulate.attention.cases import ForwardCase, forward_cases
from farm.emulate.attention.judge import judged_o
from farm.emulate.launch import NotLaunchable, Program, block, kernel
from farm.emulate.numerics import decode, encode
from farm.emulate.outcome import CaseOutcome

SYMBOLS = {"sdpa_rdna": "sdpa_rdna_fwd_0", "sdpa_rdna4": "sdpa_rdna4_fwd_0"}
WAVE = 32
ROWS_PER_WAVE = 16
ARGS = layout(
    ("q", 0, "ptr"), ("k", 8, "ptr"), ("v", 16, "ptr"), ("o", 24, "ptr"), ("bias", 32, "ptr"),
    *((name, 40 + 8 * i, "i64") for i, name in enumerate(
        ("q_sb", "q_sh", "k_sb", "k_sh", "v_sb", "v_sh", "o_sb", "o_sh", "b_sb", "b_sh"))),
    *((name, 120 + 4 * i, "i32") for i, name in enumerate(
        ("q_ss", "k_ss", "v_ss", "o_ss", "b_sq", "b_sk", "batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv",
         "head_dim"))),
    ("scale", 168, "f32"),
)


def inputs(case: ForwardCase, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Encoded Q, K, V ([B, H, S, D]) and bias ([B or 1, Hq, Sq, Sk]; -inf where the case masks)."""
    b, d = case.batch, case.head_dim
    out = {"q": encode(rng.standard_normal((b, case.heads_q, case.seqlen_q, d)), dtype),
           "k": encode(rng.standard_normal((b, case.heads_kv, case.seqlen_k, d)), dtype),
           "v": encode(rng.standard_normal((b, case.heads_kv, case.seqlen_k, d)), dtype)}
    if case.bias != "none":
        bias = rng.standard_normal((1 if case.bias_batch_broadcast else b, case.heads_q, case.seqlen_q,
                                    case.seqlen_k))
        if case.masked_bias_row:
            bias[:, 0, case.seqlen_q // 3, :] = -np.inf  # a row that sees no key
            picks = rng.choice(bias.size, size=max(1, bias.size // 50), replace=False)
            bias.reshape(-1)[picks] = -np.inf  # scattered masked keys
        out["bias"] = encode(bias, dtype if case.bias == "qdtype" else "f32")
    return out


def run_case(runner: Runner, program: Program, knobs: dict, case: ForwardCase, rng: np.random.Generator,
             ) -> CaseOutcome:
    dtype = str(knobs["dtype"])
    of = runner.kernel
    threads = block(of)[0]
    block_m = threads // WAVE * ROWS_PER_WAVE
    data = inputs(case, dtype, rng)
    b, hq, hkv, sq, sk, d = case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_k, case.head_dim
    place = {"q": Strided.of((b, hq, sq, d), case.order, case.pad),
             "k": Strided.of((b, hkv, sk, d), case.order, case.pad),
             "v": Strided.of((b, hkv, sk, d), case.order, case.pad),
             "o": Strided.of((b, hq, sq, d), case.order, case.pad)}
    buffers = Buffers()
    for name in ("q", "k", "v"):
        buffers.add(name, place[name].place(data[name], dtype), is_input=True)
    buffers.add("o", guard_pattern(place["o"].elements * 2), is_input=False)  # NaN until written
    values: dict[str, int | float] = {}
    if "bias" in data:
        bias = data["bias"]
        bb, bh, bq, bk = (0 if case.bias_batch_broadcast else hq * sq * sk), sq * sk, sk, 1
        buffers.add("bias", np.ascontiguousarray(bias), is_input=True)
        values.update(b_sb=bb, b_sh=bh, b_sq=bq, b_sk=bk)
    else:
        buffers.add("bias", np.zeros(16, dtype=np.uint8), is_input=True)  # any pointer; never read
        values.update(b_sb=0, b_sh=0, b_sq=0, b_sk=0)
    for name in ("q", "k", "v", "o"):
        values.update({name: buffers.address[name], f"{name}_sb": place[name].batch,
                       f"{name}_sh": place[name].head, f"{name}_ss": place[name].seq})
    values.update(bias=buffers.address["bias"], batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                  head_dim=d, scale=case.scale)
    at = kernarg(buffers.memory, of, ARGS, values)
    runner.run(Launch(of, (-(-sq // block_m), hq, b), block(of), at), buffers.memory)

    q, k, v = (decode(data[name], dtype).reshape(data[name].shape) for name in ("q", "k", "v"))
    bias_values = None
    if "bias" in data:
        bias_values = np.broadcast_to(decode(data["bias"], dtype if case.bias == "qdtype" else "f32")
                                      .reshape(data["bias"].shape), (b, hq, sq, sk))
    exact = reference.attention(q, k, v, case.scale, bias_values, case.causal)
    lowp = reference.attention_low_precision(q, k, v, case.scale, dtype, bias_values, case.causal)
    outcome = judged_o(case, buffers, place["o"], exact, lowp, dtype, sk, v)
    buffers.check_untouched(outcome)
    return outcome


def check(program: Program, op: str, knobs: dict, decoder: Decoder) -> list[CaseOutcome]:
    """Every case of one forward object, inputs seeded by the case's index."""
    if op not in SYMBOLS:
        raise NotLaunchable(f"op {op!r} is not an RDNA attention forward ({', '.join(SYMBOLS)})")
    of = kernel(program, SYMBOLS[op])
    block_m = block(of)[0] // WAVE * ROWS_PER_WAVE
    runner = Runner(program, of, decoder)
    return [run_case(runner, program, knobs, case, case.rng()) for case in forward_cases(knobs, block_m)]
