"""A build's timeline in the Chrome trace event format (opens in Perfetto and chrome://tracing).

One process per node and one lane (thread) per worker; each row is a complete event ("ph": "X")
spanning its task on that worker, from the wall-clock times the worker reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict


class TimedRow(TypedDict, total=False):
    """The fields of a build report row the timeline reads (farm/store/report.py `ReportRow` has them all).
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


def chrome_trace(rows: Sequence[TimedRow]) -> Trace:
    # Only rows with both times are drawn, so indexing them below is safe.
    timed = [r for r in rows if r.get("started_unix") is not None and r.get("finished_unix") is not None]
    origin = min((r["started_unix"] for r in timed), default=0.0)
    nodes = {node: i + 1 for i, node in enumerate(sorted({str(r.get("node")) for r in timed}))}
    events: list[TraceEvent] = []
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
            "ts": round((r["started_unix"] - origin) * 1e6),
            "dur": round((r["finished_unix"] - r["started_unix"]) * 1e6),
            "args": {k: r.get(k) for k in ("compile_seconds", "max_rss_mib", "error") if r.get(k) is not None}
            | {"warnings": len(r.get("warnings") or [])},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}

