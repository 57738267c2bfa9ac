"""A build's timeline in the Chrome trace event format (opens in Perfetto and chrome://tracing).

One process per node and one lane (thread) per worker; each row is a complete event ("ph": "X")
spanning its task on that worker, from the wall-clock times the worker reported.
"""

from __future__ import annotations

from typing import Any


def chrome_trace(rows: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [r for r in rows if r.get("started_unix") is not None and r.get("finished_unix") is not None]
    origin = min((r["started_unix"] for r in timed), default=0.0)
    nodes = {node: i + 1 for i, node in enumerate(sorted({str(r.get("node")) for r in timed}))}
    events: list[dict[str, Any]] = []
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
