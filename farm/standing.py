"""The standing local cluster: one Ray cluster on loopback with warm compilers, kept between builds.

A private cluster costs every `farm build` about 5 s of Ray start and stop plus each worker's
warm-up (imports): more than the compiles of a small change. `farm cluster up` starts a daemon that
owns a local Ray cluster and one named compile actor per CPU, each with its warm zygote; while it is
up, `farm build` (executor=local) connects to it instead of starting its own. `farm cluster down`
stops it; it also stops by itself after `idle_minutes` without a build.

Each compile still forks from its actor's zygote (farm/compile/isolate.py), so rows stay isolated
exactly as on a private cluster. The daemon's state file says where the cluster is and which farm
code its actors run; a build whose farm code differs does not use it (it would refuse the bytes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .atomic import write_text_atomic
from .errors import FarmError
from .executor import require_loopback  # also sets Ray's loopback switches, before Ray is imported

NAMESPACE = "farm-standing"
ACTOR_PREFIX = "farm-compiler-"
STATE_FILE = "state.json"
USED_FILE = "last-used"     # touched by every build that uses the cluster (the idle clock)
LOG_FILE = "daemon.log"
TOKEN_FILE = "auth_token"   # the cluster's own Ray auth token (mode 0600): only this user's builds join
START_TIMEOUT_S = 180.0


def state_dir(root: Path) -> Path:
    return root / ".farm" / "cluster"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(root: Path) -> dict[str, Any] | None:
    """The standing cluster's state if its daemon is alive; a stale state file is removed."""
    path = state_dir(root) / STATE_FILE
    try:
        state = json.loads(path.read_text())
        pid = int(state["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        path.unlink(missing_ok=True)
        return None
    return state


def use_token(root: Path) -> None:
    """Make this process's Ray (started or joined next) use the standing cluster's token."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(state_dir(root) / TOKEN_FILE)
    os.environ.pop("RAY_AUTH_TOKEN", None)
    if "ray" in sys.modules:  # Ray reads its config when imported: refresh it (as ray's own token setup does)
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
    state = running(cfg.root)
    if not state:
        return None
    from .digest import generator_digest

    if state.get("generator") != generator_digest():
        print("the standing cluster runs older farm code; this build starts a private cluster "
              "(to refresh it: farm cluster down && farm cluster up)", file=log)
        return None
    wanted = cfg.executor.get("num_cpus")
    if wanted and int(wanted) != int(state["num_cpus"]):
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
        from .compile.isolate import warm_zygote
        from .digest import generator_digest

        zygote, seconds = warm_zygote(linker)
        return {"ready": zygote.alive(), "warmup_seconds": seconds, "generator": generator_digest()}

    def compile(self, request: dict[str, Any], sources: dict[str, bytes], timeout_s: float,
                warm: bool) -> dict[str, Any]:
        from .executor import _compile_task

        return _compile_task(request, sources, timeout_s, warm)


# --- the daemon ---------------------------------------------------------------------------------------

def serve(root: Path, num_cpus: int, idle_s: float) -> int:
    """The daemon's body: start the cluster and the warm compilers, publish the state, wait."""
    use_token(root)
    import ray

    from . import config as config_mod
    from .digest import generator_digest

    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    where = state_dir(root)
    ray.init(address="local", num_cpus=num_cpus, namespace=NAMESPACE, _node_ip_address="127.0.0.1",
             include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        require_loopback(ray)
        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=2)(Compiler)
        actors = [remote.options(name=f"{ACTOR_PREFIX}{i}", lifetime=None).remote() for i in range(num_cpus)]
        linker = config_mod.load(root, []).toolchain_pin.get("linker")
        warm = ray.get([a.warm.remote(linker) for a in actors])
        if not all(w["ready"] for w in warm):
            raise RuntimeError("a compiler's warm server did not start (see its zygote.log under /tmp)")
        state = {"pid": os.getpid(), "root": str(root), "address": ray.get_runtime_context().gcs_address,
                 "num_cpus": num_cpus, "generator": generator_digest(), "started_unix": time.time(), "idle_s": idle_s}
        mark_used(root)
        write_text_atomic(where / STATE_FILE, json.dumps(state, indent=1) + "\n")
        print(f"up: {state['address']}, {num_cpus} warm compilers", flush=True)
        while not stop["now"]:
            time.sleep(1.0)
            if time.time() - (where / USED_FILE).stat().st_mtime > idle_s:
                print(f"idle for {idle_s:.0f} s: stopping", flush=True)
                break
    finally:
        (where / STATE_FILE).unlink(missing_ok=True)
        ray.shutdown()
    return 0


# --- farm cluster up | down | status ----------------------------------------------------------------

def up(root: Path, num_cpus: int, idle_minutes: float) -> dict[str, Any]:
    """Start the daemon (if it is not up) and wait until its compilers are warm."""
    state = running(root)
    if state:
        return state
    where = state_dir(root)
    where.mkdir(parents=True, exist_ok=True)
    _new_token(root)
    log = open(where / LOG_FILE, "wb")  # noqa: SIM115 (handed to the daemon)
    proc = subprocess.Popen([sys.executable, "-m", "farm.standing", str(root), str(num_cpus),
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
    proc.terminate()
    raise FarmError(f"the standing cluster was not up after {START_TIMEOUT_S:.0f} s", f"see {where / LOG_FILE}")


def down(root: Path, timeout_s: float = 60.0) -> bool:
    """Stop the daemon (it stops its Ray cluster); False if none was up."""
    state = running(root)
    if not state:
        return False
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    (state_dir(root) / STATE_FILE).unlink(missing_ok=True)
    return True


if __name__ == "__main__":
    # Through the module's real name, so Ray ships `farm.standing.Compiler`, not `__main__.Compiler`.
    from farm.standing import serve as _serve

    sys.exit(_serve(Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
