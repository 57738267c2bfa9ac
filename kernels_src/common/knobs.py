"""Checks every family's spec runs on a knob row: pure Python (the farm runs spec code at expansion
time, before any GPU toolchain is loaded).  Each raises ValueError naming the knob and what is accepted.
"""

from __future__ import annotations

from collections.abc import Iterable


def check_keys(op: str, knobs: object, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """`knobs` is a dict with every required key and no key outside `required` + `optional`."""
    accepted = f"{list(required)}" + (f" and optionally {list(optional)}" if optional else "")
    if not isinstance(knobs, dict):
        raise ValueError(f"knobs must be a dict with keys {accepted}; got {type(knobs).__name__}")
    missing = [k for k in required if k not in knobs]
    if missing:
        raise ValueError(f"knobs missing {missing}; {op} needs {accepted}")
    extra = sorted(set(knobs) - set(required) - set(optional))
    if extra:
        raise ValueError(f"unknown knobs {extra}; {op} accepts {accepted}")


def check_choice(name: str, value: object, values: Iterable) -> None:
    """`value` is one of `values` (a bool never passes for an int)."""
    values = tuple(values)
    if isinstance(value, bool) or value not in values:
        raise ValueError(f"knob {name}={value!r} not supported; accepted: {list(values)}")


def check_int(name: str, value: object, accepted: str) -> int:
    """`value` is an int (not a bool); `accepted` says which ones."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"knob {name}={value!r} must be an int; accepted: {accepted}")
    return value
