"""Run compile tasks on Ray: a private local cluster on loopback by default, or any cluster by address."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from farm.core.errors import FarmError
from farm.core.private import private_dir, read_private_text, write_private_text

# Ray reads these when it is imported, so they are set when this module is: the private local
# cluster then binds to loopback (Ray otherwise advertises the machine's network address) and sends no
# usage reports.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# How long the driver lets finished results gather before verifying them as one batch. Short, so
# results reach the manifests (what a resumed build counts as done) promptly; 0.5 s left a fast
# build's progress invisible until nearly its end.
BATCH_GATHER_S = 0.1
# Calls queued on each standing compile actor at a time: enough to keep it busy while the driver
# gathers and verifies a batch.
ACTOR_DEPTH = 4
# Ray puts its sockets at <temp dir>/session_<date>_<micro>_<pid>/sockets/plasma_store, ~65 bytes below
# its temp dir, and a Unix socket path holds at most ~107: a longer private temp dir is moved to /tmp.
RAY_TEMP_DIR_MAX = 40
# How long leftover Ray processes get to end on SIGTERM before SIGKILL.
LEFTOVER_GRACE_S = 3.0


def num_cpus(executor_cfg: Any) -> int | None:
    """executor.num_cpus as a positive int (None: not set, use every CPU); anything else is the user's
    to fix, before Ray starts (Ray's own error would blame the address)."""
    value = executor_cfg.get("num_cpus")
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not str(value).strip().isdigit() or int(str(value).strip()) < 1:
        raise FarmError(f"executor.num_cpus={value!r} is not a positive whole number",
                        "set executor.num_cpus=N with N >= 1, or leave it out to use every CPU")
    return int(str(value).strip())


def ray_temp_dir() -> str:
    """Ray's temp dir for the farm's local clusters: a per-user private directory (Ray makes its
    session directories world-writable, so they must sit below a directory only this user can enter)."""
    from farm.worker.isolate import short_private_dir

    return str(short_private_dir("ray", RAY_TEMP_DIR_MAX))


# --- processes the farm started: proven by pid, start time and command line, never by name -------------

def identity(proc: Any) -> dict[str, Any]:
    """What proves later that a pid is still this process: its start time and command line."""
    return {"pid": proc.pid, "started": proc.create_time(), "cmdline": proc.cmdline()}


def verified(ident: dict[str, Any]) -> Any:
    """The psutil process `ident` recorded, if that very process still runs; else None."""
    import psutil

    try:
        proc = psutil.Process(int(ident["pid"]))
        if abs(proc.create_time() - float(ident["started"])) > 0.01:
            return None  # the pid now belongs to another process
        now, then = proc.cmdline(), list(ident["cmdline"])
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None
    # A Ray worker retitles itself per task (ray::IDLE, ray::Compiler...); pid and start time prove it.
    same_worker = bool(now and then) and now[0].startswith("ray::") and then[0].startswith("ray::")
    return proc if now == then or same_worker else None


def end_processes(idents: Iterable[dict[str, Any]], grace_s: float = LEFTOVER_GRACE_S) -> int:
    """SIGTERM, then SIGKILL, every recorded process that verifiably still runs; returns how many."""
    import psutil

    procs = [p for p in (verified(i) for i in idents) if p is not None]
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def _records() -> Path:
    return private_dir("ray-owners")


def record_path(pid: int) -> Path:
    """Where farm process `pid` records the Ray processes it started."""
    return _records() / f"{pid}.json"


def record_ray_processes(owner: Any = None) -> Path:
    """Write down the Ray processes this process started (its descendants now), so that a later farm
    command can end them if this one is killed before it stops them."""
    import psutil

    owner = owner or psutil.Process()
    path = record_path(owner.pid)
    found = []
    for child in owner.children(recursive=True):
        try:
            found.append(identity(child))
        except psutil.Error:
            continue
    write_private_text(path, json.dumps({"owner": identity(owner), "processes": found}))
    return path


def forget_ray_processes() -> None:
    record_path(os.getpid()).unlink(missing_ok=True)


def end_leftovers(log: Any = sys.stderr) -> int:
    """End the recorded Ray processes of farm processes that are gone (a SIGKILLed driver or daemon
    leaves Ray agents for minutes, one listening on loopback). Returns how many were ended."""
    ended = 0
    for path in _records().glob("*.json"):
        try:
            record = json.loads(read_private_text(path) or "")
            owner = record["owner"]
        except (ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if verified(owner) is not None:
            continue  # still running: its Ray is its own business
        count = end_processes(record.get("processes") or [])
        path.unlink(missing_ok=True)
        if count:
            print(f"ended {count} leftover Ray processes of farm process {owner['pid']} (gone)", file=log)
        ended += count
    return ended


def _compile_task(request: dict[str, Any], sources: dict[str, bytes], timeout_s: float,
                  warm: bool) -> dict[str, Any]:
    """Body of one Ray task: an isolated compile on whichever node Ray picked."""
    import socket

    import ray

    from farm.worker.isolate import compile_isolated

    context = ray.get_runtime_context()
    # Nodes of one test cluster share a host name, so the node id keeps them apart.
    node = f"{socket.gethostname()}/{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
    result = compile_isolated(request, sources, timeout_s, warm=warm, node=node)
    # result["generator"]: the farm code this compile ran, per file (compile_isolated); the driver checks it.
    result["worker"] = f"{node} pid {result['pid']}"
    return result


def require_loopback(ray: Any) -> None:
    """A local cluster must listen on loopback only (every node's NodeManagerAddress is 127.0.0.1)."""
    addresses = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})
    if addresses != ["127.0.0.1"]:
        ray.shutdown()
        raise FarmError(f"the local Ray cluster came up on {addresses}, not loopback only",
                        "import farm.execute.executor before ray, or set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0")


