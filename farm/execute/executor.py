"""Run compile rows on Ray: a private local cluster on loopback by default, the standing cluster when
one is up, or any cluster by address. Rows go to compile actors (farm/execute/compiler.py), one per
CPU, through Ray's ActorPool (farm/execute/dispatch.py). Starting or joining the cluster is `RaySession`'s,
which `farm emulate` uses too."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import ray
from ray.exceptions import RayError

from farm.contract import CompileRequest, CompileResult
from farm.core.errors import FarmError
from farm.execute import local, ray_auth, ray_compat, standing
from farm.execute.compiler import CONCURRENCY, Compiler
from farm.execute.dispatch import Dispatch
from farm.execute.local import num_cpus
from farm.execute.processes import end_leftovers, forget_ray_processes, record_ray_processes
from farm.execute.settings import BATCH_GATHER_S

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

# How long a build waits for its compile actors to start (processes, and on a cluster the farm's code).
ACTOR_START_S = 300.0
# A compile actor of a build's own is not restarted by Ray: the dispatch retries its row elsewhere and
# starts a new actor, which joins once it runs (its node may be gone for good).
PRIVATE_ACTOR = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0, **CONCURRENCY)(Compiler)


class RaySession:
    """A Ray cluster for one command: a private local cluster on loopback (executor.kind=local), started for
    it and ended after it, or the cluster at executor.address (kind=cluster), joined and left. `start` returns
    its CPU count; `close` ends or leaves it. A build's compile actors run on it (RayExecutor), and so do
    `farm emulate`'s tasks (farm/emulate/parallel.py). `modules`: packages shipped to a cluster's workers
    beside the farm's own (a cluster's nodes have the farm's dependencies installed, not this checkout)."""

    def __init__(self, executor_cfg: Mapping[str, Any], modules: Sequence[Path] = ()) -> None:
        self.cfg = executor_cfg
        self.modules = list(modules)
        self._recorded = False
        self._auth_saved: ray_auth.Saved | None = None  # the token variables to restore on close

    def start(self) -> int:
        kind = self.cfg.get("kind", "local")
        cpus = num_cpus(self.cfg)  # a bad value is named before Ray starts
        try:
            return self._start_private(kind, cpus)
        except FarmError:
            self._restore_auth()
            raise
        except Exception as exc:
            self._restore_auth()
            raise FarmError(f"could not start or reach Ray ({kind}): {exc}",
                            "check executor.address, or use the default executor=local") from None

    def close(self) -> None:
        ray.shutdown()
        if self._recorded:
            forget_ray_processes()
            self._recorded = False
        self._restore_auth()

    def _restore_auth(self) -> None:
        """The token variables as they were before this session: executor=cluster put the token there, and a
        local cluster's ray.init turned token mode on."""
        if self._auth_saved is not None:
            ray_auth.restore(self._auth_saved)
            self._auth_saved = None

    def tasks(self, fn: Callable[[T], R], items: Sequence[T], in_flight: int) -> Iterator[tuple[T, R | str]]:
        """`fn(item)` for each item as a Ray task of one CPU, at most `in_flight` at a time, handed out in
        order and spread over the nodes; yields (item, its result) as they finish, or (item, Ray's reason) for
        a task Ray could not complete (its worker died more than executor.max_retries times). Call after
        `start`."""
        # SPREAD: Ray's default packs a short task onto the node that just freed a CPU, so on a lightly loaded
        # cluster one node could take every task; the tasks are independent, so they go round the nodes.
        remote = ray.remote(num_cpus=1, max_retries=int(self.cfg.get("max_retries", 2)),
                            scheduling_strategy="SPREAD")(fn)
        waiting = list(reversed(items))
        running: dict[Any, T] = {}
        while waiting or running:
            while waiting and len(running) < max(in_flight, 1):
                item = waiting.pop()
                running[remote.remote(item)] = item
            done, _ = ray.wait(list(running), num_returns=1)
            for ref in done:
                item = running.pop(ref)
                try:
                    yield item, ray.get(ref)
                except RayError as exc:
                    yield item, _first_line(exc)

    def _start_private(self, kind: str, cpus: int | None) -> int:
        """Start (local) or join (cluster) a Ray cluster of this command's own; returns its CPU count."""
        if kind == "local":
            end_leftovers()
            # ray.init of a new local cluster turns token mode on in this process's environment
            # (RAY_AUTH_MODE=token) and leaves it there: a long-lived caller (a notebook, a test session)
            # would then send tokens to a later executor=cluster without authentication, whose calls back
            # its driver refuses (actors die at once). `close` puts the variables back.
            self._auth_saved = ray_auth.save()
            local.start(cpus or os.cpu_count() or 1)
            self._recorded = True
            record_ray_processes()
        elif kind == "cluster":
            address = self.cfg.get("address")
            if not address or address == "???":
                raise FarmError("executor=cluster needs an address", "add executor.address=HOST:PORT")
            # A missing or refused token is named now, not blamed on the address after ray.init's retries.
            self._auth_saved = ray_auth.prepare(str(address), self.cfg.get("auth_token_path"))
            farm_dir = str(Path(__file__).resolve().parent.parent)  # the farm package
            # Without a working_dir, Ray puts the driver's working directory first on every
            # worker's sys.path: run from a checkout, a node's own files at that path would shadow
            # the farm shipped in py_modules. An empty working_dir keeps workers off the driver's paths.
            # Ray's native code logs each failed try to reach the cluster on stderr (about 20 lines before
            # ray.init gives up): kept back, so the farm's error comes alone, with Ray's last word in it.
            try:
                with (tempfile.TemporaryDirectory(prefix="farm-job-") as empty,
                      ray_compat.captured_stderr() as written):
                    ray.init(address=address, runtime_env={"py_modules": [farm_dir, *map(str, self.modules)],
                                                          "working_dir": empty},
                             **local.QUIET)
            except Exception as exc:
                ray_said, rest = ray_compat.split_ray_log("".join(written))
                sys.stderr.write(rest)  # anything else that was written meanwhile is not lost
                last = f" (Ray: {ray_said[-1]})" if ray_said else ""
                raise FarmError(f"could not reach the Ray cluster at executor.address={address}: "
                                f"{_first_line(exc)}{last}",
                                "check executor.address (the HOST:PORT `ray start --head` printed), or use the "
                                "default executor=local") from None
            sys.stderr.write("".join(written))
        else:
            raise FarmError(f"unknown executor kind {kind!r}; accepted: local, cluster",
                            "use executor=local or executor=cluster executor.address=...")
        count = int(ray.cluster_resources().get("CPU", 0))
        if count < 1:
            ray.shutdown()
            raise FarmError(f"the Ray cluster ({kind}) has no CPU to compile on", "add a node with CPUs")
        return count


