"""A build's rows relayed through the standing cluster's daemon, so the build itself never imports Ray.

Importing Ray, joining its cluster and leaving it cost a small rebuild more than a second before and after
its compiles. The daemon (farm/execute/standing.py) is already joined: it listens on a Unix socket
(farm/execute/relay_server.py), and a build sends it the kernel sources and its compile requests in one
`RelayJob`. The daemon runs them on its warm actors through the same dispatch a build would use (same
retries, same per-row isolation) and streams the results back in batches. Everything else stays in the
build's own process: verification, writing, manifests and their locks.

The socket is the standing cluster's, keyed with its token: `multiprocessing.connection` checks the key
both ways before anything is unpickled, so only this user's builds and this user's daemon talk. A daemon
that does not answer, an older one without a socket, or one whose relay code differs from the build's
(`relay_code`: the farm can be edited or upgraded under a running daemon) leaves the build to join Ray
directly.

While it runs a build's rows the daemon sends a heartbeat every HEARTBEAT_S from a thread of its own, so a
build tells a hung daemon (stopped, wedged) from a slow compile: silence for the heartbeat timeout raises
`DaemonLost`, as does a daemon that goes away, and the build compiles the rows left on a private cluster
(farm/execute/choice.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

from farm.contract import CompileRequest, CompileResult
from farm.core.errors import FarmError
from farm.execute.settings import BATCH_GATHER_S, HEARTBEAT_TIMEOUT_S, MAX_PARCEL
from farm.execute.standing_files import StandingState, read_token

log = logging.getLogger(__name__)

# How long a build waits for the daemon to accept it and check the key both ways: a stopped or stuck
# daemon costs this, then the build joins Ray itself.
CONNECT_TIMEOUT_S = 5.0
# Past the time limits of one call's rows (a parcel of up to MAX_PARCEL, compiled one after another), how long
# the build waits for the daemon's next result while its heartbeat still comes: each row's compile ends at its
# own time limit, so no result for this long means the daemon's dispatch is stuck.
SILENCE_GRACE_S = 180.0
# How long hanging up waits for the job's send to give up (the socket is shut down under it first).
CLOSE_WAIT_S = 5.0


@dataclass(frozen=True)
class RelayJob:
    """Everything one build sends: the rows run exactly as on RayExecutor with these settings."""

    sources: dict[str, bytes]
    requests: list[CompileRequest]
    timeout_s: float
    warm: bool
    max_retries: int
    gather_s: float


@dataclass(frozen=True)
class RelayBatch:
    """Results that finished together, with when the daemon took each from Ray and when each one's call ended
    on its worker (unix time)."""

    results: list[CompileResult]
    taken_unix: dict[str, float] = field(default_factory=dict)
    returned_unix: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RelayEnd:
    """The last message: every row had its result, or the daemon could not go on (what, and the fix).
    `daemon_cpu_seconds`: the daemon's process CPU while it ran the build (its Ray work for these rows,
    which a build that joins Ray pays in its own process)."""

    error: str | None = None
    fix: str | None = None
    daemon_cpu_seconds: float | None = None


@dataclass(frozen=True)
class RelayAlive:
    """The daemon's heartbeat while it runs the build's rows (every HEARTBEAT_S, from a thread of its own)."""


class DaemonLost(FarmError):
    """The daemon went away or fell silent mid-build (no heartbeat): the rows without a result are the
    caller's to compile elsewhere (farm/execute/choice.py moves them to a private cluster). `elsewhere`: what
    the user may do about the daemon once the build went on without it."""

    def __init__(self, what: str, fix: str, elsewhere: str) -> None:
        super().__init__(what, fix)
        self.elsewhere = elsewhere


# The code on both ends of the socket: what is sent, how the daemon runs it, and the actor it calls.
RELAY_FILES = ("relay.py", "relay_server.py", "dispatch.py", "compiler.py", "settings.py")


def relay_code() -> str:
    """SHA256 over the relay's source files as this process has them (the daemon records its own)."""
    digest = hashlib.sha256()
    for name in RELAY_FILES:
        digest.update(name.encode() + b"\0" + (Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def socket_of(state: StandingState) -> Path | None:
    """The daemon's build socket as its state file names it, if that is a socket of this user's in a private
    directory of this user's (the state file is data: a path in it is checked before it is used)."""
    named = state.get("relay")
    if not isinstance(named, str) or not os.path.isabs(named) or len(named) > 100:
        return None
    path = Path(named)
    try:
        sock, parent = os.lstat(path), os.lstat(path.parent)
    except OSError:
        return None
    mine = sock.st_uid == parent.st_uid == os.getuid()
    private = stat.S_ISDIR(parent.st_mode) and not parent.st_mode & 0o077
    return path if mine and private and stat.S_ISSOCK(sock.st_mode) else None


def connect(state: StandingState, timeout_s: float = CONNECT_TIMEOUT_S) -> Connection | None:
    """A keyed connection to the daemon's build socket, or None (said in one line) when there is none or it
    does not answer in time: the build then joins Ray itself."""
    path = socket_of(state)
    if path is None:
        return None  # an older daemon without a socket, or a socket that is not ours: nothing to say
    if state.get("relay_code") != relay_code():
        log.info("the standing cluster's daemon runs other relay code than this build; this build joins its "
                 "Ray cluster directly (farm cluster down && farm cluster up refreshes the daemon)")
        return None
    try:
        key = read_token(Path(state["root"]))
    except OSError as exc:
        log.warning("the standing cluster's token cannot be read (%s); this build joins its Ray cluster directly",
                    exc)
        return None
    # Client() blocks in the key check; a daemon that was stopped (SIGSTOP) must not hang the build.
    got: dict[str, Any] = {}

    def attempt() -> None:
        try:
            got["conn"] = Client(str(path), family="AF_UNIX", authkey=key)
        except Exception as exc:  # noqa: BLE001 (any failure means: join Ray directly)
            got["error"] = exc

    worker = threading.Thread(target=attempt, name="farm-relay-connect", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "conn" in got:
        return got["conn"]  # type: ignore[no-any-return]
    why = got.get("error") or f"no answer within {timeout_s:.0f} s"
    log.warning("the standing cluster's build socket %s does not answer (%s); this build joins its Ray "
                "cluster directly", path, why)
    return None


class RelayExecutor:
    """RayExecutor's interface (share_sources, submit, completed_batches, taken_unix, returned_unix) over the daemon's
    socket. The rows go out when the results are first asked for. `daemon_pid` names the daemon in messages;
    `heartbeat_timeout_s` is how long silence means it is hung."""

    def __init__(self, conn: Connection, executor_cfg: Mapping[str, Any], timeout_s: float,
                 daemon_pid: int | None = None, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        self._conn = conn
        self._timeout_s = timeout_s
        self._warm = bool(executor_cfg.get("warm", True))
        self._retries = int(executor_cfg.get("max_retries", 2))
        self._daemon = "the standing cluster's daemon" + (f" (pid {daemon_pid})" if daemon_pid is not None else "")
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._sources: dict[str, bytes] = {}
        self._requests: list[CompileRequest] = []
        self._waiting: set[str] = set()
        self._sending: threading.Thread | None = None  # the job's send (completed_batches)
        self._taken: dict[str, float] = {}
        self._returned: dict[str, float] = {}
        self.daemon_cpu_seconds: float | None = None  # said by the daemon at the end (RelayEnd)

    def __enter__(self) -> RelayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # a build that stops early: the daemon sees it gone and stops sending

    def close(self) -> None:
        """Hang up. A send still blocked on a stopped daemon is woken (shutdown), so no thread waits on it."""
        if self._conn.closed:
            return
        try:
            with socket.socket(fileno=os.dup(self._conn.fileno())) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the daemon hung up first
        if self._sending is not None:
            self._sending.join(CLOSE_WAIT_S)  # it fails at once now: let it, before its handle goes
        self._conn.close()

    def share_sources(self, sources: dict[str, bytes]) -> None:
        self._sources = sources

    def submit(self, request: CompileRequest) -> None:
        self._requests.append(request)

    @property
    def sources(self) -> dict[str, bytes]:
        return self._sources

    def left(self) -> list[CompileRequest]:
        """The rows submitted that have no result yet, in the order they were submitted."""
        return [r for r in self._requests if r.key in self._waiting]

    def completed_batches(self, gather_s: float = BATCH_GATHER_S) -> Iterator[list[CompileResult]]:
        """Results in completion order, in the batches the daemon gathered (`gather_s` apart at most). Raises
        DaemonLost when the daemon goes away or sends nothing, not even its heartbeat, for the heartbeat timeout."""
        self._waiting = {r.key for r in self._requests}
        # Sent from a thread: a daemon stopped before it read the whole job would block this send for good
        # (the sources are larger than the socket's buffer); its silence is then seen below.
        job = RelayJob(self._sources, self._requests, self._timeout_s, self._warm, self._retries, gather_s)
        self._sending = threading.Thread(target=self._send_job, args=(job,), name="farm-relay-send", daemon=True)
        self._sending.start()
        stuck_s = MAX_PARCEL * self._timeout_s + SILENCE_GRACE_S
        last_result = time.monotonic()
        while True:
            try:
                if not self._conn.poll(self._heartbeat_timeout_s):
                    raise DaemonLost(f"{self._daemon} sent nothing for {self._heartbeat_timeout_s:g} s, not even its "
                                     f"heartbeat, with {len(self._waiting)} rows without a result: it is hung",
                                     "farm cluster down stops it; run the build again (what was written is kept)",
                                     "farm cluster down stops that daemon")
                message = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise DaemonLost(f"{self._daemon} went away during the build ({len(self._waiting)} rows without a "
                                 f"result: {type(exc).__name__})",
                                 "run the build again (what was written is kept); farm cluster status says "
                                 "whether the cluster is up",
                                 "farm cluster status says whether a standing cluster is up") from None
            if isinstance(message, RelayAlive):
                if time.monotonic() - last_result > stuck_s:
                    raise FarmError(f"{self._daemon} is alive but sent no result for {stuck_s:.0f} s with "
                                    f"{len(self._waiting)} rows still compiling",
                                    "farm cluster down && farm cluster up restarts it; run the build again "
                                    "(what was written is kept)")
                continue
            if isinstance(message, RelayEnd):
                if message.error is not None:
                    raise FarmError(message.error, message.fix)
                self.daemon_cpu_seconds = message.daemon_cpu_seconds
                return
            if not isinstance(message, RelayBatch):
                raise FarmError(f"the standing cluster's daemon sent a {type(message).__name__}, not a batch",
                                "farm cluster down && farm cluster up restarts it")
            last_result = time.monotonic()
            self._taken.update(message.taken_unix)
            self._returned.update(message.returned_unix)
            self._waiting.difference_update(r.key for r in message.results)
            yield message.results

    def _send_job(self, job: RelayJob) -> None:
        try:
            self._conn.send(job)
        except (OSError, ValueError):
            pass  # the daemon went away (the reader sees it), or close() hung up under a stopped one

    def taken_unix(self, key: str) -> float | None:
        """When the daemon took `key`'s result from Ray."""
        return self._taken.pop(key, None)

    def returned_unix(self, key: str) -> float | None:
        """When `key`'s call ended on its worker (the end of its parcel's last row)."""
        return self._returned.pop(key, None)
