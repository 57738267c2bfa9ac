"""A build's timeline in the Chrome trace event format (opens in Perfetto and chrome://tracing).

One process per node and one lane (thread) per worker; each row is a complete event ("ph": "X")
spanning its task on that worker, from the wall-clock times the worker reported, with its worker-side
phases (fork, front_end, codegen, ...) nested inside it as complete events of their own. The driver is one
more process with one lane: its own work (Ray submit and results, disassembly, acceptance, writes,
manifest flushes), and each row's driver phases ([parcel_wait,] ray_return, verify, write) as that row's events in a
second driver lane, so a reader sees where the driver spends its time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from farm.contract import PhaseJson


class TimedRow(TypedDict, total=False):
    """The fields of a build report row the timeline reads (farm/observe/report.py `ReportRow` has them all).
    A row that never ran on a worker (a re-verify) has no times and no lane."""

    key: str  # op/target/name
    ok: bool
    node: str | None
    pid: int | None  # the worker process: the row's lane
    started_unix: float | None
    finished_unix: float | None
    compile_seconds: float | None
    max_rss_mib: float | None
    error: str | None
    warnings: list[str] | None
    phases: list[PhaseJson]  # worker phases, then the driver's ([parcel_wait,] ray_return, verify, write)


class TraceEvent(TypedDict, total=False):
    """One event of the trace: metadata ("M") naming a process or lane, or a complete event ("X")."""

    ph: str
    name: str
    cat: str
    pid: int
    tid: int
    ts: int  # microseconds since the build's first start
    dur: int
    args: dict[str, object]


class Trace(TypedDict):
    traceEvents: list[TraceEvent]
    displayTimeUnit: str


# Phases the driver appends to a row (farm/build.py); every other phase ran on the row's worker.
DRIVER_PHASES = ("parcel_wait", "ray_return", "verify", "write")
DRIVER_PID = 0  # the driver's process in the trace (nodes count from 1)
# Its lanes: its main thread, the rows' driver phases, its verify thread.
DRIVER_WORK, DRIVER_ROWS, DRIVER_VERIFY = 0, 1, 2


def chrome_trace(rows: Sequence[TimedRow], driver: Sequence[PhaseJson] = (),
                 verifying: Sequence[PhaseJson] = ()) -> Trace:
    """The timeline of a build's rows, and of the driver's own work (`driver`: its main thread's spans in time
    order; `verifying`: its verify thread's)."""
    # Only rows with both times are drawn, so indexing them below is safe.
    timed = [r for r in rows if r.get("started_unix") is not None and r.get("finished_unix") is not None]
    starts = [r["started_unix"] for r in timed] + [p["start_unix"] for p in (*driver, *verifying)]
    origin = min(starts, default=0.0)
    nodes = {node: i + 1 for i, node in enumerate(sorted({str(r.get("node")) for r in timed}))}
    events: list[TraceEvent] = _driver_lanes(rows, driver, verifying, origin)
    for node, pid in nodes.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"node {node}"}})
    lanes: set[tuple[int, int]] = set()
    for r in sorted(timed, key=lambda r: (r["started_unix"], r["key"])):
        pid, tid = nodes[str(r.get("node"))], int(r.get("pid") or 0)
        if (pid, tid) not in lanes:
            lanes.add((pid, tid))
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                           "args": {"name": f"worker pid {tid}"}})
        events.append({
            "ph": "X", "name": r["key"], "cat": "compile" if r.get("ok") else "failed", "pid": pid, "tid": tid,
            "ts": _us(r["started_unix"] - origin),
            "dur": _us(r["finished_unix"] - r["started_unix"]),
            "args": {k: r.get(k) for k in ("compile_seconds", "max_rss_mib", "error") if r.get(k) is not None}
            | {"warnings": len(r.get("warnings") or [])},
        })
        events += [_phase_event(p, r["key"], pid, tid, origin) for p in r.get("phases") or []
                   if p["name"] not in DRIVER_PHASES]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _driver_lanes(rows: Sequence[TimedRow], driver: Sequence[PhaseJson], verifying: Sequence[PhaseJson],
                  origin: float) -> list[TraceEvent]:
    """The driver's process: its main thread's work in one lane, its verify thread's in another, the rows'
    driver phases in a third."""
    events: list[TraceEvent] = [
        {"ph": "M", "name": "process_name", "pid": DRIVER_PID, "tid": 0, "args": {"name": "driver"}},
        {"ph": "M", "name": "thread_name", "pid": DRIVER_PID, "tid": DRIVER_WORK, "args": {"name": "driver work"}},
        {"ph": "M", "name": "thread_name", "pid": DRIVER_PID, "tid": DRIVER_ROWS,
         "args": {"name": "rows on the driver"}},
        {"ph": "M", "name": "thread_name", "pid": DRIVER_PID, "tid": DRIVER_VERIFY,
         "args": {"name": "driver verify thread"}},
    ]
    events += [{"ph": "X", "name": span["name"], "cat": "driver", "pid": DRIVER_PID, "tid": tid,
                "ts": _us(span["start_unix"] - origin), "dur": _us(span["seconds"])}
               for tid, spans in ((DRIVER_WORK, driver), (DRIVER_VERIFY, verifying)) for span in spans]
    for r in rows:
        events += [_phase_event(p, r.get("key", "?"), DRIVER_PID, DRIVER_ROWS, origin)
                   for p in r.get("phases") or [] if p["name"] in DRIVER_PHASES]
    return events


def _phase_event(phase: PhaseJson, key: str, pid: int, tid: int, origin: float) -> TraceEvent:
    return {"ph": "X", "name": phase["name"], "cat": "phase", "pid": pid, "tid": tid,
            "ts": _us(phase["start_unix"] - origin), "dur": _us(phase["seconds"]), "args": {"row": key}}


def _us(seconds: float) -> int:
    return round(seconds * 1e6)
