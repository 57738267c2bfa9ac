"""The daemon's end of the build relay (farm/execute/relay.py): a keyed Unix socket, one thread per build.

Each build's rows go through their own `Dispatch` over the daemon's warm actors, exactly as a build that
joined Ray would run them; two builds at once share the actors the way two joined builds would.
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
from farm.execute.relay import RelayBatch, RelayEnd, RelayJob
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
            try:
                job = conn.recv()
                if not isinstance(job, RelayJob):
                    conn.send(RelayEnd(f"the build socket got a {type(job).__name__}, not a RelayJob",
                                       "run farm build (the same farm code as the daemon)"))
                    return
                log.info("relaying a build of %d rows", len(job.requests))
                self._run(conn, job)
            except (EOFError, BrokenPipeError, ConnectionError):
                log.info("a relayed build went away before its last result")
            except FarmError as exc:
                _tell(conn, RelayEnd(exc.what, exc.fix))
            except Exception as exc:  # noqa: BLE001 (the build hears of it instead of waiting forever)
                log.exception("a relayed build failed in the daemon")
                _tell(conn, RelayEnd(f"the standing cluster's daemon failed: {type(exc).__name__}: {exc}",
                                     "farm cluster down && farm cluster up restarts it"))

    def _run(self, conn: Connection, job: RelayJob) -> None:
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
            conn.send(RelayBatch(batch, taken, returned))
        conn.send(RelayEnd(daemon_cpu_seconds=time.process_time() - cpu))


def _tell(conn: Connection, message: RelayEnd) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass  # the build is gone: nobody to tell


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
