"""Executor settings read before Ray is imported (a bad value is named before anything starts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from farm.core.errors import FarmError


def num_cpus(executor_cfg: Mapping[str, Any]) -> int | None:
    """executor.num_cpus as a positive int (None: not set, use every CPU); anything else is the user's
    to fix, before Ray starts (Ray's own error would blame the address)."""
    value = executor_cfg.get("num_cpus")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value).strip()) < 1:
        raise FarmError(f"executor.num_cpus={value!r} is not a positive whole number",
                        "set executor.num_cpus=N with N >= 1, or leave it out to use every CPU")
    return int(str(value).strip())
