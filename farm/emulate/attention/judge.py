"""One case's O judged, the same way for the forward and the decode kernels: the output read back from its
strided buffer, both criteria and the masked rows (tolerance.measure_o), the error of the low-precision
reference in the case's facts, and O's padding left unwritten."""

from __future__ import annotations

import numpy as np

from farm.emulate.attention import tolerance
from farm.emulate.attention.buffers import Buffers, Strided, check_padding
from farm.emulate.attention.cases import DecodeCase, ForwardCase
from farm.emulate.attention.reference import Attention
from farm.emulate.numerics import decode
from farm.emulate.outcome import CaseOutcome


def judged_o(case: ForwardCase | DecodeCase, buffers: Buffers, where: Strided, exact: Attention,
             lowp: np.ndarray, dtype: str, seqlen_k: int, v: np.ndarray) -> CaseOutcome:
    """The case's outcome with O measured; the caller adds what else its kernel writes."""
    raw_o = buffers.contents("o")
    out = decode(where.read(raw_o, np.uint16), dtype).reshape(exact.o.shape)
    outcome = CaseOutcome(case)
    measures, lowp_error = tolerance.measure_o(out, exact.o, exact.p_abs_v, exact.visible, lowp, dtype, seqlen_k,
                                               float(np.max(np.abs(v), initial=0.0)))
    outcome.measures.extend(measures)
    case.measured.update(o_lowp_error=lowp_error, masked_rows=int(np.sum(~exact.visible)))
    check_padding(outcome, "o", raw_o, where, dtype)
    return outcome
