"""Rows to compile actors through Ray's public `ray.util.ActorPool`, with the farm's retries on top.

The pool keeps a call in each of its slots and hands the next row to whichever slot finishes first. Each
actor has SLOTS_PER_ACTOR slots: its next row already waits in the actor's queue when a row ends, so the
actor does not idle while its result travels back and the driver verifies a batch (an actor still runs
one row at a time). What the pool does not do, this module does:
- an actor that dies (its process killed, its node lost) takes its row with it: the row goes to another
  actor, up to `retries` times (executor.max_retries), then it fails as "Ray task failed: ...";
- actors join the pool only once they answer, so no row waits on an actor that was never placed (the
  replacement of an actor whose node died may find no CPU anywhere);
- results come back in batches: whatever finishes within a short gather joins the first result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util import ActorPool

from farm.contract import CompileRequest, CompileResult
from farm.core.errors import FarmError
from farm.execute.compiler import failure

log = logging.getLogger(__name__)

# While an actor is still joining, the driver looks for it this often between results.
JOIN_POLL_S = 1.0
# How long rows with no live actor wait for one to join before they fail.
JOIN_WAIT_S = 120.0

Actor = Any  # a ray.actor.ActorHandle of farm.execute.compiler.Compiler
Send = Callable[[Actor, CompileRequest], Any]  # (actor, request) -> the ObjectRef of its result

# Rows in flight per actor: one compiling, one queued behind it. Measured on the 2-core machine: each row's
# result took ~0.1 s to come back and be taken, an idle gap a second slot fills; 90 RMSNorm rows on the
# standing cluster took 25.5 s with two slots against 26.6 s with one (three alternating rounds each).
# More slots only make the build's tail longer (rows wait behind a busy actor while another is free).
SLOTS_PER_ACTOR = 2


class Slot:
    """One of an actor's places in the pool (ActorPool holds each member once; an actor joins as several)."""

    __slots__ = ("actor",)

    def __init__(self, actor: Actor) -> None:
        self.actor = actor


