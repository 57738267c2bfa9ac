"""How far an attention output may be from the binary64 reference, in the style of AOTriton's tests, plus an
elementwise bound that the first rule alone does not give.

O, two criteria, both reported per case (`measure_o`):
1. "3x low-precision reference": max |O - ref| over the rows that see a key <= max(floor, 3 * e_lp), where
   e_lp is the error of the same reference computed in the kernel's low precision
   (reference.attention_low_precision: P rounded to the input type, O rounded once). The case's facts record
   e_lp. For bf16 this rule alone lets a softmax scale off by 1% through on some inputs: the kernels' own
   rounding already moves O by about as much.
2. "elementwise": every element |O - ref| <= c * u * (|P| |V|) + floor, with u the unit roundoff of the input
   type (f16 2^-11, bf16 2^-8), |P| |V| the sum over keys of P_ij |V_jd| and c = 2.25: rounding P to the type
   moves each term by at most u P_ij |V_jd|, rounding O once by u |O| <= u (|P| |V|) (together 2u), and 1/4 u
   for the binary32 arithmetic (scores, exp2, the running rescale). The reported error is the worst
   element's ratio to its bound (within when <= 1).
The floor, (Sk + 1) * 2^-25 * max(1, max |V|), is half the spacing of f16's subnormals once per key and once
for O: what rounding a P or an O of f16 below 2^-14 can lose whatever its size.

Rows that see no key are checked exactly: O must be 0 there ("masked rows exactly 0"), LSE -inf.
LSE (decode; binary32 output): max |LSE - ref| <= max(floor, 3 * e_32), e_32 the error of the LSE computed in
binary32 (reference.lse_binary32), the floor 2^-24 * (D * max scale |q| . |k| + 8 (1 + max |LSE|)): the
binary32 rounding of a D-term score and of the log and exp.
"""

from __future__ import annotations

import numpy as np

from farm.emulate.attention.reference import expand_kv
from farm.emulate.outcome import Measure

UNIT_ROUNDOFF = {"f16": 2.0**-11, "bf16": 2.0**-8}
LOWP_MULTIPLE = 3.0
ELEMENT_MULTIPLE = 2.25
LOWP = "3x low-precision reference"
ELEMENTWISE = f"elementwise {ELEMENT_MULTIPLE:g}u|P||V|"
MASKED_O = "masked rows exactly 0"
MASKED_LSE = "masked rows exactly -inf"
LSE_RULE = "3x binary32 reference"


def _finite(values: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(values), values, np.inf)


def o_floor(seqlen_k: int, v_max: float) -> float:
    return (seqlen_k + 1) * 2.0**-25 * max(1.0, v_max)


def measure_o(out: np.ndarray, exact_o: np.ndarray, p_abs_v: np.ndarray, visible: np.ndarray,
              lowp_o: np.ndarray, dtype: str, seqlen_k: int, v_max: float, name: str = "o",
              ) -> tuple[list[Measure], float]:
    """The measures of one O output ([..., rows, D] arrays, `visible` [..., rows]) and e_lp."""
    measures = []
    floor = o_floor(seqlen_k, v_max)
    lowp_error = 0.0
    if np.any(visible):
        diff = _finite(np.abs(out[visible] - exact_o[visible]))
        lowp_error = float(np.max(np.abs(lowp_o[visible] - exact_o[visible])))
        measures.append(Measure(name, LOWP, float(np.max(diff)), max(floor, LOWP_MULTIPLE * lowp_error), dtype))
        bound = ELEMENT_MULTIPLE * UNIT_ROUNDOFF[dtype] * p_abs_v[visible] + floor
        measures.append(Measure(name, ELEMENTWISE, float(np.max(diff / bound)), 1.0, dtype))
    if not np.all(visible):
        masked = out[~visible]
        error = 0.0 if np.all(masked == 0) else float(np.max(_finite(np.abs(masked))))
        measures.append(Measure(name, MASKED_O, error, 0.0, dtype))
    return measures, lowp_error


def lse_floor(q: np.ndarray, k: np.ndarray, scale: float, exact_lse: np.ndarray) -> float:
    """2^-24 (D max scale |q|.|k| + 8 (1 + max |LSE|)) over the case ([B, H, S, D] inputs)."""
    kk = expand_kv(np.abs(k), q.shape[1])
    dots = abs(scale) * np.matmul(np.abs(q), np.swapaxes(kk, -1, -2))
    finite = exact_lse[np.isfinite(exact_lse)]
    top = float(np.max(np.abs(finite))) if finite.size else 0.0
    return 2.0**-24 * (q.shape[-1] * float(np.max(dots, initial=0.0)) + 8 * (1 + top))


def measure_lse(out: np.ndarray, exact_lse: np.ndarray, visible: np.ndarray, binary32_lse: np.ndarray,
                floor: float, name: str = "lse") -> tuple[list[Measure], float]:
    """The measures of one LSE output and e_32 (the binary32 LSE's error)."""
    measures = []
    error32 = 0.0
    if np.any(visible):
        diff = _finite(np.abs(out[visible] - exact_lse[visible]))
        error32 = float(np.max(np.abs(binary32_lse[visible] - exact_lse[visible])))
        measures.append(Measure(name, LSE_RULE, float(np.max(diff)), max(floor, LOWP_MULTIPLE * error32), "f32"))
    if not np.all(visible):
        exact = bool(np.all(out[~visible] == -np.inf))
        measures.append(Measure(name, MASKED_LSE, 0.0 if exact else np.inf, 0.0, "f32"))
    return measures, error32
