"""The standing cluster's heartbeat, without a cluster (tests/test_standing_lost.py stops a real daemon): while
the daemon runs a build's rows a thread of its own says it is alive, so a compile that takes long never looks
like a hung daemon, and silence does. A daemon lost mid-build leaves its rows without a result to a private
cluster (farm/execute/choice.py `Relayed`); the rows that have one are kept."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from conftest import run_farm, small_expanded_copy
from relay_stand_ins import KEY, keyed_project, relay_state, request, stand_in_daemon

from farm.contract import CompileRequest, CompileResult
from farm.core.errors import FarmError
from farm.execute import choice, executor, relay_server, settings
from farm.execute.relay import DaemonLost, RelayBatch, RelayEnd, RelayExecutor, RelayJob, connect
from farm.execute.relay_server import RelayServer

SILENCE_S = 1.0  # the client's heartbeat timeout in these tests


def _relay(root: Path, sock: Path, *keys: str, sources: dict[str, bytes] | None = None) -> RelayExecutor:
    conn = connect(relay_state(root, sock))
    assert conn is not None
    pool = RelayExecutor(conn, {}, 60.0, daemon_pid=4242, heartbeat_timeout_s=SILENCE_S)
    pool.share_sources(sources or {"rmsnorm.py": b"source"})
    for key in keys:
        pool.submit(request(key))
    return pool


def test_a_long_compile_never_looks_like_a_hung_daemon(short_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's serving thread is busy (as it waits on Ray for a long compile) for three times the client's
    heartbeat timeout: the heartbeat, from its own thread, still comes, and the build gets its results."""
    root = keyed_project(tmp_path / "project")
    sock = short_dir / f"{os.getpid()}.sock"
    monkeypatch.setattr(relay_server, "socket_path", lambda: sock)
    monkeypatch.setattr(relay_server, "HEARTBEAT_S", 0.2)

    def long_compile(self: RelayServer, sender: Any, job: RelayJob) -> None:
        time.sleep(3 * SILENCE_S)  # no message from this thread meanwhile
        sender.send(RelayBatch([CompileResult(r.key, ok=True) for r in job.requests]))
        sender.send(RelayEnd(daemon_cpu_seconds=0.0))

    monkeypatch.setattr(RelayServer, "_run", long_compile)
    server = RelayServer([], KEY, 1.0)
    try:
        with _relay(root, sock, "op/t/a", "op/t/b") as pool:
            keys = [r.key for batch in pool.completed_batches() for r in batch]
        assert keys == ["op/t/a", "op/t/b"]
        # Without the heartbeat (one far slower than the client's timeout), the same compile is taken for a hang:
        # the test above could fail.
        monkeypatch.setattr(relay_server, "HEARTBEAT_S", 60.0)
        with _relay(root, sock, "op/t/a") as pool, pytest.raises(DaemonLost, match="not even its heartbeat"):
            list(pool.completed_batches())
    finally:
        server.close()


def test_a_silent_daemon_is_named_hung_within_the_timeout(short_dir: Path, tmp_path: Path) -> None:
    """A daemon that took the job and then says nothing (stopped, wedged): DaemonLost naming its pid and the fix,
    after the heartbeat timeout, not after the rows' time limits (4 x 60 s + 180 s here)."""
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "1.sock"
    stop = threading.Event()

    def silent(conn: Connection) -> None:
        conn.recv()
        conn.send(RelayBatch([CompileResult("op/t/a", ok=True)]))
        stop.wait(60)

    daemon = stand_in_daemon(sock, silent)
    started = time.monotonic()
    with _relay(root, sock, "op/t/a", "op/t/b") as pool:
        batches = pool.completed_batches()
        assert [r.key for r in next(batches)] == ["op/t/a"]
        with pytest.raises(DaemonLost) as lost:
            next(batches)
        assert [r.key for r in pool.left()] == ["op/t/b"]
    assert time.monotonic() - started < 60  # bounded by the heartbeat timeout, whatever the rows' time limits
    stop.set()
    daemon.join(5)
    assert lost.value.what == ("the standing cluster's daemon (pid 4242) sent nothing for 1 s, not even its heartbeat, "
                               "with 1 rows without a result: it is hung")
    assert "farm cluster down" in (lost.value.fix or "")
    assert lost.value.elsewhere == "farm cluster down stops that daemon"


def test_a_daemon_stopped_before_it_read_the_job_does_not_block_the_build(short_dir: Path, tmp_path: Path) -> None:
    """The job (sources larger than the socket's buffer) goes to a daemon that never reads it: the send blocks on a
    thread of its own, the build sees the silence, and hanging up wakes that send."""
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "2.sock"
    stop = threading.Event()
    daemon = stand_in_daemon(sock, lambda conn: stop.wait(60))
    big = {"rmsnorm.py": os.urandom(4 << 20)}
    with _relay(root, sock, "op/t/a", sources=big) as pool, pytest.raises(DaemonLost, match="it is hung"):
        list(pool.completed_batches())
    sender = [t for t in threading.enumerate() if t.name == "farm-relay-send"]
    for thread in sender:
        thread.join(5)
    assert not any(t.is_alive() for t in sender)
    stop.set()
    daemon.join(5)


