"""The standing local cluster: one Ray cluster on loopback with warm compilers, kept between builds.

A private cluster costs every `farm build` about 5 s of Ray start and stop plus each worker's
warm-up (imports): more than the compiles of a small change. A daemon owns a local Ray cluster and one
named compile actor per CPU, each with its warm zygote; while it is up, `farm build` (executor=local)
connects to it instead of starting its own. `farm cluster up` starts it, and so does a build that finds
none (farm/execute/autostart.py: warm by default, off with CI=true or executor.auto_start=false).
`farm cluster down` stops it; it also stops by itself after `idle_minutes` without a build.

A build sends its rows through the daemon's build socket instead of joining Ray itself
(farm/execute/relay.py, farm/execute/relay_server.py). Each compile still forks from its actor's zygote
(farm/execute/compiler.py, farm/worker/warm.py), so rows stay isolated exactly as on a private cluster.
The daemon's state file says where the cluster is and which farm code its actors run; a build whose farm
code differs does not use it (it would refuse the bytes). Its files, and the lock that lets only one
daemon start, are in farm/execute/standing_files.py; a build on a cluster that does not answer falls back
to a private one.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import ray

from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.core.log import configure
from farm.execute import autostart, local, ray_compat, standing_use
from farm.execute.compiler import CONCURRENCY, Compiler, WarmUp
from farm.execute.local import num_cpus
from farm.execute.processes import forget_ray_processes, identity, record_ray_processes, verified
from farm.execute.relay import relay_code
from farm.execute.relay_server import RelayServer
from farm.execute.standing_files import (
    RAY_CORE,
    STARTED_BY_BUILD,
    STARTED_BY_UP,
    STATE_FILE,
    TOKEN_FILE,
    USED_FILE,
    StandingState,
    daemon_by_lock,
    down,
    health,
    hold_lock,
    mark_used,
    read_token,
    running,
    spawn,
    state_dir,
    stray,
    wait_up,
)
from farm.plan.digest import generator_digest
from farm.table import config as config_mod

# Run as the daemon (`python -m`), this module is __main__: its notes still belong under the farm's logger.
log = logging.getLogger("farm.execute.standing")

# Names the CLI and the build use from here.
__all__ = ["StandingState", "daemon_by_lock", "down", "health", "mark_used", "num_cpus", "running", "stray", "up"]

NAMESPACE = "farm-standing"
ACTOR_PREFIX = "farm-compiler-"
START_TIMEOUT_S = 180.0
JOIN_TIMEOUT_S = 30.0       # a build's wait for the warm actors to answer once it has joined
# The relay code this daemon runs, as it was imported (the files may be edited while it runs).
RELAY_CODE = relay_code()
# The daemon's compilers: Ray restarts a dead one in place and retries its call (its row is not lost).
STANDING_ACTOR = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=2, **CONCURRENCY)(Compiler)


def actor_name(index: int) -> str:
    return f"{ACTOR_PREFIX}{index}"


def use_token(root: Path) -> None:
    """Make this process's Ray (started or joined next) use the standing cluster's token."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(state_dir(root) / TOKEN_FILE)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    ray_compat.reload_auth_config()


def drop_token() -> None:
    """Undo use_token (a build that could not join the standing cluster starts a private one)."""
    os.environ.pop("RAY_AUTH_MODE", None)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    ray_compat.reload_auth_config()


# --- the daemon ---------------------------------------------------------------------------------------

def serve(root: Path, cpus: int, idle_s: float, lock_fd: int, by: str) -> int:
    """The daemon's body: start the cluster and the warm compilers, publish the state, wait."""
    hold_lock(lock_fd)
    use_token(root)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    where = state_dir(root)
    began = time.monotonic()  # the log says how long each step of the start took
    local.start(cpus, namespace=NAMESPACE)
    relay: RelayServer | None = None
    log.info("Ray started after %.1f s", time.monotonic() - began)
    try:
        actors = [STANDING_ACTOR.options(name=actor_name(i), lifetime=None).remote() for i in range(cpus)]
        linker = config_mod.load(root, []).toolchain_pin.get("linker")
        warming = [a.warm.remote(linker) for a in actors]
        address = ray.get_runtime_context().gcs_address
        # Builds send their rows here instead of importing Ray themselves (farm/execute/relay.py).
        relay = RelayServer(actors, read_token(root), JOIN_TIMEOUT_S)
        # Builds may join before the warm-up ends (a build that started this daemon waits for it): a
        # compile sent now runs after, or itself does, its compiler's warm-up. `farm cluster up` waits
        # for warm=true.
        _publish(where, _state(root, address, cpus, idle_s, by, str(relay.path), warm=False))
        mark_used(root)
        log.info("open to builds after %.1f s", time.monotonic() - began)
        warm: list[WarmUp] = ray.get(warming)
        if not all(w.ready for w in warm):
            raise RuntimeError("a compiler's warm server did not start (see its zygote.log in the farm's "
                               "private temp directory, zygotes/)")
        # Now with the zygotes it started.
        state = _state(root, address, cpus, idle_s, by, str(relay.path), warm=True)
        _publish(where, state)
        log.info("up: %s, %d warm compilers after %.1f s", state["address"], cpus, time.monotonic() - began)
        _wait(where, state, stop, idle_s)
    finally:
        (where / STATE_FILE).unlink(missing_ok=True)
        if relay is not None:
            relay.close()
        ray.shutdown()
        forget_ray_processes()
    return 0


