"""Stand-ins for the standing cluster's relay tests (tests/test_relay.py, tests/test_relay_heartbeat.py): a
project holding the daemon's key, its state file's relay fields, a compile request, and a daemon that accepts one
keyed connection."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from pathlib import Path

from farm.contract import CompileRequest, TargetFacts
from farm.execute.relay import relay_code
from farm.execute.standing_files import StandingState, state_dir

KEY = b"0123456789abcdef" * 4


def keyed_project(root: Path) -> Path:
    """A project whose standing-cluster directory holds KEY as its auth token (mode 0600)."""
    where = state_dir(root)
    where.mkdir(parents=True)
    fd = os.open(where / "auth_token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(KEY)
    return root


def relay_state(root: Path, sock: Path | str | None, code: str | None = None) -> StandingState:
    """The part of a standing cluster's state file the relay reads: its socket, and the relay code it runs (this
    build's unless `code` says otherwise)."""
    return {"root": str(root), "relay": None if sock is None else str(sock),  # type: ignore[typeddict-item]
            "relay_code": code or relay_code()}


def request(key: str) -> CompileRequest:
    return CompileRequest(key, "rmsnorm", {}, TargetFacts("gfx942", "gfx942", "gfx942"))


def stand_in_daemon(path: Path, behave: Callable[[Connection], None]) -> threading.Thread:
    """A stand-in daemon: accepts one keyed connection on `path` and does `behave` with it."""
    listener = Listener(str(path), family="AF_UNIX", authkey=KEY)

    def serve() -> None:
        with listener, listener.accept() as conn:
            behave(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread
