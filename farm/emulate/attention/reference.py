"""Attention in numpy binary64 from the same rounded inputs the kernel reads, and the same computation in the
kernel's low precision, whose error sets the tolerance (tolerance.py).

Tensors are logical [batch, heads, seq, head_dim] (whatever the buffers' layout); query head h reads KV head
h // (heads_q / heads_kv). Scores are `scale * Q K^T + bias`, a key a query may not see is -inf:
`causal` is bottom-right aligned (query i sees keys j <= i + Sk - Sq), and a bias of -inf masks its key.
A row that sees no key has O = 0 and LSE = -inf (both kernels' documented contract).

The low-precision twin computes what the kernels round: scores in binary32, P = exp(s - max) rounded to the
input type (f16/bf16) before P V, the row sum of the unrounded values, O rounded once to the input type.
Decode's split and merge (`split_attention`) keeps one partial per slot (a split's keys seen by one wave) and
folds the partials by their log-sum-exp, as the merge kernel does; in binary64 it equals `attention`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from farm.emulate.numerics import decode, encode


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` rounded to the element type (to nearest even), as binary64."""
    return decode(encode(np.asarray(values, dtype=np.float64), dtype), dtype)


def key_mask(seqlen_q: int, seqlen_k: int, causal: bool) -> np.ndarray:
    """[Sq, Sk] True where query i may see key j (bottom-right aligned when causal)."""
    if not causal:
        return np.ones((seqlen_q, seqlen_k), dtype=bool)
    return np.arange(seqlen_k)[None, :] <= np.arange(seqlen_q)[:, None] + seqlen_k - seqlen_q


def expand_kv(kv: np.ndarray, heads_q: int) -> np.ndarray:
    """[B, Hkv, S, D] -> [B, Hq, S, D]: query head h reads KV head h // (Hq / Hkv)."""
    group = heads_q // kv.shape[1]
    return np.repeat(kv, group, axis=1)


def scores(q: np.ndarray, k: np.ndarray, scale: float, bias: np.ndarray | None, causal: bool,
           binary32: bool = False) -> np.ndarray:
    """[B, Hq, Sq, Sk] scale * Q K^T + bias, -inf where masked; in binary32 arithmetic when asked."""
    kk = expand_kv(k, q.shape[1])
    if binary32:
        s = np.float32(scale) * np.matmul(q.astype(np.float32), np.swapaxes(kk, -1, -2).astype(np.float32))
        if bias is not None:
            s = s + bias.astype(np.float32)
        s = s.astype(np.float64)
    else:
        s = scale * np.matmul(q, np.swapaxes(kk, -1, -2))
        if bias is not None:
            s = s + bias
    return np.where(key_mask(q.shape[2], k.shape[2], causal), s, -np.inf)


