"""The compile actor: one per CPU, owning its warm compile server; each call is one isolated compile.

Warm state (the zygote and its codegen server, farm/worker/warm.py) lives in these actors' processes,
for a build on a private cluster and, on the standing cluster, between builds. Every row still compiles
in its own fresh fork of that server, exactly as before: the actor only decides which process owns it.

Requests and results are the contract's (farm/contract.py): passed through, read only for their key.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import ray

from farm.contract import CompileRequest, CompileResult, Json
from farm.worker.isolate import compile_isolated
from farm.worker.warm import WarmServer


def failure(key: str, error: str) -> CompileResult:
    """A result without an object, for a row whose actor died or raised (the driver reports it)."""
    return CompileResult.failure(key, error)


def node_name() -> str:
    """host/ip/node-id prefix of this worker's node (nodes of one test cluster share a host name)."""
    context = ray.get_runtime_context()
    return f"{socket.gethostname()}/{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"


# Compiles run one at a time in the actor's default group; `hello` answers from its own group, so a build
# joining a standing cluster does not wait behind another build's compiles to learn an actor is there.
CONCURRENCY = {"concurrency_groups": {"control": 1}}


@dataclass(frozen=True)
class WarmUp:
    """How a compiler's warm-up went (the standing cluster's daemon checks it before it says `up`)."""

    ready: bool
    warmup_seconds: float


class Compiler:
    """One CPU's compiler. Becomes a Ray actor (`ray.remote(**CONCURRENCY, ...)(Compiler)`) in the executor
    and the standing cluster's daemon; on a standing cluster its zygote outlives builds."""

    def __init__(self) -> None:
        self.server = WarmServer()  # this actor's warm compile server, started on first use

    @ray.method(concurrency_group="control")
    def hello(self) -> str:
        """This actor's id: the driver waits for it before sending rows, and names a dead actor by it."""
        return str(ray.get_runtime_context().get_actor_id())

    def warm(self, linker: dict[str, Json] | None) -> WarmUp:
        """Start the warm compile server now (the standing cluster warms before it says `up`)."""
        zygote, seconds = self.server.get(linker)
        return WarmUp(zygote.alive(), seconds)

    def compile_parcel(self, requests: list[CompileRequest], sources: dict[str, bytes], timeout_s: float,
                       warm: bool) -> list[CompileResult]:
        """The rows of one call (farm/execute/dispatch.py), one after another, each its own isolated compile
        with its own time limit; a result per request, in their order. Never raises."""
        return [self.compile(request, sources, timeout_s, warm) for request in requests]

    def compile(self, request: CompileRequest, sources: dict[str, bytes], timeout_s: float,
                warm: bool) -> CompileResult:
        """One isolated compile on this actor's node; never raises (the driver must learn the row's key)."""
        node = node_name()
        try:
            return compile_isolated(request, sources, timeout_s, self.server if warm else None, node=node)
        except Exception as exc:  # noqa: BLE001 (a bug in the worker: reported as this row's failure)
            return failure(request.key, f"the compile worker on {node} raised {type(exc).__name__}: {exc}")
