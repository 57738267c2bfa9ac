"""The build relay's socket (farm/execute/relay.py, farm/execute/relay_server.py), without a cluster: keyed
both ways, its path in the state file checked before use, results streamed back in batches, and a daemon
that does not answer or goes away mid-build named (tests/test_standing.py relays real builds)."""

from __future__ import annotations

import logging
import os
import socket
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from pathlib import Path

import pytest
from relay_stand_ins import KEY, keyed_project, relay_state, request, stand_in_daemon

from farm.contract import CompileResult
from farm.core.errors import FarmError
from farm.execute import relay_server
from farm.execute.relay import RelayBatch, RelayEnd, RelayExecutor, RelayJob, connect, socket_of
from farm.execute.relay_server import RelayServer


def _listening(path: Path) -> socket.socket:
    """A bound, listening socket that never accepts (a daemon that stopped answering)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(4)
    return sock


def test_only_a_socket_of_this_users_in_a_private_directory_is_used(short_dir: Path, tmp_path: Path) -> None:
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "1.sock"
    listening = _listening(sock)
    try:
        assert socket_of(relay_state(root, sock)) == sock
        (short_dir / "file").write_text("not a socket")
        os.symlink(sock, short_dir / "link.sock")
        for named in (None, "relative.sock", str(short_dir / "missing.sock"), str(short_dir / "file"),
                      str(short_dir / "link.sock"), "/" + "x" * 120):
            assert socket_of(relay_state(root, named)) is None, named
        assert socket_of({"root": str(root), "relay": 42}) is None  # type: ignore[typeddict-item]
        os.chmod(short_dir, 0o755)  # others may reach into the directory: not private
        assert socket_of(relay_state(root, sock)) is None
    finally:
        os.chmod(short_dir, 0o700)
        listening.close()


def test_the_daemons_socket_refuses_a_wrong_key_and_goes_on(short_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    sock = short_dir / f"{os.getpid()}.sock"
    monkeypatch.setattr(relay_server, "socket_path", lambda: sock)
    caplog.set_level(logging.WARNING)
    server = RelayServer([], KEY, 1.0)
    try:
        assert sock.is_socket() and oct(sock.stat().st_mode & 0o777) == "0o600"
        with pytest.raises(AuthenticationError):
            Client(str(sock), family="AF_UNIX", authkey=b"wrong key")
        # The right key still gets in; what it sends is data: anything but a RelayJob is refused with a reason.
        with Client(str(sock), family="AF_UNIX", authkey=KEY) as conn:
            conn.send({"rm": "-rf /"})
            end = conn.recv()
        assert isinstance(end, RelayEnd) and end.error is not None and "not a RelayJob" in end.error
    finally:
        server.close()
    assert not sock.exists()
    assert "refused a connection to the build socket" in caplog.text


def test_a_daemon_that_does_not_answer_leaves_the_build_to_ray(short_dir: Path, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "2.sock"
    listening = _listening(sock)
    try:
        with caplog.at_level(logging.WARNING):
            assert connect(relay_state(root, sock), timeout_s=0.5) is None
        assert f"build socket {sock} does not answer" in caplog.text
        assert "joins its Ray cluster directly" in caplog.text
    finally:
        listening.close()


def test_a_daemon_running_other_relay_code_is_not_relayed_to(short_dir: Path, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "5.sock"
    daemon = stand_in_daemon(sock, lambda conn: None)
    caplog.set_level(logging.INFO)
    assert connect(relay_state(root, sock, code="0" * 64)) is None
    assert "runs other relay code than this build" in caplog.text
    assert connect(relay_state(root, sock)) is not None  # the same daemon, recorded with this build's code
    daemon.join(5)


def test_results_stream_back_in_batches(short_dir: Path, tmp_path: Path) -> None:
    root = keyed_project(tmp_path / "project")
    sock = short_dir / "3.sock"
    got: dict[str, RelayJob] = {}

    def behave(conn: Connection) -> None:
        got["job"] = conn.recv()
        conn.send(RelayBatch([CompileResult("op/t/a", ok=True)], {"op/t/a": 12.5}))
        conn.send(RelayBatch([CompileResult("op/t/b", ok=False, error="boom")]))
        conn.send(RelayEnd())

    daemon = stand_in_daemon(sock, behave)
    conn = connect(relay_state(root, sock))
    assert conn is not None
    with RelayExecutor(conn, {"warm": False, "max_retries": 3}, 60.0) as pool:
        pool.share_sources({"rmsnorm.py": b"source"})
        pool.submit(request("op/t/a"))
        pool.submit(request("op/t/b"))
        batches = [[r.key for r in batch] for batch in pool.completed_batches(gather_s=0.25)]
        assert batches == [["op/t/a"], ["op/t/b"]]
        assert pool.taken_unix("op/t/a") == 12.5 and pool.taken_unix("op/t/b") is None
    daemon.join(5)
    job = got["job"]
    assert [r.key for r in job.requests] == ["op/t/a", "op/t/b"]
    assert (job.sources, job.timeout_s, job.warm, job.max_retries, job.gather_s) == (
        {"rmsnorm.py": b"source"}, 60.0, False, 3, 0.25)


@pytest.mark.parametrize("ending", ["gone", "error"])
def test_a_daemon_that_fails_mid_build_is_named(short_dir: Path, tmp_path: Path, ending: str) -> None:
    root = keyed_project(tmp_path / "project")
    sock = short_dir / f"4{ending}.sock"

    def behave(conn: Connection) -> None:
        conn.recv()
        conn.send(RelayBatch([CompileResult("op/t/a", ok=True)]))
        if ending == "error":
            conn.send(RelayEnd("none of 2 compile actors started within 30 s", "check the cluster"))
        # "gone": the connection closes with a row still open (the daemon was stopped)

    daemon = stand_in_daemon(sock, behave)
    conn = connect(relay_state(root, sock))
    assert conn is not None
    with RelayExecutor(conn, {}, 60.0) as pool:
        pool.submit(request("op/t/a"))
        pool.submit(request("op/t/b"))
        batches = pool.completed_batches()
        assert [r.key for r in next(batches)] == ["op/t/a"]
        with pytest.raises(FarmError) as raised:
            next(batches)
    daemon.join(5)
    if ending == "gone":
        assert "daemon went away during the build (1 rows without a result" in str(raised.value)
        assert "run the build again (what was written is kept)" in str(raised.value)
    else:
        assert raised.value.what == "none of 2 compile actors started within 30 s"
        assert raised.value.fix == "check the cluster"
