"""The driver's own cost: CPU seconds per row by kind of work, for the build report (issue 16 point 5).

One driver feeds every worker, so its CPU per row bounds how many cores it can keep busy: cores = a row's
worker seconds / the driver's CPU seconds per row. The cost is counted while rows flow (re-verifying, and
from the first row sent to Ray until the last result is written); starting the cluster is a fixed cost of
a build, not a row's, and is left out.

- `verify`, `write`, `ray`: the CPU (time.thread_time) of the driver's own threads in the batch disassembly
  and the acceptance checks; the object writes and manifest flushes (both on the build's verify thread,
  farm/build.py `VerifyThread`); submitting rows and taking results from Ray (wait, get, deserialize), or
  from the standing cluster's daemon when it relays them (the main thread).
- `threads`: the CPU of the driver's other threads (Ray's core-worker threads receiving results and keeping
  the connection, the progress ticker): process CPU that is neither the main thread's nor the verify
  thread's. Much of it runs per second of the build, not per row, so on a small cluster it weighs on each
  row more than on a large one.
- `other`: the rest of the main and verify threads' CPU in those windows (the build loop, report rows,
  progress).
- `disassembler_cpu_seconds`: the disassembler processes the driver runs (children's rusage): a real cost
  of the driver's machine, named apart because it is not the driver process's own CPU.
- `daemon_cpu_seconds`: when the rows went through the standing cluster's daemon (farm/execute/relay.py),
  the daemon's CPU for them: the Ray work a build that joins Ray does in its own process moved there. It is
  central work too, so it counts against how many cores one driver can feed. None: no daemon in between.

The build's steps report to the recorder of the build under way (`recording`), from whichever thread they run
on, instead of being handed it: `phase` for a kind of work, `helper_thread` for a thread of the build's own,
`one_time` for the build's one-time work, `rows_done` and `daemon_cpu`. Outside `recording` they record nothing.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TypedDict

from farm.contract import PhaseJson

SECTIONS = ("verify", "write", "ray")


class DriverBreakdown(TypedDict):
    verify: float
    write: float
    ray: float
    threads: float
    other: float


class DriverReport(TypedDict):
    """`driver` of a build report; seconds are CPU seconds. ms_per_row = cpu_seconds * 1000 / rows."""

    rows: int  # rows the driver verified in the windows counted (compiled results and re-verified rows)
    cpu_seconds: float  # the driver process's CPU in those windows (all its threads)
    ms_per_row: float
    breakdown: DriverBreakdown  # sums to cpu_seconds
    disassembler_cpu_seconds: float  # its child processes (llvm-objdump), not in cpu_seconds
    disassembler_ms_per_row: float
    daemon_cpu_seconds: float | None  # the standing cluster's daemon, for relayed rows; not in cpu_seconds
    daemon_ms_per_row: float | None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class DriverCost:
    """Counts the driver's CPU inside `window()`s, and its main thread's in each named `section()`."""

    def __init__(self) -> None:
        self.rows = 0
        self.process = 0.0
        self.main = 0.0
        # The CPU of the build's own threads besides the main one (its verify thread, its disassembly threads;
        # they start and end inside a window), added by each; the lock guards it and `sections` between threads.
        self.helper = 0.0
        self.excluded = 0.0  # one-time work inside a window, left out of the rows' cost (`exclude`)
        self._lock = threading.Lock()
        self.children = 0.0
        self.sections = dict.fromkeys(SECTIONS, 0.0)
        # The driver's work in time order, for the timeline's driver lanes: the thread that made this counter
        # (the build's main thread) and the others (the build's verify thread).
        self.owner = threading.get_ident()
        self.spans: list[PhaseJson] = []
        self.verify_spans: list[PhaseJson] = []
        self.daemon: float | None = None  # the relaying daemon's CPU for these rows, as it said

    @contextmanager
    def window(self) -> Iterator[None]:
        """A stretch of the build in which rows flow: its CPU counts."""
        process, main, children = time.process_time(), time.thread_time(), _children_cpu()
        try:
            yield
        finally:
            self.process += time.process_time() - process
            self.main += time.thread_time() - main
            self.children += _children_cpu() - children

    @contextmanager
    def section(self, name: str, span: str | None = None) -> Iterator[None]:
        """The calling thread's CPU spent on one kind of work (one of SECTIONS), inside a window; its wall-clock
        span is kept for the timeline's driver lanes, as `span` (default: the section's name)."""
        start, wall = time.thread_time(), time.time()
        try:
            yield
        finally:
            with self._lock:
                self.sections[name] += time.thread_time() - start
            lane = self.spans if threading.get_ident() == self.owner else self.verify_spans
            lane.append(PhaseJson(name=span or name, start_unix=wall, seconds=time.time() - wall))

    def count(self, name: str, cpu_seconds: float) -> None:
        """CPU one of the build's own threads spent on `name` (one of SECTIONS), with no span of its own."""
        with self._lock:
            self.sections[name] += cpu_seconds

    def add_helper(self, cpu_seconds: float) -> None:
        """The whole CPU of one of the build's own threads besides the main one, when it ends."""
        with self._lock:
            self.helper += cpu_seconds

    def exclude(self, cpu_seconds: float) -> None:
        """CPU that one of the build's own threads (counted by `add_helper`) spent inside a window on the
        build's one-time work (deriving the verifier record): the build's cost, not its rows'."""
        with self._lock:
            self.excluded += cpu_seconds

    def report(self) -> DriverReport:
        rows = max(self.rows, 1)
        process, helper = self.process - self.excluded, self.helper - self.excluded
        # The driver's other threads: Ray's, the progress ticker.
        threads = max(process - self.main - helper, 0.0)
        verify, write, ray = self.sections["verify"], self.sections["write"], self.sections["ray"]
        other = process - verify - write - ray - threads
        return {
            "rows": self.rows,
            "cpu_seconds": round(process, 6),
            "ms_per_row": round(process * 1000 / rows, 3),
            "breakdown": {"verify": round(verify, 6), "write": round(write, 6), "ray": round(ray, 6),
                          "threads": round(threads, 6), "other": round(other, 6)},
            "disassembler_cpu_seconds": round(self.children, 6),
            "disassembler_ms_per_row": round(self.children * 1000 / rows, 3),
            "daemon_cpu_seconds": None if self.daemon is None else round(self.daemon, 6),
            "daemon_ms_per_row": None if self.daemon is None else round(self.daemon * 1000 / rows, 3),
        }

    def line(self) -> str:
        """The one line `farm build` prints about its driver."""
        found = self.report()
        per = {k: v * 1000 / max(found["rows"], 1) for k, v in found["breakdown"].items()}
        daemon = found["daemon_ms_per_row"]
        return (f"driver: {found['ms_per_row']:.2f} ms CPU per row over {found['rows']} rows (verify "
                f"{per['verify']:.2f}, write {per['write']:.2f}, ray {per['ray']:.2f}, Ray's threads "
                f"{per['threads']:.2f}); disassembler processes {found['disassembler_ms_per_row']:.2f} ms per row"
                + ("" if daemon is None else f"; relaying daemon {daemon:.2f} ms per row"))


