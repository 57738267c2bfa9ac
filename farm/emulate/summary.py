"""`farm emulate`'s table, family by target: objects, within, outside, not emulated, the worst error per output
type and the seconds its objects took (summed over their tasks, not wall time).

An output type's worst error is the error of the measure nearest its bound among the group's outputs of that
type, shown as error/bound ("-": no output of that type). Measures that name no type go to a "?" column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from farm.emulate.task import ObjectResult

TYPES = ("bf16", "f16", "f32")  # always shown, in this order; any other type a family names follows


@dataclass
class Group:
    objects: int = 0
    within: int = 0
    outside: int = 0
    not_emulated: int = 0
    seconds: float = 0.0
    worst: dict[str, tuple[float, float]] = field(default_factory=dict)  # type -> (error, bound)

    def add(self, result: ObjectResult) -> None:
        self.objects += 1
        self.within += result.within
        self.outside += result.emulated and not result.within
        self.not_emulated += not result.emulated
        self.seconds += result.seconds
        for outcome in result.outcomes if result.emulated else []:
            for m in outcome.measures:
                kind = m.dtype or "?"
                if kind not in self.worst or _nearer(m.error, m.bound, *self.worst[kind]):
                    self.worst[kind] = (m.error, m.bound)

    def as_json(self) -> dict[str, object]:
        return {"objects": self.objects, "within": self.within, "outside": self.outside,
                "not_emulated": self.not_emulated, "seconds": round(self.seconds, 3),
                "worst": {k: {"error": _text(e), "bound": b} for k, (e, b) in sorted(self.worst.items())}}


def _nearer(error: float, bound: float, than_error: float, than_bound: float) -> bool:
    """Is error/bound nearer its bound (or further past it) than the other? NaN is the furthest; a measure
    that must be exact (bound 0) is at 0 when it is, past any bound when not."""
    return _ratio(error, bound) > _ratio(than_error, than_bound)


def _ratio(error: float, bound: float) -> float:
    if math.isnan(error):
        return math.inf
    if bound > 0:
        return error / bound
    return 0.0 if error <= 0 else math.inf


def _text(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def groups(results: list[ObjectResult]) -> dict[tuple[str, str], Group]:
    """(op, target) -> its group, sorted."""
    found: dict[tuple[str, str], Group] = {}
    for result in sorted(results, key=lambda r: r.key):
        found.setdefault((result.op, result.target), Group()).add(result)
    return dict(sorted(found.items()))


def table(found: dict[tuple[str, str], Group]) -> list[str]:
    """The table's lines: a header, a line per family and target, a total line."""
    total = Group()
    for group in found.values():
        for name in ("objects", "within", "outside", "not_emulated"):
            setattr(total, name, getattr(total, name) + getattr(group, name))
        total.seconds += group.seconds
        for kind, (e, b) in group.worst.items():
            if kind not in total.worst or _nearer(e, b, *total.worst[kind]):
                total.worst[kind] = (e, b)
    kinds = list(TYPES) + sorted({k for g in found.values() for k in g.worst} - set(TYPES))
    header = ["family", "target", "objects", "within", "outside", "not emulated",
              *(f"worst {k}" for k in kinds), "seconds"]
    lines = [[op, target, *_cells(g, kinds)] for (op, target), g in found.items()]
    lines.append(["all", "", *_cells(total, kinds)])
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths,
                                                                                                   strict=True)))
            .rstrip() for line in [header, *lines]]


def _cells(group: Group, kinds: list[str]) -> list[str]:
    worst = [f"{group.worst[k][0]:.1e}/{group.worst[k][1]:.1e}" if k in group.worst else "-" for k in kinds]
    return [str(group.objects), str(group.within), str(group.outside), str(group.not_emulated), *worst,
            f"{group.seconds:.1f}"]
