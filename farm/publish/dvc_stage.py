"""Compatibility only: the old module name of push, pull, status, record_pointer and seal_golden (the
CLI now imports them from farm.publish). Remove when nothing imports it."""

from __future__ import annotations

from farm.publish import pull, push, record_pointer, seal_golden, status

__all__ = ["pull", "push", "record_pointer", "seal_golden", "status"]