# The recorder of the build this process runs (one at a time), None between builds: read from every thread.
_current: DriverCost | None = None


@contextmanager
def recording(cost: DriverCost) -> Iterator[DriverCost]:
    """The build's steps report to `cost` for the block."""
    global _current
    previous, _current = _current, cost
    try:
        yield cost
    finally:
        _current = previous


@contextmanager
def window() -> Iterator[None]:
    """A stretch in which rows flow (`DriverCost.window`) of the build being recorded."""
    with _current.window() if _current is not None else nullcontext():
        yield


@contextmanager
def phase(name: str, span: str | None = None) -> Iterator[None]:
    """The calling thread's CPU on one kind of work (`DriverCost.section`)."""
    with _current.section(name, span) if _current is not None else nullcontext():
        yield


@contextmanager
def helper_thread(work: str | None = None) -> Iterator[None]:
    """The block is the whole life of one of the build's own threads besides the main one: its CPU is the
    driver's, counted to `work` (one of SECTIONS) too when given."""
    cost, started = _current, time.thread_time()
    try:
        yield
    finally:
        if cost is not None:
            spent = time.thread_time() - started
            cost.add_helper(spent)
            if work is not None:
                cost.count(work, spent)


@contextmanager
def one_time() -> Iterator[None]:
    """The build's one-time work on one of its helper threads: not the rows' cost (`DriverCost.exclude`)."""
    cost, started = _current, time.thread_time()
    try:
        yield
    finally:
        if cost is not None:
            cost.exclude(time.thread_time() - started)


def rows_done(count: int) -> None:
    """`count` more rows verified."""
    if _current is not None:
        with _current._lock:
            _current.rows += count


def daemon_cpu(seconds: float | None) -> None:
    """The relaying daemon's CPU for the rows, as it said (None: no daemon in between)."""
    if _current is not None:
        _current.daemon = seconds
