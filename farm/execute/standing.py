"""The standing local cluster: one Ray cluster on loopback with warm compilers, kept between builds.

A private cluster costs every `farm build` about 5 s of Ray start and stop plus each worker's
warm-up (imports): more than the compiles of a small change. `farm cluster up` starts a daemon that
owns a local Ray cluster and one named compile actor per CPU, each with its warm zygote; while it is
up, `farm build` (executor=local) connects to it instead of starting its own. `farm cluster down`
stops it; it also stops by itself after `idle_minutes` without a build.

Each compile still forks from its actor's zygote (farm/execute/compiler.py, farm/worker/warm.py),
so rows stay isolated exactly as on a private cluster. The daemon's state file says where the cluster
is and which farm code its actors run; a build whose farm code differs does not use it (it would
refuse the bytes).

The state file is never trusted by pid alone: it records the daemon's pid, start time and command
line, and the Ray processes it started, and nothing is signalled unless it is still that very process.
A state whose daemon is gone (or whose pid now belongs to another process) is reported and removed,
and a build on a cluster that does not answer falls back to a private one.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import psutil
import ray

from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.core.log import configure
from farm.execute import local, ray_compat
from farm.execute.compiler import CONCURRENCY, Compiler, WarmUp
from farm.execute.local import num_cpus
from farm.execute.processes import (
    Identity,
    end_leftovers,
    end_processes,
    forget_ray_processes,
    identities,
    identity,
    record_ray_processes,
    verified,
)
from farm.plan.digest import generator_digest
from farm.table import config as config_mod

log = logging.getLogger(__name__)

# Names the CLI uses from here.
__all__ = ["down", "for_build", "health", "mark_used", "num_cpus", "running", "up"]

NAMESPACE = "farm-standing"
ACTOR_PREFIX = "farm-compiler-"
STATE_FILE = "state.json"
USED_FILE = "last-used"     # touched by every build that uses the cluster (the idle clock)
LOG_FILE = "daemon.log"
TOKEN_FILE = "auth_token"   # the cluster's own Ray auth token (mode 0600): only this user's builds join
START_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_S = 2.0     # a build's probe of the cluster's GCS port: a dead cluster costs this, not minutes
JOIN_TIMEOUT_S = 30.0       # a build's wait for the warm actors to answer once it has joined
RAY_CORE = ("gcs_server", "raylet")  # the daemon's Ray processes a working cluster cannot do without
# The daemon's compilers: Ray restarts a dead one in place and retries its call (its row is not lost).
STANDING_ACTOR = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=2, **CONCURRENCY)(Compiler)


class StandingState(TypedDict):
    """The daemon's state file (JSON read back from disk: `running` checks the daemon part before use)."""

    pid: int
    daemon: Identity
    pgid: int
    processes: list[Identity]   # every Ray process the daemon started, as it was when it came up
    ray_core: list[Identity]    # the ones the cluster cannot do without (RAY_CORE)
    root: str
    address: str                # the cluster's GCS, 127.0.0.1:PORT
    num_cpus: int               # its compilers, one per CPU
    generator: str              # the farm code its compilers run
    started_unix: float
    idle_s: float


def state_dir(root: Path) -> Path:
    return root / ".farm" / "cluster"


def actor_name(index: int) -> str:
    return f"{ACTOR_PREFIX}{index}"


def running(root: Path) -> StandingState | None:
    """The standing cluster's state if its daemon is verifiably alive. A stale state file (the daemon
    gone, or its pid taken by another process) is reported and removed, and the Ray processes that
    daemon started and that still run are ended; a foreign process is never signalled."""
    path = state_dir(root) / STATE_FILE
    try:
        state = json.loads(path.read_text())
        owner = path.stat().st_uid
    except OSError:
        return None
    except ValueError:
        state, owner = {}, os.getuid()
    if owner != os.getuid():  # written by someone else: nothing in it is ever signalled
        path.unlink(missing_ok=True)
        log.warning("removed %s: it belongs to uid %s, not to you; nothing it names was touched", path, owner)
        return None
    daemon = state.get("daemon") if isinstance(state, dict) else None
    if isinstance(daemon, dict) and verified(daemon) is not None:
        return state  # type: ignore[no-any-return]  # its daemon is proven ours; the rest is its own record
    pid = daemon.get("pid") if isinstance(daemon, dict) else (state.get("pid") if isinstance(state, dict) else None)
    left = state.get("processes") if isinstance(daemon, dict) else None
    ended = end_processes(left if isinstance(left, list) else [])
    path.unlink(missing_ok=True)
    log.warning("removed a stale standing-cluster state (%s): its daemon (pid %s) is gone or that pid is "
                "another process now, which was left alone%s", path, pid,
                f"; ended {ended} Ray processes it had left" if ended else "")
    return None


def health(state: StandingState) -> str | None:
    """Why the running daemon's cluster cannot serve a build (None: it can). Bounded: a dead cluster
    costs a build at most CONNECT_TIMEOUT_S, never Ray's minutes of connection retries."""
    core = state.get("ray_core") or []
    gone = [Path(p["cmdline"][0]).name for p in core if verified(p) is None]
    if gone or not core:
        return f"its Ray processes are gone ({', '.join(gone) or 'none recorded'})"
    host, _, port = str(state.get("address", "")).rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except (OSError, ValueError) as exc:
        return f"its Ray GCS at {state.get('address')} does not answer ({exc})"


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


def _new_token(root: Path) -> None:
    path = state_dir(root) / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def mark_used(root: Path) -> None:
    (state_dir(root) / USED_FILE).touch()


