"""A standing cluster's daemon that is hung, or whose state file is damaged, is never waited for and never
orphaned (issue 37 cases 5 and 6). One `farm cluster up` serves the module (plus one replacement a build
starts); every daemon is stopped at the end.

- Hung: `kill -STOP` on the daemon during a relayed build. The build hears no heartbeat for
  FARM_HEARTBEAT_TIMEOUT_S, says so in one line naming the daemon's pid and `farm cluster down`, keeps the rows
  it has, and compiles the rest on a private cluster (before: no row for 4 x compile_timeout_s + 180 s).
- Damaged state file: the daemon is found by the lock it holds and its command line; status names it, a build
  does not wait for it, a build with auto-start replaces it, `farm cluster down` stops it and everything it
  started (before: "no standing cluster is up" while it ran, and every build waited 60 s)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import AUTO_START_ON, copy_project, latest_report, run_farm, still_running, stop_cluster, worker_pid

from farm.execute import processes as procs
from farm.execute import standing
from farm.execute.settings import HEARTBEAT_ENV

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

TARGET = "gfx942"
SELECT = ("ops=[rmsnorm]", f"targets=[{TARGET}]", "dtypes=[bf16]")  # 22 rows
ONE_ROW = (*SELECT, "names=[rmsnorm_bf16_infer_generic]")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    project = copy_project(tmp_path_factory.mktemp("lost"))
    run_farm(project, "expand", check=True)
    yield project
    stop_cluster(project)


def _up(project: Path) -> dict:
    """The standing cluster (one compiler): the one up, or a new one."""
    state = standing.running(project)
    if state is None or not state.get("warm"):
        run_farm(project, "cluster", "up", "executor.num_cpus=1", check=True)
        state = standing.running(project)
    assert state is not None
    return state


def _state_path(project: Path) -> Path:
    return project / ".farm" / "cluster" / "state.json"


def _compiler_tree(daemon: psutil.Process) -> list[psutil.Process]:
    """The daemon's compiler: its Ray worker and the compiles it forks."""
    tree: list[psutil.Process] = []
    for worker in daemon.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a compile that just ended
            command = worker.cmdline()  # empty for a process that is ending
            if command and command[0].startswith("ray::Compiler"):
                tree += [worker, *worker.children(recursive=True)]
    return tree


def _relayed_build(project: Path, out: Path) -> tuple[subprocess.Popen, list[str]]:
    """A relayed build of 22 rows (heartbeat timeout 6 s), returned once it says it has a row (progress lines
    every 0.05 s, each result taken as it comes), with what it said so far."""
    env = dict(os.environ, **{HEARTBEAT_ENV: "6", "FARM_BATCH_GATHER_S": "0", "FARM_PROGRESS_INTERVAL_S": "0.05"})
    env.pop("FARM_PROJECT", None)
    build = subprocess.Popen([sys.executable, "-m", "farm.cli", "build", *SELECT, f"outputs_dir={out}"], cwd=project,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert build.stderr is not None
    said: list[str] = []
    for line in build.stderr:
        said.append(line)
        if re.match(r"progress: [1-9]\d*/22 rows", line):
            break
    return build, said


def _suspend(procs_: list[psutil.Process]) -> None:
    for proc in procs_:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.suspend()


def _resume(procs_: list[psutil.Process]) -> None:
    for proc in reversed(procs_):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.resume()


def test_a_compile_longer_than_the_heartbeat_timeout_is_not_a_hung_daemon(project: Path, tmp_path: Path) -> None:
    """The daemon's compiler, not the daemon, stopped for three heartbeat timeouts (a compile that takes that
    long): the daemon's heartbeat comes all the while, and the build waits for its rows on the daemon."""
    daemon = psutil.Process(_up(project)["pid"])
    actors = {p.pid for p in daemon.children(recursive=True)}
    build, said = _relayed_build(project, tmp_path / "out")
    slow = _compiler_tree(daemon)
    try:
        _suspend(slow)
        time.sleep(18)
        assert build.poll() is None  # still waiting for its rows
    finally:
        _resume(slow)
    said.append(build.communicate(timeout=900)[1])
    err = "".join(said)
    assert build.returncode == 0, err
    assert "daemon (pid" not in err and "private cluster" not in err and "built 22, failed 0" in err, err
    assert all(worker_pid(r["worker"]) in actors for r in latest_report(project)["rows"])  # every row on the daemon


def test_a_hung_daemon_is_named_within_seconds_and_its_rows_left_build_privately(project: Path,
                                                                                 tmp_path: Path) -> None:
    state = _up(project)
    daemon = psutil.Process(state["pid"])
    actors = {p.pid for p in daemon.children(recursive=True)}  # its compilers among them
    out = tmp_path / "out"
    build, err = _relayed_build(project, out)
    frozen: list[psutil.Process] = []
    try:
        # Its compiler first, so no more row finishes, then the daemon itself: kill -STOP.
        frozen = [*_compiler_tree(daemon), daemon]
        _suspend(frozen)
        err.append(build.communicate(timeout=900)[1])  # the old code waited 4 x 900 s + 180 s here
    finally:
        _resume(frozen)
        if build.poll() is None:
            build.kill()
    said_all = "".join(err)
    assert build.returncode == 0, said_all
    assert "rows go through the daemon's build socket" in said_all
    said = [line for line in said_all.splitlines() if "daemon (pid" in line]
    assert len(said) == 1, said_all
    found = re.fullmatch(rf"the standing cluster's daemon \(pid {daemon.pid}\) sent nothing for 6 s, not even its "
                         r"heartbeat, with (\d+) rows without a result: it is hung; this build compiles them on a "
                         r"private cluster \(the (\d+) rows it has are kept; farm cluster down stops that daemon\)",
                         said[0])
    assert found, said[0]
    left, had = int(found[1]), int(found[2])
    assert left + had == 22 and had >= 1 and left >= 1
    assert "built 22, failed 0" in said_all and len(list((out / "rmsnorm" / TARGET).glob("*.hsaco"))) == 22
    rows = latest_report(project)["rows"]
    assert len(rows) == 22 and len({r["key"] for r in rows}) == 22 and all(r["ok"] and r["written"] for r in rows)
    # What the build had from the daemon was kept, not compiled again; the rest compiled on its private cluster.
    assert len([r for r in rows if worker_pid(r["worker"]) in actors]) == had
    # The daemon runs again after SIGCONT and serves the next build.
    assert standing.running(project) is not None and daemon.status() != psutil.STATUS_STOPPED


def test_a_damaged_state_file_never_orphans_the_daemon(project: Path, tmp_path: Path) -> None:
    state = _up(project)
    daemon = psutil.Process(state["pid"])
    path = _state_path(project)
    path.write_text("")  # truncated
    said = (f"the standing cluster's state file {path} is empty, but its daemon (pid {daemon.pid}, found by the "
            "daemon lock it holds) still runs")

    status = run_farm(project, "cluster", "status", check=True)
    assert status.stdout.strip() == f"{said}; `farm cluster down` stops it", status.stdout + status.stderr
    assert path.exists() and daemon.is_running() and "removed a stale" not in status.stderr

    # CI=true (no auto-start): a private cluster at once, said in one line, the daemon left alone.
    ci = run_farm(project, "build", *ONE_ROW, f"outputs_dir={tmp_path / 'ci'}", check=True)
    assert f"{said}; this build starts a private cluster (farm cluster down stops that daemon)" in ci.stderr
    assert "was not up after" not in ci.stderr and "built 1, failed 0" in ci.stderr
    assert daemon.is_running() and path.exists()

    # Auto-start on, while another build uses that daemon (holds the in-use lock): not replaced, a private cluster.
    with open(project / ".farm" / "cluster" / "in-use.lock", "a") as user:
        fcntl.flock(user, fcntl.LOCK_SH)
        busy = run_farm(project, "build", *ONE_ROW, f"outputs_dir={tmp_path / 'busy'}", "executor.num_cpus=1",
                        env=AUTO_START_ON, check=True)
    assert (f"{said}, and another build is using it; this build starts a private cluster (farm cluster down stops "
            "that daemon)") in busy.stderr
    assert "was not up after" not in busy.stderr and "built 1, failed 0" in busy.stderr and daemon.is_running()

    # Auto-start on, no build using it: replaced (it and every process it started end), the build uses the new one.
    idle = run_farm(project, "build", *ONE_ROW, f"outputs_dir={tmp_path / 'idle'}", "executor.num_cpus=1",
                    env=AUTO_START_ON, check=True)
    assert (f"replaced a standing cluster whose state file is empty (daemon pid {daemon.pid}): started a new one"
            in idle.stderr), idle.stderr
    assert "using the standing cluster at 127.0.0.1:" in idle.stderr and "built 1, failed 0" in idle.stderr
    assert still_running([state["daemon"], *state["processes"]]) == []
    new = standing.running(project)
    assert new is not None and new["pid"] != daemon.pid
    daemon = psutil.Process(new["pid"])
    tree = procs.identities([daemon, *daemon.children(recursive=True)])

    # Its state file removed: still not "none up".
    path.unlink()
    status = run_farm(project, "cluster", "status", check=True)
    assert status.stdout.strip() == (f"a standing cluster's daemon runs (pid {daemon.pid}) without a state file: it is "
                                     "still starting, or the file was removed; `farm cluster down` stops it")

    # Its state file naming another live process exactly (pid, start time, command line): `down` stops the daemon
    # found by its lock, and everything it started; the process the file names is never signalled.
    foreign = subprocess.Popen(["sleep", "300"])
    try:
        me = procs.identity(psutil.Process(foreign.pid))
        path.write_text(json.dumps({"pid": foreign.pid, "daemon": me, "processes": [me], "ray_core": [me]}))
        down = run_farm(project, "cluster", "down", check=True)
        assert down.stdout.strip() == (f"standing cluster stopped: daemon pid {daemon.pid}, found by its lock (its "
                                       f"state file names pid {foreign.pid}, which is not its daemon)"), down.stdout
        assert still_running(tree) == []
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()
    assert not path.exists()
    assert run_farm(project, "cluster", "status", check=True).stdout.strip() == "no standing cluster is up"
