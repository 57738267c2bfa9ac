"""Trace-time helpers: plain Python that emits IR when a kernel body calls it.

They live outside kernel bodies on purpose: FlyDSL's AST rewriter turns any `while` or `if` written
in a kernel body into device control flow (scf.while / scf.if), even one meant to run at trace time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def tree(values: list, op: Callable[[Any, Any], Any] = operator.add) -> Any:
    """Fold `values` pairwise in a fixed order: (v0 op v1), (v2 op v3), ..., an odd last one carried.

    The dependent chain is log2(len) long, and the order (hence any rounding) never changes.
    """
    while len(values) > 1:
        values = [op(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def put(array: Any, idx: Any, value: Any) -> None:
    """`array[idx] = value` through a call: written inline inside a run-time `if` or `for`, FlyDSL's
    AST rewriter treats `array` as a value the region yields and rejects it."""
    array[idx] = value