def _exp_rows(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(exp(s - row max), row max with 0 for a row of -inf only): no inf - inf."""
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    return np.exp(s - m), m


@dataclass(frozen=True)
class Attention:
    o: np.ndarray  # [B, Hq, Sq, D]
    lse: np.ndarray  # [B, Hq, Sq], natural log; -inf for a row that sees no key
    visible: np.ndarray  # [B, Hq, Sq] bool: the row sees at least one key
    p_abs_v: np.ndarray  # [B, Hq, Sq, D]: sum_j P_ij |V_jd|, the scale of P V's rounding errors


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, bias: np.ndarray | None = None,
              causal: bool = False) -> Attention:
    """softmax(scale * Q K^T + bias + mask) V in binary64, with the LSE."""
    s = scores(q, k, scale, bias, causal)
    p, m = _exp_rows(s)
    total = np.sum(p, axis=-1, keepdims=True)
    visible = total[..., 0] > 0
    prob = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    vv = expand_kv(v, q.shape[1])
    with np.errstate(divide="ignore"):
        lse = np.where(visible, m[..., 0] + np.log(np.where(visible, total[..., 0], 1.0)), -np.inf)
    return Attention(np.matmul(prob, vv), lse, visible, np.matmul(prob, np.abs(vv)))


def attention_low_precision(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, dtype: str,
                            bias: np.ndarray | None = None, causal: bool = False) -> np.ndarray:
    """O as the kernels round it: binary32 scores, P rounded to `dtype` for P V, the sum of the unrounded P,
    O rounded once to `dtype`."""
    p, _ = _exp_rows(scores(q, k, scale, bias, causal, binary32=True))
    total = np.sum(p, axis=-1, keepdims=True)
    pv = np.matmul(round_to(p, dtype), expand_kv(v, q.shape[1]))
    return round_to(np.divide(pv, total, out=np.zeros_like(pv), where=total > 0), dtype)


def lse_binary32(q: np.ndarray, k: np.ndarray, scale: float, bias: np.ndarray | None = None,
                 causal: bool = False) -> np.ndarray:
    """The LSE computed in binary32 throughout (its error sets the LSE's tolerance)."""
    s = scores(q, k, scale, bias, causal, binary32=True).astype(np.float32)
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, np.float32(0))
    total = np.sum(np.exp(s - m), axis=-1, dtype=np.float32)
    with np.errstate(divide="ignore"):
        return np.where(total > 0, m[..., 0] + np.log(total), -np.inf).astype(np.float64)


def decode_slots(seqlen_k: int, chunk: int, num_splits: int, waves_n: int) -> list[np.ndarray]:
    """The keys of each partial slot of the decode split kernel (slot = split * waves_n + wave), per its
    SOURCE.md: steps of `chunk` keys, split s takes steps [s * per, min((s + 1) * per, n_steps)) with
    per = ceil(n_steps / num_splits); wave w takes keys [w * chunk / waves_n, (w + 1) * chunk / waves_n) of
    every step. Slots past the last step are empty."""
    n_steps = -(-seqlen_k // chunk)
    per = -(-n_steps // num_splits) if num_splits else 0
    per_wave = chunk // waves_n
    slots = []
    for split in range(num_splits):
        steps = range(min(split * per, n_steps), min((split + 1) * per, n_steps))
        for wave in range(waves_n):
            keys = [step * chunk + wave * per_wave + i for step in steps for i in range(per_wave)]
            slots.append(np.array([key for key in keys if key < seqlen_k], dtype=np.int64))
    return slots


def split_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, slots: list[np.ndarray],
                    causal: bool = False, dtype: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, LSE) through decode's split and merge: one partial per slot (its own max, P V / its sum, its LSE),
    folded with weights exp(lse_s - max_s lse_s). `dtype` None: binary64; else the kernels' low precision
    (binary32 scores, P rounded to `dtype`, partials in binary32, O rounded once to `dtype`)."""
    s_all = scores(q, k, scale, None, causal, binary32=dtype is not None)
    vv = expand_kv(v, q.shape[1])
    shape = q.shape[:3]
    partial_o, partial_lse = [], []
    for keys in slots:
        p, m = _exp_rows(s_all[..., keys])
        total = np.sum(p, axis=-1, keepdims=True)
        weights = p if dtype is None else round_to(p, dtype)
        o = np.divide(np.matmul(weights, vv[:, :, keys, :]), total, out=np.zeros(shape + (v.shape[-1],)),
                      where=total > 0)
        with np.errstate(divide="ignore"):
            lse = np.where(total[..., 0] > 0, m[..., 0] + np.log(np.where(total[..., 0] > 0, total[..., 0], 1)),
                           -np.inf)
        if dtype is not None:
            o, lse = o.astype(np.float32).astype(np.float64), lse.astype(np.float32).astype(np.float64)
        partial_o.append(o)
        partial_lse.append(lse)
    lses = np.stack(partial_lse) if slots else np.full((1,) + shape, -np.inf)
    top = np.max(lses, axis=0)
    ref = np.where(np.isfinite(top), top, 0.0)
    w = np.exp(lses - ref)
    wsum = np.sum(w, axis=0)
    acc = sum((w[i][..., None] * partial_o[i] for i in range(len(slots))), np.zeros(shape + (v.shape[-1],)))
    o = np.divide(acc, wsum[..., None], out=np.zeros_like(acc), where=wsum[..., None] > 0)
    with np.errstate(divide="ignore"):
        lse = np.where(wsum > 0, ref + np.log(np.where(wsum > 0, wsum, 1.0)), -np.inf)
    return (o if dtype is None else round_to(o, dtype)), lse
