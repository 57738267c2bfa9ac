"""The standing local cluster: one Ray cluster on loopback with warm compilers, kept between builds.

A private cluster costs every `farm build` about 5 s of Ray start and stop plus each worker's
warm-up (imports): more than the compiles of a small change. `farm cluster up` starts a daemon that
owns a local Ray cluster and one named compile actor per CPU, each with its warm zygote; while it is
up, `farm build` (executor=local) connects to it instead of starting its own. `farm cluster down`
stops it; it also stops by itself after `idle_minutes` without a build.

Each compile still forks from its actor's zygote (farm/worker/isolate.py), so rows stay isolated
exactly as on a private cluster. The daemon's state file says where the cluster is and which farm
code its actors run; a build whose farm code differs does not use it (it would refuse the bytes).

The state file is never trusted by pid alone: it records the daemon's pid, start time and command
line, and the Ray processes it started, and nothing is signalled unless it is still that very process.
A state whose daemon is gone (or whose pid now belongs to another process) is reported and removed,
and a build on a cluster that does not answer falls back to a private one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from farm.core.atomic import write_text_atomic
from farm.core.errors import FarmError
from farm.execute.executor import (
    end_leftovers,
    end_processes,
    forget_ray_processes,
    identity,
    num_cpus,
    ray_temp_dir,
    record_path,
    record_ray_processes,
    require_loopback,
    verified,
)

NAMESPACE = "farm-standing"
ACTOR_PREFIX = "farm-compiler-"
STATE_FILE = "state.json"
USED_FILE = "last-used"     # touched by every build that uses the cluster (the idle clock)
LOG_FILE = "daemon.log"
TOKEN_FILE = "auth_token"   # the cluster's own Ray auth token (mode 0600): only this user's builds join
START_TIMEOUT_S = 180.0
CONNECT_TIMEOUT_S = 2.0     # a build's probe of the cluster's GCS port: a dead cluster costs this, not minutes
RAY_CORE = ("gcs_server", "raylet")  # the daemon's Ray processes a working cluster cannot do without


def state_dir(root: Path) -> Path:
    return root / ".farm" / "cluster"


def running(root: Path, log: Any = sys.stderr) -> dict[str, Any] | None:
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
        print(f"removed {path}: it belongs to uid {owner}, not to you; nothing it names was touched", file=log)
        return None
    daemon = state.get("daemon") if isinstance(state, dict) else None
    if isinstance(daemon, dict) and verified(daemon) is not None:
        return state
    pid = daemon.get("pid") if isinstance(daemon, dict) else (state.get("pid") if isinstance(state, dict) else None)
    ended = end_processes(state.get("processes") or []) if isinstance(daemon, dict) else 0
    path.unlink(missing_ok=True)
    print(f"removed a stale standing-cluster state ({path}): its daemon (pid {pid}) is gone or that pid is "
          f"another process now, which was left alone" + (f"; ended {ended} Ray processes it had left" if ended
                                                          else ""), file=log)
    return None


def health(state: dict[str, Any]) -> str | None:
    """Why the running daemon's cluster cannot serve a build (None: it can). Bounded: a dead cluster
    costs a build at most CONNECT_TIMEOUT_S, never Ray's minutes of connection retries."""
    gone = [Path(p["cmdline"][0]).name for p in state.get("ray_core") or [] if verified(p) is None]
    if gone or not state.get("ray_core"):
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
    if "ray" in sys.modules:  # Ray reads its config when imported: refresh it (as ray's own token setup does)
        from ray._raylet import Config

        Config.initialize("")


def drop_token() -> None:
    """Undo use_token (a build that could not join the standing cluster starts a private one)."""
    os.environ.pop("RAY_AUTH_MODE", None)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    if "ray" in sys.modules:
        from ray._raylet import Config

        Config.initialize("")


def _new_token(root: Path) -> None:
    import secrets

    path = state_dir(root) / TOKEN_FILE
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def mark_used(root: Path) -> None:
    (state_dir(root) / USED_FILE).touch()


def for_build(cfg: Any, log: Any) -> dict[str, Any] | None:
    """The standing cluster this build may use, or None (then it starts a private one)."""
    if cfg.executor.get("kind") != "local" or not cfg.executor.get("standing", True):
        return None
    wanted = num_cpus(cfg.executor)  # a bad value is named here, before anything starts
    state = running(cfg.root, log)
    if not state:
        return None
    problem = health(state)
    if problem:
        print(f"the standing cluster is not usable: {problem}; this build starts a private cluster "
              "(farm cluster down && farm cluster up restarts it)", file=log)
        return None
    from farm.plan.digest import generator_digest

    if state.get("generator") != generator_digest():
        print("the standing cluster runs older farm code; this build starts a private cluster "
              "(to refresh it: farm cluster down && farm cluster up)", file=log)
        return None
    if wanted and wanted != int(state["num_cpus"]):
        print(f"executor.num_cpus={wanted} but the standing cluster has {state['num_cpus']} compilers; "
              "this build starts a private cluster", file=log)
        return None
    mark_used(cfg.root)
    print(f"using the standing cluster at {state['address']} ({state['num_cpus']} warm compilers; "
          "farm cluster down stops it)", file=log)
    return state


# --- the compile actor ------------------------------------------------------------------------------