class RayExecutor:
    """Context manager: `share_sources`, `submit` rows, iterate `completed_batches()` in completion order.

    Rows run on compile actors of a private local cluster (or of the cluster at executor.address), or,
    when `standing` names a running standing cluster (farm/execute/standing.py), on its warm named actors.
    """

    def __init__(self, executor_cfg: Mapping[str, Any], timeout_s: float,
                 standing: Mapping[str, Any] | None = None, rows: int | None = None) -> None:
        self.cfg = executor_cfg
        self.timeout_s = timeout_s
        self.standing = standing
        self.rows = rows  # rows to compile, when known: no more compile actors are started than that
        self.warm = bool(executor_cfg.get("warm", True))
        self._sources_ref: Any = None
        self._dispatch: Dispatch | None = None
        self._session = RaySession(executor_cfg)
        self.daemon_cpu_seconds: float | None = None  # no daemon in between: Ray's work is the build's own

    def __enter__(self) -> RayExecutor:
        num_cpus(self.cfg)  # a bad value is named before Ray starts
        if self.standing and self._join_standing():
            return self
        count = self._session.start()
        self._dispatch = Dispatch(self._send, int(self.cfg.get("max_retries", 2)), self._new_actor)
        # Each actor starts a warm compile server (torch and FlyDSL imported, seconds of CPU): a build of a
        # few rows on a large cluster starts only as many as it has rows.
        actors = min(count, self.rows) if self.rows else count
        self._dispatch.start([self._new_actor() for _ in range(actors)], ACTOR_START_S)
        return self

    def _new_actor(self) -> Any:
        return PRIVATE_ACTOR.remote()

    def _join_standing(self) -> bool:
        """Connect to the standing cluster's actors; if that fails, say so in one line and return False
        (the build then starts a private cluster)."""
        assert self.standing is not None
        standing.use_token(Path(self.standing["root"]))
        try:
            ray.init(address=self.standing["address"], namespace=standing.NAMESPACE, **local.QUIET)
            actors = [ray.get_actor(standing.actor_name(i)) for i in range(int(self.standing["num_cpus"]))]
            # Its actors restart themselves in place (the daemon made them so): nothing to replace.
            self._dispatch = Dispatch(self._send, int(self.cfg.get("max_retries", 2)))
            self._dispatch.start(actors, standing.JOIN_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 (any failure to join means: build on a private cluster)
            ray.shutdown()
            standing.drop_token()
            log.warning("the standing cluster at %s does not answer (%s); this build starts a private cluster",
                        self.standing["address"], _first_line(exc))
            self.standing, self._dispatch = None, None
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        self._session.close()

    def share_sources(self, sources: dict[str, bytes]) -> None:
        """The kernel sources, put once into Ray's object store; every row's call refers to them."""
        self._sources_ref = ray.put(sources)

    def submit(self, request: CompileRequest) -> None:
        assert self._dispatch is not None, "use RayExecutor as a context manager"
        self._dispatch.submit(request)

    def _send(self, actor: Any, requests: list[CompileRequest]) -> Any:
        return actor.compile_parcel.remote(requests, self._sources_ref, self.timeout_s, self.warm)

    def completed_batches(self, gather_s: float = BATCH_GATHER_S) -> Iterator[list[CompileResult]]:
        """Results in completion order, in batches: after the first result of a batch, whatever else
        finishes within `gather_s` joins it (the driver then verifies a batch with one disassembler run)."""
        assert self._dispatch is not None, "use RayExecutor as a context manager"
        yield from self._dispatch.batches(gather_s)

    def taken_unix(self, key: str) -> float | None:
        """When the driver took `key`'s result from Ray (its batch's gather may have gone on after that)."""
        assert self._dispatch is not None, "use RayExecutor as a context manager"
        return self._dispatch.taken_unix(key)

    def returned_unix(self, key: str) -> float | None:
        """When `key`'s call ended on its worker (the end of its parcel's last row)."""
        assert self._dispatch is not None, "use RayExecutor as a context manager"
        return self._dispatch.returned_unix(key)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
