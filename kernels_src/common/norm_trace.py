"""Trace inputs both RMSNorm generators start from (torch, so not in the pure-Python common/norm.py)."""

from __future__ import annotations

import torch

from common.fx_types import TORCH_TYPES
from common.norm import NORM_FORMS

# Small trace shapes: only dtypes reach the object, never these sizes.
TRACE_M = 4
TRACE_N_GENERIC = 64


def trace_rows(dtype: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (zeros, TRACE_M rows of n columns, or TRACE_N_GENERIC for the generic tier n=0) and gamma (ones)."""
    x_name, g_name = NORM_FORMS[dtype]
    cols = n or TRACE_N_GENERIC
    return torch.zeros(TRACE_M, cols, dtype=TORCH_TYPES[x_name]), torch.ones(cols, dtype=TORCH_TYPES[g_name])
