"""Element sizes by type name, and the access width: pure Python (spec modules import this).

The FlyDSL and torch classes for these names live in common/fx_types.py (it needs the toolchain).
"""

from __future__ import annotations

# Bytes per element of every element type a knob may name.
ELEM_BYTES: dict[str, int] = {"bf16": 2, "f16": 2, "f32": 4}

# One global access moves 16 bytes (dwordx4).
VEC_BYTES = 16


def vec_elems(elem: str) -> int:
    """Elements of type `elem` per 16-byte access."""
    return VEC_BYTES // ELEM_BYTES[elem]
