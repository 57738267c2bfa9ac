"""Where a build's rows go, decided without Ray: which standing cluster the build uses, and whether it
relays its rows through that cluster's daemon (farm/execute/relay.py, no Ray in the build's process: its
import alone costs ~0.7 s of a small rebuild) or joins Ray itself (farm/execute/executor.py).

The daemon itself, which does need Ray, is farm/execute/standing.py.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from farm.execute import autostart, standing_use
from farm.execute.relay import RelayExecutor, connect
from farm.execute.settings import num_cpus
from farm.execute.standing_files import StandingState, health, mark_used, running

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
    state = running(cfg.root)
    if not autostart.off_reason(cfg) and (state is None or autostart.stale(state)):
        state = autostart.wait(cfg)
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
    if not standing_use.hold(cfg.root, state):
        log.warning("another build is replacing the standing cluster at %s; this build starts a private cluster",
                    state["address"])
        return None
    mark_used(cfg.root)
    log.info("using the standing cluster at %s (%s warm compilers; farm cluster down stops it)",
             state["address"], state["num_cpus"])
    return state


def done(root: Path) -> None:
    """The build no longer uses the standing cluster: its idle clock starts, and it may be replaced."""
    mark_used(root)
    standing_use.release(root)


def executor_for(executor_cfg: Mapping[str, Any], timeout_s: float, standing: StandingState | None) -> Any:
    """The build's executor: the standing cluster's relay when it has one that answers, else a RayExecutor
    (imported only then: Ray is the costly import)."""
    if standing is not None:
        conn = connect(standing)
        if conn is not None:
            log.info("rows go through the daemon's build socket: no Ray in this process")
            return RelayExecutor(conn, executor_cfg, timeout_s)
    from farm.execute.executor import RayExecutor

    return RayExecutor(executor_cfg, timeout_s, standing)
