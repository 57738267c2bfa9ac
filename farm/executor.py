"""Run compile tasks on Ray: a private local cluster on loopback by default, or any cluster by address."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import FarmError

# Ray reads these when it is imported, so they are set when this module is: the private local
# cluster then binds to loopback (INFRA.md) and sends no usage reports.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


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


class RayExecutor:
    """Context manager: `submit` rows, iterate `completed()` results in completion order."""

    def __init__(self, executor_cfg: dict[str, Any], timeout_s: float) -> None:
        self.cfg = executor_cfg
        self.timeout_s = timeout_s
        self._pending: list[Any] = []
        self._keys: dict[Any, str] = {}
        self._sources_ref: Any = None
        self._remote: Any = None

    def __enter__(self) -> RayExecutor:
        import ray

        kind = self.cfg.get("kind", "local")
        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
        try:
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
            addresses = sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]})
            if addresses != ["127.0.0.1"]:
                ray.shutdown()
                raise FarmError(f"the local Ray cluster came up on {addresses}, not loopback only",
                                "import farm.executor before ray, or set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0")
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
        ref = self._remote.remote(request, self._sources_ref, self.timeout_s, bool(self.cfg.get("warm", True)))
        self._keys[ref] = request["key"]
        self._pending.append(ref)

    def completed(self) -> Iterator[dict[str, Any]]:
        import ray

        while self._pending:
            done, self._pending = ray.wait(self._pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the task itself died (node lost past its retries)
                    yield {"key": self._keys[ref], "ok": False, "error": f"Ray task failed: {exc}",
                           "stderr": ""}
