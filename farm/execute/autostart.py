"""Warm by default: a `farm build` that finds no standing cluster starts one, the way Bazel's server and
Gradle's daemon start on first use and stop when idle.

The daemon is the one `farm cluster up` starts (farm/execute/standing.py): detached, in its own session,
stopping itself after executor.standing_idle_minutes without a build. A build starts it as soon as it knows a
row will compile (`begin`, from farm/build.py: after planning, or once the restore stage finds a row the
published tree does not give back), so the daemon's Ray start and warm-up overlap the rest of the build's
preparation, and a build that is up to date or restores every row starts nothing. When the build needs
compilers it waits for it (`wait`), never longer than WAIT_S, and on any failure builds on a private
cluster as before, saying why in one line. Two builds starting together start one daemon
(the daemon lock, farm/execute/standing_files.py): the second waits for the first's.

A daemon running older farm code (the farm was edited or upgraded since it started) would refuse this
build's bytes. The build replaces it, whoever started it, when no build is using it: it takes the in-use
lock exclusively without waiting (farm/execute/standing_use.py), stops the old daemon and every process
it started, and starts a new one, in one line. While another build uses the old one, this build uses a
private cluster, saying why; the next idle build replaces it. A daemon whose state file is damaged (a
`Stray`, found by its lock: farm/execute/standing_files.py) cannot be used either, and is replaced the same
way: never waited for, since it holds the daemon lock and would be waited for in vain.

Off with CI=true in the environment (a CI job must leave nothing running behind it) and with
executor.auto_start=false; then a build uses a standing cluster only when `farm cluster up` started one.

This module does not import Ray: `begin` runs before the build's compile code is loaded.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

import psutil

from farm.core.errors import FarmError
from farm.execute import standing_use
from farm.execute.settings import num_cpus
from farm.execute.standing_files import (
    STARTED_BY_BUILD,
    StandingState,
    Started,
    Stray,
    down,
    running,
    spawn,
    starting,
    stray,
    wait_up,
)
from farm.plan.digest import generator_digest

log = logging.getLogger(__name__)

CI_ENV = "CI"
# The longest a build waits for an auto-started daemon before it starts a private cluster instead. A
# private start on a loaded 2-core machine takes about this long too; the daemon keeps coming up for
# the next build.
WAIT_S = 60.0
DEFAULT_IDLE_MINUTES = 30.0

# The daemon this process started (`begin`), which `wait` waits for, per project root; and the roots
# where launching one failed (said once; the build goes on with a private cluster).
_started: dict[Path, Started] = {}
_failed: set[Path] = set()
# The roots where this process already judged a daemon of older farm code (once per command), and those
# where it already said why it does not use it.
_judged: set[Path] = set()
_said_stale: set[Path] = set()


def off_reason(cfg: Any) -> str | None:
    """Why this build does not start a standing cluster (None: it may)."""
    executor = cfg.executor
    if executor.get("kind") != "local" or not executor.get("standing", True):
        return "not a local build that uses a standing cluster"
    if not executor.get("auto_start", True):
        return "executor.auto_start=false"
    if os.environ.get(CI_ENV, "").strip().lower() in ("true", "1"):
        return f"{CI_ENV}=true"
    return None


def idle_minutes(cfg: Any) -> float:
    return float(cfg.executor.get("standing_idle_minutes") or DEFAULT_IDLE_MINUTES)


def stale(state: StandingState) -> bool:
    """Does the daemon run other farm code than this command (its compiles' bytes would be refused)?"""
    return state.get("generator") != _this_code()


@functools.cache
def _this_code() -> str:
    """The identity of the farm code this command runs, hashed once (~8 ms; a build asks up to three times)."""
    return generator_digest()


def _who(state: StandingState) -> str:
    by = state.get("started_by")
    return f" (started by {by})" if by and by != STARTED_BY_BUILD else ""


def say_stale(cfg: Any, state: StandingState) -> None:
    """The one line of a build that does not use a daemon of older farm code (unless already said)."""
    if cfg.cluster_root in _said_stale:
        return
    _said_stale.add(cfg.cluster_root)
    why = off_reason(cfg)
    log.warning("the standing cluster%s runs older farm code; this build starts a private cluster (%s)", _who(state),
                f"{why}: not replaced; farm cluster down && farm cluster up refreshes it" if why
                else "farm cluster down && farm cluster up refreshes it")


def begin(cfg: Any) -> None:
    """Start the daemon now unless auto-start is off or one is up or starting; returns at once. One of
    older farm code is replaced if no build uses it. A daemon that cannot even be launched is said in
    one line; the build then uses a private cluster."""
    if off_reason(cfg) or cfg.cluster_root in _started or cfg.cluster_root in _failed:
        return
    state = running(cfg.cluster_root)
    if state is not None:
        if cfg.cluster_root not in _judged and stale(state):
            _judged.add(cfg.cluster_root)
            _replace(cfg, state)
        return
    lost = stray(cfg.cluster_root)
    if lost is not None:
        if cfg.cluster_root not in _judged:
            _judged.add(cfg.cluster_root)
            _replace_stray(cfg, lost)
        return
    _spawn(cfg, None)


def _spawn(cfg: Any, replaced: str | None) -> None:
    """Launch the daemon (`replaced`: the old one it replaces, said in the same line)."""
    cpus = num_cpus(cfg.executor) or os.cpu_count() or 1
    try:
        started = spawn(cfg.cluster_root, cpus, idle_minutes(cfg))
    except (OSError, FarmError) as exc:
        _failed.add(cfg.cluster_root)
        log.warning("could not start a standing cluster (%s); this build uses a private cluster", exc)
        return
    if started is None:
        return  # another command is starting one (or just did): `wait` uses it
    _started[cfg.cluster_root] = started
    minutes = f"{started.idle_minutes:g}"
    what = "started a standing cluster" if replaced is None else f"replaced {replaced}: started a new one"
    log.warning("%s with %d warm compilers for this and later builds; it stops itself after %s idle minutes "
                "(`farm cluster down` stops it now)", what, cpus, minutes)


def _replace(cfg: Any, state: StandingState) -> None:
    """Stop a daemon of older farm code and start a new one, only while no build uses it."""
    root = cfg.cluster_root
    if standing_use.being_replaced(root):  # another build of this code is at it: use its new daemon
        standing_use.wait_replaced(root, WAIT_S)
        return
    if not standing_use.take_exclusive(root):
        _said_stale.add(root)
        log.warning("the standing cluster%s runs older farm code and another build is using it; this build "
                    "starts a private cluster (the next build replaces it once none uses it)", _who(state))
        return
    try:
        now = running(root)
        if now is None or now["pid"] != state["pid"]:
            return  # replaced or gone meanwhile: `wait` judges what is up now
        down(root)
        _spawn(cfg, f"a standing cluster{_who(state)} that ran older farm code")
    except (OSError, psutil.Error) as exc:
        _failed.add(root)
        _said_stale.add(root)
        log.warning("could not replace the standing cluster%s that runs older farm code (%s); this build uses "
                    "a private cluster", _who(state), exc)
    finally:
        standing_use.share(root)  # this build uses the new daemon: nobody may replace it under us


def _replace_stray(cfg: Any, lost: Stray) -> None:
    """Stop a daemon whose state file is damaged and start a new one, only while no build uses it; else say
    why this build uses a private cluster."""
    root = cfg.cluster_root
    if not standing_use.take_exclusive(root):
        _failed.add(root)
        log.warning("%s, and another build is using it; this build starts a private cluster (farm cluster down "
                    "stops that daemon)", lost.said)
        return
    try:
        now = stray(root)
        if now is None or now.process.pid != lost.process.pid:
            return  # stopped or replaced meanwhile: `wait` judges what is up now
        down(root)
        _spawn(cfg, f"a standing cluster whose state file {lost.why} (daemon pid {lost.process.pid})")
    except (OSError, psutil.Error) as exc:
        _failed.add(root)
        log.warning("%s; stopping it failed (%s); this build uses a private cluster (farm cluster down stops it)",
                    lost.said, exc)
    finally:
        standing_use.share(root)


def wait(cfg: Any) -> StandingState | None:
    """The standing cluster this build started, or the one another build is starting, once it is up;
    None when auto-start is off, or (with one line saying why) when it did not come up."""
    if off_reason(cfg):
        return None
    begin(cfg)  # a caller that did not begin early starts it here
    started = _started.get(cfg.cluster_root)
    if started is None and (cfg.cluster_root in _failed or not starting(cfg.cluster_root)):
        return running(cfg.cluster_root)
    try:
        return wait_up(cfg.cluster_root, started, WAIT_S)
    except FarmError as exc:
        log.warning("the standing cluster did not come up (%s; %s); this build starts a private cluster",
                    exc.what, exc.fix)
        return None