class Compiler:
    """One CPU's compiler: keeps its zygote warm between builds; each call is one isolated compile."""

    def warm(self, linker: dict[str, Any] | None) -> dict[str, Any]:
        from farm.plan.digest import generator_digest
        from farm.worker.isolate import warm_zygote

        zygote, seconds = warm_zygote(linker)
        return {"ready": zygote.alive(), "warmup_seconds": seconds, "generator": generator_digest()}

    def compile(self, request: dict[str, Any], sources: dict[str, bytes], timeout_s: float,
                warm: bool) -> dict[str, Any]:
        from farm.execute.executor import _compile_task

        return _compile_task(request, sources, timeout_s, warm)


# --- the daemon ---------------------------------------------------------------------------------------

def serve(root: Path, cpus: int, idle_s: float) -> int:
    """The daemon's body: start the cluster and the warm compilers, publish the state, wait."""
    use_token(root)
    import ray

    from farm.table import config as config_mod

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    where = state_dir(root)
    ray.init(address="local", num_cpus=cpus, namespace=NAMESPACE, _node_ip_address="127.0.0.1",
             include_dashboard=False, log_to_driver=False, logging_level="ERROR", _temp_dir=ray_temp_dir())
    try:
        require_loopback(ray)
        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=2)(Compiler)
        actors = [remote.options(name=f"{ACTOR_PREFIX}{i}", lifetime=None).remote() for i in range(cpus)]
        linker = config_mod.load(root, []).toolchain_pin.get("linker")
        warm = ray.get([a.warm.remote(linker) for a in actors])
        if not all(w["ready"] for w in warm):
            raise RuntimeError("a compiler's warm server did not start (see its zygote.log in the farm's "
                               "private temp directory, zygotes/)")
        state = _state(root, ray.get_runtime_context().gcs_address, cpus, idle_s)
        mark_used(root)
        write_text_atomic(where / STATE_FILE, json.dumps(state, indent=1) + "\n")
        print(f"up: {state['address']}, {cpus} warm compilers", flush=True)
        _wait(where, state, stop, idle_s)
    finally:
        (where / STATE_FILE).unlink(missing_ok=True)
        ray.shutdown()
        forget_ray_processes()
    return 0


def _state(root: Path, address: str, cpus: int, idle_s: float) -> dict[str, Any]:
    """What `down`, `running` and builds need, with the proof of who is who: the daemon's and every
    Ray process's pid, start time and command line (its descendants now: Ray, workers, zygotes)."""
    import psutil

    from farm.plan.digest import generator_digest

    me = psutil.Process()
    processes = json.loads(record_ray_processes(me).read_text())["processes"]
    core = [p for p in processes if p["cmdline"] and Path(p["cmdline"][0]).name in RAY_CORE]
    return {"pid": me.pid, "daemon": identity(me), "pgid": os.getpgid(0), "processes": processes,
            "ray_core": core, "root": str(root), "address": address, "num_cpus": cpus,
            "generator": generator_digest(), "started_unix": time.time(), "idle_s": idle_s}


def _wait(where: Path, state: dict[str, Any], stop: dict[str, bool], idle_s: float) -> None:
    """Serve until told to stop, idle too long, or Ray itself is gone (then builds must not find us)."""
    while not stop["now"]:
        time.sleep(1.0)
        if time.time() - (where / USED_FILE).stat().st_mtime > idle_s:
            print(f"idle for {idle_s:.0f} s: stopping", flush=True)
            return
        gone = [p["cmdline"][0] for p in state["ray_core"] if verified(p) is None]
        if gone:
            print(f"Ray process(es) gone ({', '.join(gone)}): stopping", flush=True)
            return


# --- farm cluster up | down | status ----------------------------------------------------------------

def up(root: Path, cpus: int, idle_minutes: float) -> dict[str, Any]:
    """Start the daemon (if it is not up) and wait until its compilers are warm."""
    end_leftovers()
    state = running(root)
    if state:
        return state
    where = state_dir(root)
    where.mkdir(parents=True, exist_ok=True)
    _new_token(root)
    log = open(where / LOG_FILE, "wb")  # noqa: SIM115 (handed to the daemon)
    # Its own session and process group: `down` can end the whole tree, and no terminal signal reaches it.
    proc = subprocess.Popen([sys.executable, "-m", "farm.execute.standing", str(root), str(cpus),
                             str(idle_minutes * 60)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
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
    import psutil

    state = running(root)
    if not state:
        return False
    daemon = verified(state["daemon"])
    if daemon is None:  # it ended just now
        (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
        return True
    # Everything it started, as it is now (Ray workers and their zygotes come and go).
    tree = _identities(daemon.children(recursive=True)) + list(state.get("processes") or [])
    daemon.terminate()
    try:
        daemon.wait(timeout_s)
    except psutil.TimeoutExpired:
        _kill_group(daemon)
    end_processes(tree)
    (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
    record_path(daemon.pid).unlink(missing_ok=True)
    return True


def _identities(procs: list[Any]) -> list[dict[str, Any]]:
    import psutil

    found = []
    for proc in procs:
        try:
            found.append(identity(proc))
        except psutil.Error:
            continue
    return found


def _kill_group(daemon: Any) -> None:
    """SIGKILL the daemon's process group, once it is proven to be the daemon's own (it leads it)."""
    import psutil

    try:
        if daemon.is_running() and os.getpgid(daemon.pid) == daemon.pid:
            os.killpg(daemon.pid, signal.SIGKILL)
        elif daemon.is_running():
            daemon.kill()
        daemon.wait(10)
    except (psutil.Error, ProcessLookupError):
        pass


if __name__ == "__main__":
    # Through the module's real name, so Ray ships `farm.execute.standing.Compiler`, not `__main__.Compiler`.
    from farm.execute.standing import serve as _serve

    sys.exit(_serve(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