def for_build(cfg: Any) -> StandingState | None:
    """The standing cluster this build may use, or None (then it starts a private one). Notes go to the log."""
    if cfg.executor.get("kind") != "local" or not cfg.executor.get("standing", True):
        return None
    wanted = num_cpus(cfg.executor)  # a bad value is named here, before anything starts
    state = running(cfg.root)
    if not state:
        return None
    problem = health(state)
    if problem:
        log.warning("the standing cluster is not usable: %s; this build starts a private cluster "
                    "(farm cluster down && farm cluster up restarts it)", problem)
        return None
    if state.get("generator") != generator_digest():
        log.warning("the standing cluster runs older farm code; this build starts a private cluster "
                    "(to refresh it: farm cluster down && farm cluster up)")
        return None
    if wanted and wanted != int(state["num_cpus"]):
        log.warning("executor.num_cpus=%s but the standing cluster has %s compilers; this build starts a "
                    "private cluster", wanted, state["num_cpus"])
        return None
    mark_used(cfg.root)
    log.info("using the standing cluster at %s (%s warm compilers; farm cluster down stops it)",
             state["address"], state["num_cpus"])
    return state


# --- the daemon ---------------------------------------------------------------------------------------

def serve(root: Path, cpus: int, idle_s: float) -> int:
    """The daemon's body: start the cluster and the warm compilers, publish the state, wait."""
    use_token(root)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    where = state_dir(root)
    local.start(cpus, namespace=NAMESPACE)
    try:
        actors = [STANDING_ACTOR.options(name=actor_name(i), lifetime=None).remote() for i in range(cpus)]
        linker = config_mod.load(root, []).toolchain_pin.get("linker")
        warm: list[WarmUp] = ray.get([a.warm.remote(linker) for a in actors])
        if not all(w.ready for w in warm):
            raise RuntimeError("a compiler's warm server did not start (see its zygote.log in the farm's "
                               "private temp directory, zygotes/)")
        state = _state(root, ray.get_runtime_context().gcs_address, cpus, idle_s)
        mark_used(root)
        write_text_atomic(where / STATE_FILE, json.dumps(state, indent=1) + "\n")
        log.info("up: %s, %d warm compilers", state["address"], cpus)
        _wait(where, state, stop, idle_s)
    finally:
        (where / STATE_FILE).unlink(missing_ok=True)
        ray.shutdown()
        forget_ray_processes()
    return 0


def _state(root: Path, address: str, cpus: int, idle_s: float) -> StandingState:
    """What `down`, `running` and builds need, with the proof of who is who: the daemon's and every
    Ray process's pid, start time and command line (its descendants now: Ray, workers, zygotes)."""
    me = psutil.Process()
    processes = record_ray_processes(me)
    core = [p for p in processes if p["cmdline"] and Path(p["cmdline"][0]).name in RAY_CORE]
    return {"pid": me.pid, "daemon": identity(me), "pgid": os.getpgid(0), "processes": processes,
            "ray_core": core, "root": str(root), "address": address, "num_cpus": cpus,
            "generator": generator_digest(), "started_unix": time.time(), "idle_s": idle_s}


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
    """Start the daemon (if it is not up) and wait until its compilers are warm."""
    end_leftovers()
    state = running(root)
    if state:
        return state
    where = state_dir(root)
    where.mkdir(parents=True, exist_ok=True)
    _new_token(root)
    log_file = open(where / LOG_FILE, "wb")  # noqa: SIM115 (handed to the daemon)
    # Its own session and process group: `down` can end the whole tree, and no terminal signal reaches it.
    proc = subprocess.Popen([sys.executable, "-m", "farm.execute.standing", str(root), str(cpus),
                             str(idle_minutes * 60)], stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                            start_new_session=True, cwd=root)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        state = running(root)
        if state and state["pid"] == proc.pid:
            return state
        if proc.poll() is not None:
            tail = (where / LOG_FILE).read_text(errors="replace")[-3000:]
            raise FarmError(f"the standing cluster did not start (exit {proc.returncode}):\n{tail}",
                            f"see {where / LOG_FILE}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # our child, not reaped: its group is still its own
    proc.wait()
    raise FarmError(f"the standing cluster was not up after {START_TIMEOUT_S:.0f} s", f"see {where / LOG_FILE}")


def down(root: Path, timeout_s: float = 60.0) -> bool:
    """Stop the daemon (it stops its Ray cluster); False if none was up. A daemon that does not stop
    in `timeout_s` is killed with its whole process group, and every Ray process it started (each
    verified by pid, start time and command line) is ended too."""
    state = running(root)
    if not state:
        return False
    daemon = verified(state["daemon"])
    if daemon is None:  # it ended just now
        (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
        return True
    # Everything it started, as it is now (Ray workers and their zygotes come and go).
    tree = identities(daemon.children(recursive=True)) + list(state.get("processes") or [])
    daemon.terminate()
    try:
        daemon.wait(timeout_s)
    except psutil.TimeoutExpired:
        _kill_group(daemon)
    end_processes(tree)
    (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
    forget_ray_processes(daemon.pid)
    return True


def _kill_group(daemon: psutil.Process) -> None:
    """SIGKILL the daemon's process group, once it is proven to be the daemon's own (it leads it)."""
    try:
        if daemon.is_running() and os.getpgid(daemon.pid) == daemon.pid:
            os.killpg(daemon.pid, signal.SIGKILL)
        elif daemon.is_running():
            daemon.kill()
        daemon.wait(10)
    except (psutil.Error, ProcessLookupError):
        pass


if __name__ == "__main__":
    configure(0)  # the daemon's notes go to its log file (its stderr)
    sys.exit(serve(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
