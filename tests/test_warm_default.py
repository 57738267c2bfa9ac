"""Warm by default, when it does not apply: a build that compiles nothing starts nothing, CI=true or
executor.auto_start=false turn it off, a daemon that cannot start leaves a private build, a daemon of older farm
code is replaced only when no build uses it. (A build starting the daemon, later builds reusing it and `farm cluster
down` ending everything: tests/test_standing.py.) conftest.py sets CI=true for the session: these tests clear it
for their own builds and stop every daemon they start."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import psutil
import pytest
from conftest import (
    AUTO_START_ON,
    STARTED,
    built_copy,
    latest_report,
    run_farm,
    still_running,
    stop_cluster,
    worker_pid,
)

from farm.execute import standing_files
from farm.execute.processes import Identity, identities

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

TARGET = "gfx942"


def test_a_build_that_compiles_nothing_starts_nothing(built: Path, tmp_path: Path) -> None:
    """Warm by default is for compiling: a build whose rows are all up to date needs no compiler, so it
    leaves no daemon running and no trace of one (the restore case: tests/test_remote_cache.py; a build with
    rows to compile starts one: the first test here)."""
    project = built_copy(built, tmp_path / "project")
    try:
        proc = run_farm(project, "build", f"targets=[{TARGET}]", env=AUTO_START_ON, check=True)
        assert "built 0, failed 0" in proc.stderr and STARTED not in proc.stderr, proc.stderr
        assert not standing_files.starting(project) and standing_files.running(project) is None
        assert not (project / ".farm" / "cluster").exists()
    finally:
        stop_cluster(project)


@pytest.mark.parametrize("off", [{"env": {"CI": "true"}, "words": []},
                                 {"env": AUTO_START_ON, "words": ["executor.auto_start=false"]}],
                         ids=["CI=true", "auto_start=false"])
def test_auto_start_off_starts_nothing(built: Path, tmp_path: Path, off: dict) -> None:
    project = built_copy(built, tmp_path / "project")
    victim = next((project / "outputs" / "rmsnorm" / TARGET).glob("*.hsaco"))
    victim.unlink()
    try:
        proc = run_farm(project, "build", f"targets=[{TARGET}]", "executor.num_cpus=1", *off["words"],
                        env=off["env"], check=True)
        assert STARTED not in proc.stderr and "using the standing cluster" not in proc.stderr
        # Compiled on a private cluster (other rows may re-verify: the farm's code can change mid-session).
        assert "failed 0" in proc.stderr and victim.is_file()
        assert not standing_files.starting(project) and standing_files.running(project) is None
        assert not (project / ".farm" / "cluster" / "daemon.log").exists()
    finally:
        stop_cluster(project)


def test_a_daemon_that_cannot_start_leaves_a_private_build(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "project")
    (project / ".farm").mkdir(exist_ok=True)
    (project / ".farm" / "cluster").write_text("not a directory")  # where the daemon's files would go
    victim = next((project / "outputs" / "rmsnorm" / TARGET).glob("*.hsaco"))
    victim.unlink()
    try:
        proc = run_farm(project, "build", f"targets=[{TARGET}]", "executor.num_cpus=1", env=AUTO_START_ON)
        assert proc.returncode == 0, proc.stderr
        said = [line for line in proc.stderr.splitlines() if "standing cluster" in line]
        assert len(said) == 1 and "could not start a standing cluster" in said[0], proc.stderr
        assert "failed 0" in proc.stderr and victim.is_file()
    finally:
        (project / ".farm" / "cluster").unlink()


def made_stale(project: Path) -> tuple[dict, list[Identity]]:
    """The running standing cluster's state made to say it runs older farm code, as if the farm was edited since
    it started (its compiles' bytes would be refused). Returns the state as it was and the daemon's processes."""
    path = project / ".farm" / "cluster" / "state.json"
    state = json.loads(path.read_text())
    old = psutil.Process(int(state["pid"]))
    old_tree = identities([old, *old.children(recursive=True)])
    path.write_text(json.dumps(dict(state, generator="0" * 64)))
    return state, old_tree


def test_a_daemon_of_older_farm_code_is_replaced_only_when_no_build_uses_it(built: Path, tmp_path: Path) -> None:
    """By a build, when no other build uses it (then by `farm cluster up`, which replaces it at once)."""
    project = built_copy(built, tmp_path / "project")
    where = project / ".farm" / "cluster"
    ours, theirs = project / "outputs" / "rmsnorm" / TARGET, built / "outputs" / "rmsnorm" / TARGET
    victims = sorted(ours.glob("*.hsaco"))[:2]
    try:
        run_farm(project, "cluster", "up", "executor.num_cpus=1", check=True)  # one compiler
        state, old_tree = made_stale(project)

        # Another build is using it (holds the in-use lock): it is left alone, this build is private.
        victims[0].unlink()
        with open(where / "in-use.lock", "a") as user:
            fcntl.flock(user, fcntl.LOCK_SH)
            busy = run_farm(project, "build", f"targets=[{TARGET}]", "executor.num_cpus=1", env=AUTO_START_ON,
                            check=True)
        said = [line for line in busy.stderr.splitlines() if "standing cluster" in line]
        assert len(said) == 1, busy.stderr
        assert "(started by farm cluster up) runs older farm code and another build is using it" in said[0]
        assert "private cluster" in said[0]
        assert "failed 0" in busy.stderr and victims[0].is_file()
        assert still_running(old_tree, timeout_s=0) == old_tree  # every process of it still runs
        [row] = [r for r in latest_report(project)["rows"] if r["key"].endswith("/" + victims[0].stem)]
        assert worker_pid(row["worker"]) not in {i["pid"] for i in old_tree}

        # Idle now: the next build replaces it (one line), then compiles on the new daemon.
        victims[1].unlink()
        idle = run_farm(project, "build", f"targets=[{TARGET}]", "executor.num_cpus=1", env=AUTO_START_ON, check=True)
        said = [line for line in idle.stderr.splitlines() if "standing cluster" in line and "using" not in line]
        assert len(said) == 1, idle.stderr
        assert "replaced a standing cluster (started by farm cluster up) that ran older farm code" in said[0]
        assert "`farm cluster down` stops it now" in said[0]
        assert "using the standing cluster at 127.0.0.1:" in idle.stderr and "failed 0" in idle.stderr
        assert still_running(old_tree) == []  # every process of the old daemon, by pid
        new = json.loads((where / "state.json").read_text())
        assert new["pid"] != state["pid"] and new["generator"] != "0" * 64  # the farm code of now
        assert new["started_by"] == "a build"
        for victim in victims:  # the same bytes as the private cluster's build
            assert victim.read_bytes() == (theirs / victim.name).read_bytes(), victim.name

        # `farm cluster up` replaces a daemon of older farm code too (this one, made stale the same way).
        _, stale = made_stale(project)
        again = run_farm(project, "cluster", "up", "executor.num_cpus=1", check=True)
        assert "stopped the standing cluster that ran older farm code" in again.stderr
        assert "standing cluster up at 127.0.0.1:" in again.stdout and "1 warm compilers" in again.stdout
        newest = json.loads((where / "state.json").read_text())
        assert newest["pid"] != new["pid"] and newest["generator"] != "0" * 64  # the farm code of now
        assert still_running(stale) == []  # every process of the old daemon, by pid
        daemon = psutil.Process(int(newest["pid"]))
        everything = identities([daemon, *daemon.children(recursive=True)])
    finally:
        stop_cluster(project)
    assert still_running(everything) == []
    assert not standing_files.starting(project)

