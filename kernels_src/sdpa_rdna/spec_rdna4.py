"""Knob contract of op `sdpa_rdna4` (pure Python; the shared contract and plans live in spec.py)."""

from __future__ import annotations

from sdpa_rdna.spec import check_row_for


def check_row(knobs: dict) -> None:
    """Raise ValueError if `sdpa_rdna4` cannot serve this knob row."""
    check_row_for("sdpa_rdna4", knobs)
