"""Where a row's time goes, the in-process way and the farm's way side by side (bench/throughput.py).

Phases follow the farm's contract (farm/contract.py `Phase`): per row, a list in time order of
{"name", "start_unix", "seconds"}. The farm's build report carries them per row (worker phases, then the
driver's); the sequential way records the in-process ones itself (bench/sequential_generator.py).
The table gives mean seconds per row per phase, over the rows that have phases.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypedDict

from farm.observe.trace import DRIVER_PHASES  # the phases the driver appends to a row


class PhaseRecord(TypedDict):
    """One phase of one row, as a report row's `phases` list holds it."""

    name: str
    start_unix: float
    seconds: float


# The contract's worker phases in time order ("warmup": a row that started its worker's warm server; "other":
# what could not be attributed); the driver's follow them (DRIVER_PHASES, the farm's own list).
WORKER_PHASES = ("prepare", "warmup", "fork", "front_end", "mlir_passes", "handoff", "codegen", "link", "return",
                 "other")
# In one process that compiles row after row there is no fork, hand-off or return, and codegen runs with
# its link inside one call: the in-process way is measured as these three.
IN_PROCESS_PHASES = ("front_end", "mlir_passes", "codegen+link")
# Table lines where one side's phases are summed to match the other's.
JOINED = {"codegen+link": ("codegen", "link")}


def mean_per_row(rows: Iterable[Sequence[PhaseRecord]]) -> tuple[dict[str, float], int]:
    """Mean seconds per row of each phase name over `rows` (a row without a phase counts 0 for it),
    and how many rows had phases at all."""
    totals: dict[str, float] = {}
    count = 0
    for phases in rows:
        if not phases:
            continue
        count += 1
        for phase in phases:
            totals[phase["name"]] = totals.get(phase["name"], 0.0) + float(phase["seconds"])
    return ({name: total / count for name, total in totals.items()} if count else {}), count


def farm_rows_phases(report_rows: Iterable[Mapping[str, object]]) -> list[list[PhaseRecord]]:
    """The `phases` list of each compiled row of a build report (re-verified rows have none)."""
    found: list[list[PhaseRecord]] = []
    for row in report_rows:
        phases = row.get("phases")
        if row.get("ok") and isinstance(phases, list):
            found.append(phases)
    return found


def coverage(report_rows: Iterable[Mapping[str, object]]) -> tuple[float, float]:
    """(summed worker-phase seconds, summed worker `seconds`) over the compiled rows with phases: the
    contract says the first covers the second to within a few ms per row."""
    phased = worker = 0.0
    for row in report_rows:
        phases, seconds = row.get("phases"), row.get("seconds")
        if not row.get("ok") or not isinstance(phases, list) or not phases or not isinstance(seconds, int | float):
            continue
        phased += sum(float(p["seconds"]) for p in phases if p["name"] not in DRIVER_PHASES)
        worker += float(seconds)
    return phased, worker


def _value(means: Mapping[str, float], name: str) -> float | None:
    if name in means:
        return means[name]
    parts = [means[p] for p in JOINED.get(name, ()) if p in means]
    return sum(parts) if parts else None


def _cell(value: float | None) -> str:
    return f"{value:10.3f}" if value is not None else f"{'-':>10}"


def render(in_process: Mapping[str, float], farm: Mapping[str, float], in_rows: int, farm_rows: int) -> list[str]:
    """The side-by-side table as lines: one per phase (the farm's codegen and link also summed to match
    the in-process codegen+link), then the worker total, and the total with the driver's phases."""
    lines = [f"  {'phase (mean s/row)':20}{'in-process':>10}{'farm':>10}   "
             f"(rows with phases: in-process {in_rows}, farm {farm_rows})"]
    names = [*WORKER_PHASES[:6], "codegen+link", *WORKER_PHASES[6:], *DRIVER_PHASES]
    extra = sorted(set(farm) - set(names))  # names outside the contract are shown, never dropped
    for name in [*names, *extra]:
        ours, theirs = _value(in_process, name), _value(farm, name)
        if ours is None and theirs is None:
            continue
        indent = "    " if name in JOINED["codegen+link"] else "  "
        lines.append(f"{indent}{name:{22 - len(indent)}}{_cell(ours)}{_cell(theirs)}")
    worker = sum(v for k, v in farm.items() if k not in DRIVER_PHASES)
    in_total = sum(in_process.values())
    lines.append(f"  {'worker total':20}{_cell(in_total if in_process else None)}{_cell(worker if farm else None)}")
    lines.append(f"  {'with the driver':20}{_cell(None)}{_cell(sum(farm.values()) if farm else None)}")
    return lines
