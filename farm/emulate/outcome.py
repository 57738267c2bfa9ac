"""What one emulated case of one object gives back, for every family: the case's own facts (its shape, its
seed, its mask...) and, per output and criterion, the worst error against the bound it must stay under.

A family's check (`check(program, op, knobs, decoder) -> list[CaseOutcome]`) fills these; the command
reports them (each case in the JSON report, the worst per output on the object's line) and counts an
object within only when every measure of every case is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

Fact = int | float | str | bool


class Case(Protocol):
    def facts(self) -> dict[str, Fact]:
        """What a reader needs to rerun the case (shape, scales, seed index), as JSON values."""
        ...


@dataclass(frozen=True)
class Measure:
    """One output judged by one criterion: within when `error <= bound` (NaN and inf never are)."""

    output: str  # the buffer's name: "y", "dx", "o", "lse"
    criterion: str  # how `error` is measured, e.g. "relative", "3x low-precision reference"
    error: float
    bound: float
    dtype: str = ""  # the output's element type ("bf16", "f16", "f32"): the command's table has a column each

    @property
    def within(self) -> bool:
        return math.isfinite(self.error) and self.error <= self.bound


@dataclass
class CaseOutcome:
    case: Case
    measures: list[Measure] = field(default_factory=list)

    def add(self, output: str, criterion: str, error: float, bound: float, dtype: str = "") -> None:
        self.measures.append(Measure(output, criterion, error, bound, dtype))

    @property
    def within(self) -> bool:
        return bool(self.measures) and all(m.within for m in self.measures)
