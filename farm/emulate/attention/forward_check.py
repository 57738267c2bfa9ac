"""The attention forward objects on the model: one launch per case as the family's SOURCE.md documents it
(kernels_src/sdpa_rdna for `sdpa_rdna`/`sdpa_rdna4`, kernels_src/sdpa_cdna for `sdpa_cdna`/`sdpa_cdna_dualwave`:
the 172-byte argument block of each, grid (ceil(Sq / block_m), Hq, B), the block from .reqd_workgroup_size),
O against reference.attention, fully masked rows exactly 0. What differs between the families is one `Form`
each: the kernel's symbol and arguments, how block_m follows (RDNA: 16 query rows per wave32; CDNA: the tile
knob's m), the cases, and the third output: RDNA's bias input (the input type or f32), CDNA's LSE output
(natural log, f32, written when write_lse != 0; judged as decode's)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amdgpu_models.core.memory import guard_pattern
from amdgpu_models.core.workgroup import Decoder, Launch, Runner
from farm.emulate.attention import reference, tolerance
from farm.emulate.attention.buffers import Arg, Buffers, Strided, kernarg, layout
from farm.emulate.attention.cases import ForwardCase, bucket_forward_cases, forward_cases
from farm.emulate.attention.judge import judged_o
from farm.emulate.launch import NotLaunchable, Program, block, kernel
from farm.emulate.numerics import decode, encode
from farm.emulate.outcome import CaseOutcome

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
CDNA_ARGS = layout(
    ("q", 0, "ptr"), ("k", 8, "ptr"), ("v", 16, "ptr"), ("o", 24, "ptr"), ("lse", 32, "ptr"),
    *((name, 40 + 8 * i, "i64") for i, name in enumerate(
        ("q_sb", "q_sh", "k_sb", "k_sh", "v_sb", "v_sh", "o_sb", "o_sh", "lse_sb", "lse_sh"))),
    *((name, 120 + 4 * i, "i32") for i, name in enumerate(
        ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "head_dim_v", "q_ss", "k_ss", "v_ss",
         "o_ss"))),
    ("scale", 164, "f32"), ("write_lse", 168, "i32"),
)
_TILE = re.compile(r"m(\d+)n(\d+)w(\d+)$")


def rdna_block_m(knobs: dict, threads: int) -> int:
    """RDNA: 16 query rows per wave32."""
    return threads // WAVE * ROWS_PER_WAVE


def tile_block_m(knobs: dict, threads: int) -> int:
    """CDNA: BLOCK_M of the tile knob `m<BLOCK_M>n<BLOCK_N>w<WAVES>`, whose waves (of 64) must be the block's."""
    found = _TILE.match(str(knobs.get("tile", "")))
    if found is None or int(found.group(3)) * 64 != threads:
        raise NotLaunchable(f"tile {knobs.get('tile')!r} does not name the object's {threads}-thread block")
    return int(found.group(1))


@dataclass(frozen=True)
class Form:
    symbol: str
    args: tuple[Arg, ...]
    block_m: Callable[[dict, int], int]  # (knobs, threads per workgroup) -> query rows per workgroup
    cases: Callable[[dict, int], list[ForwardCase]]  # (knobs, block_m) -> the object's cases
    lse: bool  # CDNA: an LSE output (and no bias)


CDNA = Form("sdpa_fwd_0", CDNA_ARGS, tile_block_m, bucket_forward_cases, lse=True)
FORMS = {"sdpa_rdna": Form("sdpa_rdna_fwd_0", ARGS, rdna_block_m, forward_cases, lse=False),
         "sdpa_rdna4": Form("sdpa_rdna4_fwd_0", ARGS, rdna_block_m, forward_cases, lse=False),
         "sdpa_cdna": CDNA, "sdpa_cdna_dualwave": CDNA}
SYMBOLS = {op: form.symbol for op, form in FORMS.items()}


