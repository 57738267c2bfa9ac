"""What a build shows while it compiles, on stderr: a tqdm bar on a terminal, otherwise a log line about
every 10 s (FARM_PROGRESS_INTERVAL_S=SECONDS sets the interval): done/total, rate, ETA and the slowest
row in flight, e.g.

    progress: 120/1453 rows, 2.41 rows/s, ETA 9m13s; 2 in flight, slowest sdpa_cdna/gfx942/... (38 s)

The bar's postfix shows the same rows in flight. Which rows are in flight is the driver's estimate:
rows go to Ray in submission order and Ray starts equal tasks first come, first served, so a row counts
as started when it is among the first `slots` rows not yet back. It is shown to people; nothing is
decided by it. `-q` (farm.core.log) shows neither bar nor lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from farm.core.errors import FarmError

INTERVAL_ENV = "FARM_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 10.0
BAR_REFRESH_S = 1.0  # the bar's "oldest in flight" ages by the second

log = logging.getLogger(__name__)


def interval_s() -> float:
    """Seconds between two progress lines: FARM_PROGRESS_INTERVAL_S, else 10."""
    raw = os.environ.get(INTERVAL_ENV)
    if raw is None or raw == "":
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise FarmError(f"{INTERVAL_ENV}={raw!r} is not a positive number of seconds",
                        f"set it to e.g. 10, or unset {INTERVAL_ENV}")
    return value


def worker_slots(executor: Mapping[str, Any], standing: Mapping[str, Any] | None) -> int:
    """How many rows compile at once: the standing cluster's compilers, else the executor's CPUs."""
    if standing:
        return max(1, int(standing.get("num_cpus") or 1))
    configured = executor.get("num_cpus")
    if isinstance(configured, int) and configured > 0:
        return configured
    if executor.get("kind") == "cluster":
        # Only Ray knows a remote cluster's size; the executor has already imported and started it.
        import ray

        return max(1, int(ray.cluster_resources().get("CPU", 1)))
    return os.cpu_count() or 1


class InFlight:
    """The rows compiling now (estimated, see the module's docstring) and since when."""

    def __init__(self, order: Iterable[str], slots: int, now: float) -> None:
        self.slots = max(1, slots)
        self._waiting: deque[str] = deque(order)
        self._back: set[str] = set()  # came back while still counted as waiting (Ray ran it early)
        self._running: dict[str, float] = {}
        self._fill(now)

    def _fill(self, now: float) -> None:
        while len(self._running) < self.slots and self._waiting:
            key = self._waiting.popleft()
            if key in self._back:
                self._back.discard(key)
            else:
                self._running[key] = now

    def finished(self, key: str, now: float) -> None:
        if self._running.pop(key, None) is None:
            self._back.add(key)
        self._fill(now)

    def __len__(self) -> int:
        return len(self._running)

    def oldest(self, now: float) -> tuple[str, float] | None:
        """The row in flight the longest, and for how many seconds."""
        if not self._running:
            return None
        key = min(self._running, key=lambda k: (self._running[k], k))
        return key, now - self._running[key]


@dataclass(frozen=True)
class Status:
    """One moment of a build, as the progress line and the bar's postfix say it."""

    done: int
    total: int
    elapsed_s: float
    in_flight: int
    oldest: tuple[str, float] | None
    phase: str = "compiling"  # or "restoring": rows looked up in the DVC cache (farm/restore/)
    restored: int = 0

    @property
    def rate(self) -> float:
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None

    def line(self) -> str:
        eta = duration(self.eta_s) if self.eta_s is not None else "unknown"
        if self.phase == "restoring":  # nothing is in flight: rows are fetched and verified one directory at a time
            return (f"progress: restoring {self.done}/{self.total} rows: {self.restored} restored, "
                    f"{self.done - self.restored} to compile; {self.rate:.2f} rows/s, ETA {eta}")
        return (f"progress: {self.done}/{self.total} rows, {self.rate:.2f} rows/s, ETA {eta}; "
                f"{self.in_flight} in flight" + self._slowest(", slowest {key} ({age})"))

    def postfix(self) -> str:
        if self.phase == "restoring":
            return f"{self.restored} restored, {self.done - self.restored} to compile"
        return f"{self.in_flight} in flight" + self._slowest(", oldest {key} {age}")

    def _slowest(self, form: str) -> str:
        return form.format(key=self.oldest[0], age=duration(self.oldest[1])) if self.oldest else ""


def duration(seconds: float) -> str:
    """12 s, 3m05s, 1h02m: short enough for a bar's postfix."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class BuildProgress:
    """Context manager around the compile phase. The build calls `update(1)` per row handled and `write`
    for a row's failure (the interface of a tqdm bar), and reads results through `watch(pool)`, which
    tells the estimate which rows came back."""

    def __init__(self, order: list[str], slots: int, file: TextIO, period_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic, phase: str = "compiling") -> None:
        self.phase = phase
        self.restored = 0
        self.total = len(order)
        self.file = file
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.in_flight = InFlight(order, slots, self.started)
        self.bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._period = interval_s() if period_s is None else period_s
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> BuildProgress:
        if not log.isEnabledFor(logging.INFO):  # -q: warnings and errors only
            return self
        if _is_terminal(self.file):
            # Imported only for a terminal: tqdm's logging bridge loads asyncio, ~0.1 s of every build's start.
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self.bar = tqdm(total=self.total, desc=self.phase, unit="obj", file=self.file)
            # Log records (a FAILED row, notes) print above the bar instead of through it.
            self._stack.enter_context(logging_redirect_tqdm(loggers=[logging.getLogger("farm")]))
            self._period = min(self._period, BAR_REFRESH_S)
        self._ticker = threading.Thread(target=self._tick, name="farm-progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.bar is not None:
            self.bar.close()
        self._stack.close()

    def status(self) -> Status:
        with self._lock:
            now = self.clock()
            return Status(self.done, self.total, now - self.started, len(self.in_flight), self.in_flight.oldest(now),
                          self.phase, self.restored)

    def update(self, n: int = 1, restored: int = 0) -> None:
        """`n` rows handled; while restoring, `restored` of them came back from the cache."""
        with self._lock:
            self.done += n
            self.restored += restored
        if self.bar is not None:
            self.bar.update(n)

    def write(self, message: str, file: TextIO | None = None) -> None:
        """A row's failure, said when it happens (the build's summary repeats it with its stderr)."""
        log.warning(message)

    def finished(self, keys: Iterable[str]) -> None:
        with self._lock:
            now = self.clock()
            for key in keys:
                self.in_flight.finished(key, now)
        if self.bar is not None:
            self.bar.set_postfix_str(self.status().postfix())

    def watch(self, pool: Any) -> Watched:
        return Watched(pool, self)

    def _tick(self) -> None:
        while not self._stop.wait(self._period):
            status = self.status()
            if self.bar is not None:
                self.bar.set_postfix_str(status.postfix())
            else:
                log.info(status.line())


class Watched:
    """A pool whose finished batches are reported to the progress before the build handles them."""

    def __init__(self, pool: Any, progress: BuildProgress) -> None:
        self._pool = pool
        self._progress = progress

    def completed_batches(self, *args: Any, **kwargs: Any) -> Iterator[list[Any]]:
        for batch in self._pool.completed_batches(*args, **kwargs):
            self._progress.finished(result.key for result in batch)
            yield batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def _is_terminal(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a terminal
        return False