class RayExecutor:
    """Context manager: `submit` rows, iterate `completed_batches()` results in completion order.

    Rows run as Ray tasks on a private local cluster (or the cluster at executor.address), or, when
    `standing` names a running standing cluster (farm/execute/standing.py), as calls to its warm compile actors.
    """

    def __init__(self, executor_cfg: dict[str, Any], timeout_s: float,
                 standing: dict[str, Any] | None = None) -> None:
        self.cfg = executor_cfg
        self.timeout_s = timeout_s
        self.standing = standing
        self._pending: list[Any] = []
        self._keys: dict[Any, str] = {}
        self._sources_ref: Any = None
        self._remote: Any = None
        self._actors: list[Any] = []
        self._queue: deque[dict[str, Any]] = deque()
        self._actor_of: dict[Any, int] = {}
        self._in_flight: list[int] = []
        self._recorded = False

    def __enter__(self) -> RayExecutor:
        kind = self.cfg.get("kind", "local")
        cpus = num_cpus(self.cfg)  # a bad value is named before Ray starts
        if self.standing and self._join_standing():
            return self
        import ray

        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        try:
            if kind == "local":
                end_leftovers()
                # Ray read the switch when it was imported; if that was before this module set it,
                # set Ray's copy too (ray==2.60 keeps it in ray_constants; the test checks the result).
                from ray._private import ray_constants

                ray_constants.ENABLE_RAY_CLUSTER = False
                # address="local" always starts a private cluster, never joins a stale one.
                ray.init(address="local", num_cpus=cpus or os.cpu_count(), _node_ip_address="127.0.0.1",
                         _temp_dir=ray_temp_dir(), **common)
                self._recorded = True
                record_ray_processes()
            elif kind == "cluster":
                address = self.cfg.get("address")
                if not address or address == "???":
                    raise FarmError("executor=cluster needs an address", "add executor.address=HOST:PORT")
                farm_dir = str(Path(__file__).resolve().parent.parent)  # the farm package
                # Without a working_dir, Ray puts the driver's working directory first on every
                # worker's sys.path: run from a checkout, a node's own files at that path would shadow
                # the farm shipped in py_modules. An empty working_dir keeps workers off the driver's paths.
                with tempfile.TemporaryDirectory(prefix="farm-job-") as empty:
                    ray.init(address=address, runtime_env={"py_modules": [farm_dir], "working_dir": empty},
                             **common)
            else:
                raise FarmError(f"unknown executor kind {kind!r}; accepted: local, cluster",
                                "use executor=local or executor=cluster executor.address=...")
        except FarmError:
            raise
        except Exception as exc:
            raise FarmError(f"could not start or reach Ray ({kind}): {exc}",
                            "check executor.address, or use the default executor=local") from None
        if kind == "local":
            require_loopback(ray)
        self._remote = ray.remote(num_cpus=1, max_retries=int(self.cfg.get("max_retries", 2)),
                                  retry_exceptions=False)(_compile_task)
        return self

    def _join_standing(self) -> bool:
        """Connect to the standing cluster's actors; if that fails, say so in one line and return False
        (the build then starts a private cluster)."""
        from farm.execute.standing import ACTOR_PREFIX, NAMESPACE, drop_token, use_token

        use_token(Path(self.standing["root"]))
        import ray

        try:
            ray.init(address=self.standing["address"], namespace=NAMESPACE, include_dashboard=False,
                     log_to_driver=False, logging_level="ERROR")
            self._actors = [ray.get_actor(f"{ACTOR_PREFIX}{i}") for i in range(int(self.standing["num_cpus"]))]
        except Exception as exc:  # noqa: BLE001 (any failure to join means: build on a private cluster)
            ray.shutdown()
            drop_token()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"the standing cluster at {self.standing['address']} does not answer ({first}); "
                  "this build starts a private cluster", file=sys.stderr)
            self.standing, self._actors = None, []
            return False
        self._in_flight = [0] * len(self._actors)
        return True

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.shutdown()
        if self._recorded:
            forget_ray_processes()

    def share_sources(self, sources: dict[str, bytes]) -> None:
        import ray

        self._sources_ref = ray.put(sources)

    def submit(self, request: dict[str, Any]) -> None:
        self._queue.append(request)
        self._dispatch()

    def _dispatch(self) -> None:
        """Tasks all go to Ray at once (it schedules them). Actor calls queue on their actor, so each
        gets a few at a time: it never waits for the driver, and none is left with a long tail."""
        warm = bool(self.cfg.get("warm", True))
        while self._queue:
            if not self._actors:
                request = self._queue.popleft()
                self._track(self._remote.remote(request, self._sources_ref, self.timeout_s, warm), request)
                continue
            index = min(range(len(self._actors)), key=self._in_flight.__getitem__)
            if self._in_flight[index] >= ACTOR_DEPTH:
                return
            request = self._queue.popleft()
            ref = self._actors[index].compile.remote(request, self._sources_ref, self.timeout_s, warm)
            self._actor_of[ref] = index
            self._in_flight[index] += 1
            self._track(ref, request)

    def _track(self, ref: Any, request: dict[str, Any]) -> None:
        self._keys[ref] = request["key"]
        self._pending.append(ref)

    def completed_batches(self, gather_s: float = BATCH_GATHER_S) -> Iterator[list[dict[str, Any]]]:
        """Results in completion order, in batches: after the first result of a batch, whatever else
        finishes within `gather_s` joins it (the driver then verifies a batch with one disassembler run)."""
        import ray

        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            if self._pending:
                more, self._pending = ray.wait(self._pending, num_returns=len(self._pending), timeout=gather_s)
                done += more
            for ref in done:
                if ref in self._actor_of:
                    self._in_flight[self._actor_of.pop(ref)] -= 1
            self._dispatch()
            yield [self._result(ref) for ref in done]

    def _result(self, ref: Any) -> dict[str, Any]:
        import ray

        try:
            return ray.get(ref)
        except Exception as exc:  # the task itself died (node lost past its retries)
            return {"key": self._keys[ref], "ok": False, "error": f"Ray task failed: {exc}", "stderr": ""}
