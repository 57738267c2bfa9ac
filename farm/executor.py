"""Run compile tasks on Ray: a private local cluster on loopback by default, or any cluster by address."""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import FarmError

# Ray reads these when it is imported, so they are set when this module is: the private local
# cluster then binds to loopback (INFRA.md) and sends no usage reports.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

# How long the driver lets finished results gather before verifying them as one batch. Short, so
# results reach the manifests (what a resumed build counts as done) promptly; 0.5 s left a fast
# build's progress invisible until nearly its end.
BATCH_GATHER_S = 0.1
# Calls queued on each standing compile actor at a time: enough to keep it busy while the driver
# gathers and verifies a batch.
ACTOR_DEPTH = 4


def _compile_task(request: dict[str, Any], sources: dict[str, bytes], timeout_s: float,
                  warm: bool) -> dict[str, Any]:
    """Body of one Ray task: an isolated compile on whichever node Ray picked."""
    import socket

    import ray

    from farm.compile.isolate import compile_isolated
    from farm.digest import generator_digest

    context = ray.get_runtime_context()
    # Nodes of one test cluster share a host name, so the node id keeps them apart.
    node = f"{socket.gethostname()}/{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
    result = compile_isolated(request, sources, timeout_s, warm=warm, node=node)
    result["generator"] = generator_digest()
    result["worker"] = f"{node} pid {result['pid']}"
    return result


def require_loopback(ray: Any) -> None:
    """A local cluster must listen on loopback only (INFRA.md)."""
    addresses = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})
    if addresses != ["127.0.0.1"]:
        ray.shutdown()
        raise FarmError(f"the local Ray cluster came up on {addresses}, not loopback only",
                        "import farm.executor before ray, or set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0")


class RayExecutor:
    """Context manager: `submit` rows, iterate `completed_batches()` results in completion order.

    Rows run as Ray tasks on a private local cluster (or the cluster at executor.address), or, when
    `standing` names a running standing cluster (farm/standing.py), as calls to its warm compile actors.
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

    def __enter__(self) -> RayExecutor:
        if self.standing:
            from .standing import use_token

            use_token(Path(self.standing["root"]))
        import ray

        kind = self.cfg.get("kind", "local")
        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        try:
            if self.standing:
                from .standing import ACTOR_PREFIX, NAMESPACE

                ray.init(address=self.standing["address"], namespace=NAMESPACE, **common)
                self._actors = [ray.get_actor(f"{ACTOR_PREFIX}{i}") for i in range(int(self.standing["num_cpus"]))]
                self._in_flight = [0] * len(self._actors)
                return self
            if kind == "local":
                # Ray read the switch when it was imported; if that was before this module set it,
                # set Ray's copy too (ray==2.60 keeps it in ray_constants; the test checks the result).
                from ray._private import ray_constants

                ray_constants.ENABLE_RAY_CLUSTER = False
                # address="local" always starts a private cluster, never joins a stale one.
                ray.init(address="local", num_cpus=self.cfg.get("num_cpus") or os.cpu_count(),
                         _node_ip_address="127.0.0.1", **common)
            elif kind == "cluster":
                address = self.cfg.get("address")
                if not address or address == "???":
                    raise FarmError("executor=cluster needs an address", "add executor.address=HOST:PORT")
                farm_dir = str(Path(__file__).resolve().parent)
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

    def __exit__(self, *exc: object) -> None:
        import ray

        ray.shutdown()

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