class Dispatch:
    """Submit requests; iterate `batches()` of results in completion order until every row has one."""

    def __init__(self, send: Send, retries: int, replace: Callable[[], Actor] | None = None) -> None:
        self._send = send
        self._retries = retries
        self._replace = replace  # starts a new actor for a dead one (None: the actors restart themselves)
        self._pool = ActorPool([])
        self._ids: dict[Actor, str] = {}  # actor -> its Ray actor id (what a death names)
        self._joining: dict[Any, Actor] = {}  # hello() ref -> actor not yet in the pool
        self._open: dict[str, CompileRequest] = {}  # key -> request, for every row without an outcome
        self._running: dict[str, str] = {}  # key -> id of the actor it was sent to
        self._tries: dict[str, int] = {}
        self._unexplained: list[RayError] = []  # failures the pool could not tie to a row
        self._gone: set[str] = set()  # ids of the build's own actors that failed and were killed
        self._taken: dict[str, float] = {}  # key -> when the driver took its result from Ray (unix time)

    def start(self, actors: list[Actor], timeout_s: float) -> int:
        """Let `actors` join as they answer; wait up to `timeout_s` for all of them. Returns how many joined
        (stragglers join later); none at all is the user's to fix."""
        for actor in actors:
            self._joining[actor.hello.remote()] = actor
        self._admit(timeout_s, every=True)
        if not self._ids:
            raise FarmError(f"none of {len(actors)} compile actors started within {timeout_s:.0f} s",
                            "check that the Ray cluster has free CPUs and that its nodes can import the farm")
        return len(self._ids)

    def submit(self, request: CompileRequest) -> None:
        key = request.key
        self._open[key] = request
        self._tries.setdefault(key, 0)
        self._pool.submit(self._dispatch, request)

    def batches(self, gather_s: float) -> Iterator[list[CompileResult]]:
        """Results in completion order, in batches: after the first result of a batch, whatever else
        finishes within `gather_s` joins it."""
        while self._open:
            batch: list[CompileResult] = []
            self._step(batch, JOIN_POLL_S if self._joining else None)
            deadline = time.monotonic() + gather_s
            while self._open and self._pool.has_next() and (left := deadline - time.monotonic()) > 0:
                if not self._step(batch, left):
                    break
            if batch:
                yield batch

    def taken_unix(self, key: str) -> float | None:
        """When the driver took `key`'s result from Ray (before its batch's gather ended); None if it never did."""
        return self._taken.pop(key, None)

    # --- inside ------------------------------------------------------------------------------------

    def _dispatch(self, slot: Slot, request: CompileRequest) -> Any:
        """The pool's submit function: note which actor got the row, then send it."""
        self._running[request.key] = self._ids[slot.actor]
        return self._send(slot.actor, request)

    def _step(self, batch: list[CompileResult], timeout: float | None) -> bool:
        """Wait at most `timeout` for one outcome and add it to `batch`; False when none came in time."""
        self._admit(0)
        if not self._pool.has_next():
            self._stalled(batch)
            return True
        try:
            result = self._pool.get_next_unordered(timeout=timeout)
        except TimeoutError:
            return False
        except RayActorError as exc:
            self._died(exc, batch)
        except RayError as exc:  # e.g. a result lost with its node: tied to its row once the pool is idle
            self._unexplained.append(exc)
        else:
            key = result.key
            self._running.pop(key, None)
            if self._open.pop(key, None) is not None:
                self._taken[key] = time.time()
                batch.append(result)
        return True

    def _died(self, exc: RayActorError, batch: list[CompileResult]) -> None:
        """The actor that had a row is gone or unreachable (its node lost): that row goes elsewhere. An actor
        of the build's own is then killed, so that the pool drops its slots at their next call (an
        unreachable one would otherwise stay in the pool), and a new actor is started in its place (it joins
        when it answers). A row in the dead actor's other slot fails too: for a replaced actor it is sent
        elsewhere without counting a try (`_gone`); an actor that restarts itself charges it one, like this row."""
        key = next((k for k, actor_id in self._running.items() if actor_id == exc.actor_id), None)
        if key is None:
            self._unexplained.append(exc)
            return
        del self._running[key]
        if exc.actor_id in self._gone:  # sent there before the pool dropped it: not this row's failure
            self._pool.submit(self._dispatch, self._open[key])
            return
        self._retry_or_fail(key, exc, batch)
        if self._replace is not None:
            self._gone.add(exc.actor_id)
            actor = next(a for a, actor_id in self._ids.items() if actor_id == exc.actor_id)
            try:
                ray.kill(actor, no_restart=True)
            except RayError:
                pass  # gone already
            replacement = self._replace()
            self._joining[replacement.hello.remote()] = replacement

    def _stalled(self, batch: list[CompileResult]) -> None:
        """Nothing is in flight, yet rows are open: rows sent whose failure could not be tied to them are
        lost (retried); rows waiting for an actor wait for one to join, or fail when none does."""
        lost = list(self._running)
        cause: BaseException = self._unexplained[-1] if self._unexplained else RuntimeError("its result was lost")
        for key in lost:
            del self._running[key]
            self._retry_or_fail(key, cause, batch)
        if lost or self._admit(JOIN_WAIT_S):
            return
        for key in list(self._open):
            batch.append(failure(key, "Ray task failed: no compile actor is alive on the cluster"))
        self._open.clear()
        self._pool = ActorPool([])  # drop the rows it still held for an actor that never came

    def _retry_or_fail(self, key: str, exc: BaseException, batch: list[CompileResult]) -> None:
        self._tries[key] += 1
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self._tries[key] > self._retries:
            batch.append(failure(key, f"Ray task failed: {exc}"))
            del self._open[key]
            return
        log.info("%s lost its worker (%s); retry %d of %d", key, reason, self._tries[key], self._retries)
        self._pool.submit(self._dispatch, self._open[key])

    def _admit(self, timeout_s: float, every: bool = False) -> bool:
        """Move actors that answered into the pool (waiting up to `timeout_s` for one, or for `every`
        one); True when any joined. An actor that failed to start is dropped."""
        if not self._joining:
            return False
        wanted = len(self._joining) if every or timeout_s == 0 else 1
        ready, _ = ray.wait(list(self._joining), num_returns=wanted, timeout=timeout_s)
        joined: list[Actor] = []
        for ref in ready:
            actor = self._joining.pop(ref)
            try:
                self._ids[actor] = ray.get(ref)
            except RayError as exc:
                log.info("a compile actor did not start: %s", str(exc).strip().splitlines()[0] if str(exc).strip()
                         else type(exc).__name__)
                continue
            joined.append(actor)
        # The pool hands out its idle slots last-in first-out: every actor's first slot goes in last, so the
        # first rows spread over all the actors before any actor gets a second.
        for _ in range(SLOTS_PER_ACTOR):
            for actor in reversed(joined):
                self._pool.push(Slot(actor))
        return bool(joined)