def _publish(where: Path, state: StandingState) -> None:
    write_text_atomic(where / STATE_FILE, json.dumps(state, indent=1) + "\n")


def _state(root: Path, address: str, cpus: int, idle_s: float, by: str, relay: str, warm: bool) -> StandingState:
    """What `down`, `running` and builds need, with the proof of who is who: the daemon's and every
    Ray process's pid, start time and command line (its descendants now: Ray, workers, zygotes)."""
    me = psutil.Process()
    processes = record_ray_processes(me)
    core = [p for p in processes if p["cmdline"] and Path(p["cmdline"][0]).name in RAY_CORE]
    return {"pid": me.pid, "daemon": identity(me), "pgid": os.getpgid(0), "processes": processes,
            "ray_core": core, "root": str(root), "address": address, "num_cpus": cpus,
            "generator": generator_digest(), "started_unix": time.time(), "idle_s": idle_s, "warm": warm,
            "started_by": by, "relay": relay, "relay_code": RELAY_CODE}


def _wait(where: Path, state: StandingState, stop: dict[str, bool], idle_s: float) -> None:
    """Serve until told to stop, idle too long, or Ray itself is gone (then builds must not find us)."""
    while not stop["now"]:
        time.sleep(1.0)
        if time.time() - (where / USED_FILE).stat().st_mtime > idle_s:
            log.info("idle for %.0f s: stopping", idle_s)
            return
        gone = [p["cmdline"][0] for p in state["ray_core"] if verified(p) is None]
        if gone:
            log.info("Ray process(es) gone (%s): stopping", ", ".join(gone))
            return


# --- farm cluster up | down | status ----------------------------------------------------------------

def up(root: Path, cpus: int, idle_minutes: float) -> StandingState:
    """Start the daemon (unless one is up or starting) and wait until its compilers are warm. One running
    older farm code, or one whose state file is damaged, is replaced, as a build would (only while no build
    uses it)."""
    state = running(root)
    lost = None if state else stray(root)
    if lost is not None:
        if not standing_use.take_exclusive(root):
            raise FarmError(f"{lost.said}, and a build is using it", "run farm cluster up again once that build "
                            "ends (farm cluster down stops it now, under that build)")
        try:
            down(root)
        finally:
            standing_use.release(root)
        log.warning("stopped the standing cluster whose state file %s (daemon pid %s); starting a new one",
                    lost.why, lost.process.pid)
    if state and autostart.stale(state):
        if not standing_use.take_exclusive(root):
            raise FarmError(f"the standing cluster (daemon pid {state['pid']}) runs older farm code and a build "
                            "is using it", "run farm cluster up again once that build ends (farm cluster down "
                            "stops it now, under that build)")
        try:
            down(root)
        finally:
            standing_use.release(root)
        log.warning("stopped the standing cluster that ran older farm code (daemon pid %s); starting a new one",
                    state["pid"])
        state = None
    if state and state.get("warm", True):
        return state
    started = None if state else spawn(root, cpus, idle_minutes, STARTED_BY_UP)
    try:
        return wait_up(root, started, START_TIMEOUT_S, warm=True)
    except FarmError:
        if started is not None and started.proc.poll() is None:  # ours and hung: not left half-started
            os.killpg(started.proc.pid, signal.SIGKILL)  # our child, not reaped: its group is still its own
            started.proc.wait()
        raise


if __name__ == "__main__":
    configure(0)  # the daemon's notes go to its log file (its stderr)
    by = sys.argv[5] if len(sys.argv) > 5 else STARTED_BY_BUILD
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), by))