class _PrivateStandIn:
    """What `Relayed` starts for the rows left (a RayExecutor, a private cluster): records what it was given."""

    made: list[_PrivateStandIn] = []

    def __init__(self, executor_cfg: dict, timeout_s: float, rows: int | None = None) -> None:
        self.sources: dict[str, bytes] = {}
        self.requests: list[CompileRequest] = []
        self.exited = False
        self.rows = rows
        _PrivateStandIn.made.append(self)

    def __enter__(self) -> _PrivateStandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.exited = True

    def share_sources(self, sources: dict[str, bytes]) -> None:
        self.sources = sources

    def submit(self, request: CompileRequest) -> None:
        self.requests.append(request)

    def completed_batches(self, gather_s: float) -> Iterator[list[CompileResult]]:
        yield [CompileResult(r.key, ok=True, worker="private") for r in self.requests]

    def taken_unix(self, key: str) -> float | None:
        return 7.0

    def returned_unix(self, key: str) -> float | None:
        return None


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize("ending", ["hung", "gone"])
def test_rows_left_by_a_lost_daemon_go_to_a_private_cluster(short_dir: Path, tmp_path: Path, ending: str,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """The daemon answers one row, then falls silent (or goes away): the build keeps that row's result, says so in
    one line naming the daemon, and the two rows left, only they, compile on a private cluster."""
    root = keyed_project(tmp_path / "project")
    sock = short_dir / f"3{ending}.sock"
    stop = threading.Event()

    def one_then_lost(conn: Connection) -> None:
        conn.recv()
        conn.send(RelayBatch([CompileResult("op/t/a", ok=True, worker="daemon")], {"op/t/a": 1.0}))
        if ending == "hung":
            stop.wait(60)

    monkeypatch.setattr(executor, "RayExecutor", _PrivateStandIn)
    _PrivateStandIn.made.clear()
    daemon = stand_in_daemon(sock, one_then_lost)
    caplog.set_level(logging.WARNING)
    with choice.Relayed(_relay(root, sock, "op/t/a", "op/t/b", "op/t/c"), {}, 60.0) as pool:
        results = [r for batch in pool.completed_batches() for r in batch]
        assert pool.taken_unix("op/t/a") == 1.0 and pool.taken_unix("op/t/b") == 7.0
    stop.set()
    daemon.join(5)
    assert [(r.key, r.worker) for r in results] == [("op/t/a", "daemon"), ("op/t/b", "private"),
                                                     ("op/t/c", "private")]
    [private] = _PrivateStandIn.made
    assert [r.key for r in private.requests] == ["op/t/b", "op/t/c"] and private.sources == {"rmsnorm.py": b"source"}
    assert private.rows == 2  # no more compile actors than the rows left
    assert private.exited
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("the standing cluster's daemon (pid 4242) ")
    assert line.endswith("; this build compiles them on a private cluster (the 1 rows it has are kept; "
                         + ("farm cluster down stops that daemon)" if ending == "hung"
                            else "farm cluster status says whether a standing cluster is up)"))


def test_a_daemon_s_own_error_still_ends_the_build(short_dir: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a lost daemon moves the rows: an error the daemon reports (RelayEnd) is the build's error, as before."""
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "4.sock"

    def refuse(conn: Connection) -> None:
        conn.recv()
        conn.send(RelayEnd("none of 1 compile actors started within 30 s", "check the cluster"))

    monkeypatch.setattr(executor, "RayExecutor", _PrivateStandIn)
    _PrivateStandIn.made.clear()
    daemon = stand_in_daemon(sock, refuse)
    with choice.Relayed(_relay(root, sock, "op/t/a"), {}, 60.0) as pool, pytest.raises(FarmError) as raised:
        list(pool.completed_batches())
    daemon.join(5)
    assert not isinstance(raised.value, DaemonLost) and raised.value.fix == "check the cluster"
    assert _PrivateStandIn.made == []


def test_the_heartbeat_timeout_is_validated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(settings.HEARTBEAT_ENV, raising=False)
    assert settings.heartbeat_timeout_s() == settings.HEARTBEAT_TIMEOUT_S == 30.0
    monkeypatch.setenv(settings.HEARTBEAT_ENV, " 12.5 ")
    assert settings.heartbeat_timeout_s() == 12.5
    for bad in ("abc", "nan", "4", "3601", "-30"):
        monkeypatch.setenv(settings.HEARTBEAT_ENV, bad)
        with pytest.raises(FarmError, match=r"FARM_HEARTBEAT_TIMEOUT_S=.* is not a number of seconds from 5 to 3600"):
            settings.heartbeat_timeout_s()
    # A build names it before anything starts (here: CI=true, no standing cluster), and writes nothing.
    project = small_expanded_copy(tmp_path / "project")
    build = run_farm(project, "build", "targets=[gfx942]", env={settings.HEARTBEAT_ENV: "2"})
    assert build.returncode == 2, build.stderr
    assert "FARM_HEARTBEAT_TIMEOUT_S='2' is not a number of seconds from 5 to 3600" in build.stderr
    assert "Traceback" not in build.stderr and not (project / "outputs" / "rmsnorm").exists()
