"""Where a build's rows go, decided without Ray: which standing cluster the build uses, and whether it
relays its rows through that cluster's daemon (farm/execute/relay.py, no Ray in the build's process: its
import alone costs ~0.7 s of a small rebuild) or joins Ray itself (farm/execute/executor.py).

A relayed build whose daemon goes away or falls silent mid-build (no heartbeat: farm/execute/relay.py) keeps
the rows it already has and compiles the rest on a private cluster (`Relayed`), saying so in one line.

The daemon itself, which does need Ray, is farm/execute/standing.py.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from farm.contract import CompileRequest, CompileResult
from farm.execute import autostart, standing_use
from farm.execute.relay import DaemonLost, RelayExecutor, connect
from farm.execute.settings import BATCH_GATHER_S, heartbeat_timeout_s, num_cpus
from farm.execute.standing_files import StandingState, health, mark_used, running, stray

__all__ = ["done", "executor_for", "for_build", "mark_used"]

log = logging.getLogger("farm.execute.standing")


def for_build(cfg: Any) -> StandingState | None:
    """The standing cluster this build may use, or None (then it starts a private one). With auto-start on
    and none up, the build starts one (or waits for the one another build is starting); one running older
    farm code is replaced when no build uses it (farm/execute/autostart.py). While the build uses the
    cluster it holds the in-use lock (farm/execute/standing_use.py; `done` lets go). Notes go to the log."""
    if cfg.executor.get("kind") != "local" or not cfg.executor.get("standing", True):
        return None
    wanted = num_cpus(cfg.executor)  # a bad value is named here, before anything starts
    heartbeat_timeout_s()  # and a bad FARM_HEARTBEAT_TIMEOUT_S
    state = running(cfg.cluster_root)
    if not autostart.off_reason(cfg) and (state is None or autostart.stale(state)):
        state = autostart.wait(cfg)
    elif state is None and (lost := stray(cfg.cluster_root)) is not None:
        log.warning("%s; this build starts a private cluster (farm cluster down stops that daemon)", lost.said)
    if not state:
        return None
    problem = health(state)
    if problem:
        log.warning("the standing cluster is not usable: %s; this build starts a private cluster "
                    "(farm cluster down && farm cluster up restarts it)", problem)
        return None
    if autostart.stale(state):
        autostart.say_stale(cfg, state)
        return None
    if wanted and wanted != int(state["num_cpus"]):
        log.warning("executor.num_cpus=%s but the standing cluster has %s compilers; this build starts a "
                    "private cluster", wanted, state["num_cpus"])
        return None
    if not standing_use.hold(cfg.cluster_root, state):
        log.warning("another build is replacing the standing cluster at %s; this build starts a private cluster",
                    state["address"])
        return None
    mark_used(cfg.cluster_root)
    log.info("using the standing cluster at %s (%s warm compilers; farm cluster down stops it)",
             state["address"], state["num_cpus"])
    return state


def done(root: Path) -> None:
    """The build no longer uses the standing cluster: its idle clock starts, and it may be replaced."""
    mark_used(root)
    standing_use.release(root)


def executor_for(executor_cfg: Mapping[str, Any], timeout_s: float, standing: StandingState | None,
                 rows: int) -> Any:
    """The build's executor for `rows` rows: the standing cluster's relay when it has one that answers, else a
    RayExecutor (imported only then: Ray is the costly import)."""
    if standing is not None:
        conn = connect(standing)
        if conn is not None:
            log.info("rows go through the daemon's build socket: no Ray in this process")
            relay = RelayExecutor(conn, executor_cfg, timeout_s, standing.get("pid"), heartbeat_timeout_s())
            return Relayed(relay, executor_cfg, timeout_s)
    from farm.execute.executor import RayExecutor

    return RayExecutor(executor_cfg, timeout_s, standing, rows)


class Relayed:
    """The relay's interface, with a way out: when the daemon is lost mid-build (`DaemonLost`: it went away, or
    sent nothing for the heartbeat timeout), the rows that have a result stay the build's, and those without
    one compile on a private cluster of the build's own, as they would have if no daemon had been up."""

    def __init__(self, relay: RelayExecutor, executor_cfg: Mapping[str, Any], timeout_s: float) -> None:
        self._relay = relay
        self._cfg = executor_cfg
        self._timeout_s = timeout_s
        self._private: Any = None  # the RayExecutor that took over, once one did
        self._exit = contextlib.ExitStack()

    def __enter__(self) -> Relayed:
        self._exit.enter_context(self._relay)
        return self

    def __exit__(self, *exc: object) -> None:
        self._exit.close()

    @property
    def daemon_cpu_seconds(self) -> float | None:
        return self._relay.daemon_cpu_seconds

    def share_sources(self, sources: dict[str, bytes]) -> None:
        self._relay.share_sources(sources)

    def submit(self, request: CompileRequest) -> None:
        self._relay.submit(request)

    def completed_batches(self, gather_s: float = BATCH_GATHER_S) -> Iterator[list[CompileResult]]:
        done = 0
        try:
            for batch in self._relay.completed_batches(gather_s):
                done += len(batch)
                yield batch
            return
        except DaemonLost as lost:
            left = self._relay.left()
            log.warning("%s; this build compiles them on a private cluster (the %d rows it has are kept; %s)",
                        lost.what, done, lost.elsewhere)
        self._relay.close()
        yield from self._on_private_cluster(left, gather_s)

    def _on_private_cluster(self, left: list[CompileRequest], gather_s: float) -> Iterator[list[CompileResult]]:
        from farm.execute.executor import RayExecutor

        self._private = self._exit.enter_context(RayExecutor(self._cfg, self._timeout_s, rows=len(left)))
        self._private.share_sources(self._relay.sources)
        for request in left:
            self._private.submit(request)
        yield from self._private.completed_batches(gather_s)

    def taken_unix(self, key: str) -> float | None:
        found = self._relay.taken_unix(key)
        return found if found is not None or self._private is None else self._private.taken_unix(key)

    def returned_unix(self, key: str) -> float | None:
        found = self._relay.returned_unix(key)
        return found if found is not None or self._private is None else self._private.returned_unix(key)