def inputs(case: ForwardCase, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Encoded Q, K, V ([B, H, S, D]; V's D is head_dim_v when the case has one) and bias ([B or 1, Hq, Sq, Sk];
    -inf where the case masks)."""
    b, d = case.batch, case.head_dim
    out = {"q": encode(rng.standard_normal((b, case.heads_q, case.seqlen_q, d)), dtype),
           "k": encode(rng.standard_normal((b, case.heads_kv, case.seqlen_k, d)), dtype),
           "v": encode(rng.standard_normal((b, case.heads_kv, case.seqlen_k, case.head_dim_v or d)), dtype)}
    if case.bias != "none":
        bias = rng.standard_normal((1 if case.bias_batch_broadcast else b, case.heads_q, case.seqlen_q,
                                    case.seqlen_k))
        if case.masked_bias_row:
            bias[:, 0, case.seqlen_q // 3, :] = -np.inf  # a row that sees no key
            picks = rng.choice(bias.size, size=max(1, bias.size // 50), replace=False)
            bias.reshape(-1)[picks] = -np.inf  # scattered masked keys
        out["bias"] = encode(bias, dtype if case.bias == "qdtype" else "f32")
    return out


def _bias(buffers: Buffers, case: ForwardCase, data: dict[str, np.ndarray], values: dict) -> None:
    """RDNA's bias argument: the case's bias, or any pointer (never read) with zero strides."""
    hq, sq, sk = case.heads_q, case.seqlen_q, case.seqlen_k
    if "bias" in data:
        buffers.add("bias", np.ascontiguousarray(data["bias"]), is_input=True)
        values.update(b_sb=0 if case.bias_batch_broadcast else hq * sq * sk, b_sh=sq * sk, b_sq=sk, b_sk=1)
    else:
        buffers.add("bias", np.zeros(16, dtype=np.uint8), is_input=True)
        values.update(b_sb=0, b_sh=0, b_sq=0, b_sk=0)
    values["bias"] = buffers.address["bias"]


def _lse(buffers: Buffers, case: ForwardCase, values: dict) -> Strided:
    """CDNA's LSE output: [B, Hq, Sq] f32, rows contiguous; the guard pattern until written."""
    where = Strided.of((case.batch, case.heads_q, case.seqlen_q, 1), "bhsd")
    buffers.add("lse", guard_pattern(where.elements * 4), is_input=False)
    values.update(lse=buffers.address["lse"], lse_sb=where.batch, lse_sh=where.head,
                  head_dim_v=case.head_dim_v or case.head_dim, write_lse=int(case.write_lse))
    return where


def run_case(runner: Runner, form: Form, knobs: dict, case: ForwardCase, rng: np.random.Generator) -> CaseOutcome:
    dtype = str(knobs["dtype"])
    of = runner.kernel
    block_m = form.block_m(knobs, block(of)[0])
    data = inputs(case, dtype, rng)
    b, hq, hkv, sq, sk, d = case.batch, case.heads_q, case.heads_kv, case.seqlen_q, case.seqlen_k, case.head_dim
    dv = case.head_dim_v or d
    place = {"q": Strided.of((b, hq, sq, d), case.order, case.pad),
             "k": Strided.of((b, hkv, sk, d), case.order, case.pad),
             "v": Strided.of((b, hkv, sk, dv), case.order, case.pad),
             "o": Strided.of((b, hq, sq, dv), case.order, case.pad)}
    buffers = Buffers()
    for name in ("q", "k", "v"):
        buffers.add(name, place[name].place(data[name], dtype), is_input=True)
    buffers.add("o", guard_pattern(place["o"].elements * 2), is_input=False)  # NaN until written
    values: dict[str, int | float] = {}
    lse_place = _lse(buffers, case, values) if form.lse else _bias(buffers, case, data, values)
    for name in ("q", "k", "v", "o"):
        values.update({name: buffers.address[name], f"{name}_sb": place[name].batch,
                       f"{name}_sh": place[name].head, f"{name}_ss": place[name].seq})
    values.update(batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, head_dim=d, scale=case.scale)
    at = kernarg(buffers.memory, of, form.args, values)
    runner.run(Launch(of, (-(-sq // block_m), hq, b), block(of), at), buffers.memory)

    q, k, v = (decode(data[name], dtype).reshape(data[name].shape) for name in ("q", "k", "v"))
    bias_values = None
    if "bias" in data:
        bias_values = np.broadcast_to(decode(data["bias"], dtype if case.bias == "qdtype" else "f32")
                                      .reshape(data["bias"].shape), (b, hq, sq, sk))
    exact = reference.attention(q, k, v, case.scale, bias_values, case.causal)
    lowp = reference.attention_low_precision(q, k, v, case.scale, dtype, bias_values, case.causal)
    outcome = judged_o(case, buffers, place["o"], exact, lowp, dtype, sk, v)
    if lse_place is not None:
        _judge_lse(outcome, case, buffers, lse_place, q, k, exact)
    buffers.check_untouched(outcome)
    return outcome


def _judge_lse(outcome: CaseOutcome, case: ForwardCase, buffers: Buffers, where: Strided, q: np.ndarray,
               k: np.ndarray, exact: reference.Attention) -> None:
    """LSE against the binary64 reference (written), or the buffer left as it was (write_lse = 0)."""
    raw = buffers.contents("lse")
    if not case.write_lse:
        if not np.array_equal(raw, guard_pattern(len(raw))):
            outcome.add("lse", "unwritten (write_lse = 0)", float("inf"), 0.0)
        return
    lse = where.read(raw, np.float32).astype(np.float64)[..., 0]
    floor = tolerance.lse_floor(q, k, case.scale, exact.lse)
    measures, error32 = tolerance.measure_lse(lse, exact.lse, exact.visible,
                                              reference.lse_binary32(q, k, case.scale, None, case.causal), floor)
    outcome.measures.extend(measures)
    case.measured.update(lse_binary32_error=error32)


def check(program: Program, op: str, knobs: dict, decoder: Decoder) -> list[CaseOutcome]:
    """Every case of one forward object, inputs seeded by the case's index."""
    if op not in FORMS:
        raise NotLaunchable(f"op {op!r} is not an attention forward ({', '.join(FORMS)})")
    form = FORMS[op]
    of = kernel(program, form.symbol)
    block_m = form.block_m(knobs, block(of)[0])
    runner = Runner(program, of, decoder)
    return [run_case(runner, form, knobs, case, case.rng()) for case in form.cases(knobs, block_m)]
