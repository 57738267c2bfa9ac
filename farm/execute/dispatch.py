"""Rows to compile actors through Ray's public `ray.util.ActorPool`, with the farm's retries on top.

The pool keeps a call in each of its slots and hands the next call to whichever slot finishes first. Each
actor has SLOTS_PER_ACTOR slots: its next call already waits in the actor's queue when a call ends, so the
actor does not idle while its results travel back and the driver verifies a batch (an actor still compiles
one row at a time, each in its own fresh process). A call carries a parcel of rows (`parcel_size`): while
many rows wait, up to MAX_PARCEL go in one call, so Ray's cost per call (submitting, the actor's task
bookkeeping, the result's way back) is shared by them; as the rows run out, parcels shrink to one row, so
the build's end is not held up by a long parcel. What the pool does not do, this module does:
- an actor that dies (its process killed, its node lost) takes its parcel with it: the parcel's rows go to
  other actors. A row that was alone in its call is charged a try, up to `retries` (executor.max_retries),
  then it fails as "Ray task failed: ..."; the rows of a larger parcel are not charged (which of them killed
  the actor is unknown) and are sent again one to a call, so a row that kills its actor is found alone;
- actors join the pool only once they answer, so no row waits on an actor that was never placed (the
  replacement of an actor whose node died may find no CPU anywhere);
- results come back in batches: whatever finishes within a short gather joins the first result.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError
from ray.util import ActorPool

from farm.contract import CompileRequest, CompileResult
from farm.core.errors import FarmError
from farm.execute.compiler import failure
from farm.execute.settings import MAX_PARCEL

log = logging.getLogger(__name__)

# While an actor is still joining, the driver looks for it this often between results.
JOIN_POLL_S = 1.0
# How long rows with no live actor wait for one to join before they fail.
JOIN_WAIT_S = 120.0

Actor = Any  # a ray.actor.ActorHandle of farm.execute.compiler.Compiler
# (actor, a parcel of requests) -> the ObjectRef of their results, one per request in the same order
Send = Callable[[Actor, list[CompileRequest]], Any]

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

    def __init__(self, send: Send, retries: int, replace: Callable[[], Actor] | None = None,
                 max_parcel: int = MAX_PARCEL) -> None:
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
        self._max_parcel = max_parcel
        self._queue: deque[str] = deque()  # keys not sent yet (or sent again), in the order they go out
        self._alone: set[str] = set()  # keys that go in a call of their own (sent again after a lost parcel)
        self._parcel_of: dict[str, tuple[str, ...]] = {}  # key in flight -> the keys of its call
        self._returned: dict[str, float] = {}  # key -> when its parcel's last row ended on the worker (unix time)

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
        """Queue `request`; rows go out in parcels once `batches()` runs (all of them known by then)."""
        key = request.key
        self._open[key] = request
        self._tries.setdefault(key, 0)
        self._queue.append(key)

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

    def returned_unix(self, key: str) -> float | None:
        """When `key`'s call ended on the worker: the end of its parcel's last row (a row that ended earlier
        waited there for it); None if its result never came."""
        return self._returned.pop(key, None)

    def parcel_size(self) -> int:
        """Rows for the next call: while many rows wait, up to MAX_PARCEL; as they run out, fewer, so that
        every slot still gets about two calls' worth of the rest, and the last ones go one to a call."""
        slots = max(len(self._ids) - len(self._gone), 1) * SLOTS_PER_ACTOR  # the live actors' slots
        return max(1, min(self._max_parcel, len(self._queue) // (2 * slots)))

    # --- inside ------------------------------------------------------------------------------------

    def _feed(self) -> None:
        """Send the queued rows to every free slot, a parcel per call."""
        while self._queue and self._pool.has_free():
            size = self.parcel_size()
            parcel = [self._queue.popleft()]
            if parcel[0] not in self._alone:
                while len(parcel) < size and self._queue and self._queue[0] not in self._alone:
                    parcel.append(self._queue.popleft())
            self._pool.submit(self._dispatch, [self._open[key] for key in parcel])

    def _dispatch(self, slot: Slot, requests: list[CompileRequest]) -> Any:
        """The pool's submit function: note which actor got the parcel, then send it."""
        keys = tuple(r.key for r in requests)
        for key in keys:
            self._running[key] = self._ids[slot.actor]
            self._parcel_of[key] = keys
        return self._send(slot.actor, requests)

    def _step(self, batch: list[CompileResult], timeout: float | None) -> bool:
        """Wait at most `timeout` for one outcome and add it to `batch`; False when none came in time."""
        self._admit(0)
        self._feed()
        if not self._pool.has_next():
            self._stalled(batch)
            return True
        try:
            results: list[CompileResult] = self._pool.get_next_unordered(timeout=timeout)
        except TimeoutError:
            return False
        except RayActorError as exc:
            self._died(exc, batch)
        except RayError as exc:  # e.g. a result lost with its node: tied to its rows once the pool is idle
            self._unexplained.append(exc)
        else:
            taken = time.time()
            returned = max((r.finished_unix for r in results if r.finished_unix is not None), default=None)
            for result in results:
                key = result.key
                self._running.pop(key, None)
                self._parcel_of.pop(key, None)
                if self._open.pop(key, None) is not None:
                    self._taken[key] = taken
                    if returned is not None:
                        self._returned[key] = returned
                    batch.append(result)
        self._feed()  # the slot that just finished gets its next call before the batch is verified
        return True

    def _died(self, exc: RayActorError, batch: list[CompileResult]) -> None:
        """The actor that had a parcel is gone or unreachable (its node lost): the parcel's rows go elsewhere
        (`_lost`). An actor of the build's own is then killed, so that the pool drops its slots at their next
        call (an unreachable one would otherwise stay in the pool), and a new actor is started in its place
        (it joins when it answers). The parcel in the dead actor's other slot fails too: for a replaced actor
        its rows are sent elsewhere without counting a try (`_gone`); an actor that restarts itself treats it
        like this one."""
        key = next((k for k, actor_id in self._running.items() if actor_id == exc.actor_id), None)
        if key is None:
            self._unexplained.append(exc)
            return
        parcel = self._forget_parcel(key)
        if exc.actor_id in self._gone:  # sent there before the pool dropped it: not these rows' failure
            self._again(parcel)
            return
        self._lost(parcel, exc, batch)
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
        lost = bool(self._running)
        cause: BaseException = self._unexplained[-1] if self._unexplained else RuntimeError("its result was lost")
        while self._running:
            self._lost(self._forget_parcel(next(iter(self._running))), cause, batch)
        if lost or self._admit(JOIN_WAIT_S):
            return
        for key in list(self._open):
            batch.append(failure(key, "Ray task failed: no compile actor is alive on the cluster"))
        self._open.clear()
        self._queue.clear()  # the rows that waited for an actor that never came

    def _forget_parcel(self, key: str) -> tuple[str, ...]:
        """The keys still in flight in `key`'s call, no longer in flight."""
        parcel = tuple(k for k in self._parcel_of.get(key, (key,)) if k in self._running)
        for k in parcel:
            del self._running[k]
            self._parcel_of.pop(k, None)
        return parcel

    def _again(self, keys: tuple[str, ...]) -> None:
        """Send `keys` again, first, each in a call of its own."""
        self._alone.update(keys)
        self._queue.extendleft(reversed(keys))

    def _lost(self, parcel: tuple[str, ...], exc: BaseException, batch: list[CompileResult]) -> None:
        """A call's rows lost with it: a row alone in its call is charged a try; a larger parcel's rows are
        not (which of them was at fault is unknown) and go again one to a call."""
        if len(parcel) > 1:
            log.info("a parcel of %d rows lost its worker (%s); each is sent again on its own", len(parcel),
                     _first_line(exc))
            self._again(parcel)
        elif parcel:
            self._retry_or_fail(parcel[0], exc, batch)

    def _retry_or_fail(self, key: str, exc: BaseException, batch: list[CompileResult]) -> None:
        self._tries[key] += 1
        if self._tries[key] > self._retries:
            batch.append(failure(key, f"Ray task failed: {exc}"))
            del self._open[key]
            return
        log.info("%s lost its worker (%s); retry %d of %d", key, _first_line(exc), self._tries[key], self._retries)
        self._again((key,))

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
                log.info("a compile actor did not start: %s", _first_line(exc))
                continue
            joined.append(actor)
        # The pool hands out its idle slots last-in first-out: every actor's first slot goes in last, so the
        # first rows spread over all the actors before any actor gets a second.
        for _ in range(SLOTS_PER_ACTOR):
            for actor in reversed(joined):
                self._pool.push(Slot(actor))
        return bool(joined)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
