"""The daemon's end of the build relay (farm/execute/relay.py): a keyed Unix socket, one thread per build.

Each build's rows go through their own `Dispatch` over the daemon's warm actors, exactly as a build that
joined Ray would run them; two builds at once share the actors the way two joined builds would. While a
build's rows run, a thread of their own sends it a heartbeat every HEARTBEAT_S: the serving thread may wait
on Ray for a long compile, the heartbeat still comes, and it stops only when the daemon does.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import ray

from farm.core.errors import FarmError
from farm.execute.dispatch import Dispatch
from farm.execute.relay import RelayAlive, RelayBatch, RelayEnd, RelayJob
from farm.execute.settings import HEARTBEAT_S
from farm.worker.environment import short_private_dir

log = logging.getLogger("farm.execute.standing")


def socket_path() -> Path:
    """This daemon's socket, in the user's private directory (short: a socket path has ~100 bytes)."""
    return short_private_dir("relay") / f"{os.getpid()}.sock"


class RelayServer:
    """Accepts builds on `path` (only peers holding `key`) and runs their rows on `actors`."""

    def __init__(self, actors: list[Any], key: bytes, join_timeout_s: float) -> None:
        self.actors = actors
        self.join_timeout_s = join_timeout_s
        self.path = socket_path()
        _sweep_dead_sockets(self.path.parent)  # daemons ended by SIGKILL leave theirs (this pid's included)
        self._listener = Listener(str(self.path), family="AF_UNIX", authkey=key)
        os.chmod(self.path, 0o600)
        self._closed = False
        threading.Thread(target=self._accept, name="farm-relay-accept", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()  # multiprocessing unlinks its socket here; _remove_socket makes sure
        _remove_socket(self.path)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn = self._listener.accept()
            except Exception as exc:  # noqa: BLE001 (a wrong key: AuthenticationError; a peer that hung up)
                if self._closed:
                    return  # close() shut the listener under accept()
                log.warning("refused a connection to the build socket: %s", exc)
                continue
            threading.Thread(target=self._serve, args=(conn,), name="farm-relay-build", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            sender = _Sender(conn)
            try:
                job = conn.recv()
                if not isinstance(job, RelayJob):
                    sender.send(RelayEnd(f"the build socket got a {type(job).__name__}, not a RelayJob",
                                         "run farm build (the same farm code as the daemon)"))
                    return
                log.info("relaying a build of %d rows", len(job.requests))
                with _Heartbeat(sender, HEARTBEAT_S):
                    self._run(sender, job)
            except (EOFError, BrokenPipeError, ConnectionError):
                log.info("a relayed build went away before its last result")
            except FarmError as exc:
                sender.tell(RelayEnd(exc.what, exc.fix))
            except Exception as exc:  # noqa: BLE001 (the build hears of it instead of waiting forever)
                log.exception("a relayed build failed in the daemon")
                sender.tell(RelayEnd(f"the standing cluster's daemon failed: {type(exc).__name__}: {exc}",
                                     "farm cluster down && farm cluster up restarts it"))

    def _run(self, sender: _Sender, job: RelayJob) -> None:
        cpu = time.process_time()  # the whole daemon's: Ray's threads do most of a build's work here
        sources = ray.put(job.sources)
        dispatch = Dispatch(lambda actor, requests: actor.compile_parcel.remote(requests, sources, job.timeout_s,
                                                                                 job.warm), job.max_retries)
        dispatch.start(self.actors, self.join_timeout_s)
        for request in job.requests:
            dispatch.submit(request)
        for batch in dispatch.batches(job.gather_s):
            taken = {r.key: t for r in batch if (t := dispatch.taken_unix(r.key)) is not None}
            returned = {r.key: t for r in batch if (t := dispatch.returned_unix(r.key)) is not None}
            sender.send(RelayBatch(batch, taken, returned))
        sender.send(RelayEnd(daemon_cpu_seconds=time.process_time() - cpu))


class _Sender:
    """One build's connection, sent to from two threads (results and heartbeats): one message at a time."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message: RelayAlive | RelayBatch | RelayEnd) -> None:
        with self._lock:
            self._conn.send(message)

    def tell(self, message: RelayEnd) -> None:
        """Send the last word, if the build is still there to hear it."""
        try:
            self.send(message)
        except (OSError, ValueError):
            pass  # the build is gone: nobody to tell


class _Heartbeat:
    """While the block runs: a RelayAlive every `every_s`, from a thread that does nothing else."""

    def __init__(self, sender: _Sender, every_s: float) -> None:
        self._sender = sender
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="farm-relay-heartbeat", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                self._sender.send(RelayAlive())
            except (OSError, ValueError):
                return  # the build is gone: the serving thread finds out on its next send


def _sweep_dead_sockets(where: Path) -> None:
    """Remove the sockets of daemons that are gone (each is named by its daemon's pid)."""
    for path in where.glob("*.sock"):
        try:
            pid = int(path.stem)
            if pid != os.getpid():
                os.kill(pid, 0)
                continue  # its daemon is alive
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue  # not a name of ours, or a live process of another user's
        _remove_socket(path)


def _remove_socket(path: Path) -> None:
    """Remove `path` only if it is a socket (never a file or a link someone put there)."""
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
