"""The standing local cluster (`farm cluster up|down|status`): builds use its warm compilers, the
bytes are the same as a private cluster's, and it goes away completely when stopped."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from conftest import (
    AUTO_START_ON,
    STARTED,
    latest_report,
    run_farm,
    small_copy,
    small_expanded_copy,
    still_running,
    worker_pid,
    write_lld19_toolchain,
)

from farm.elf.code_object import read_code_object
from farm.execute import standing_files
from farm.execute.processes import Identity, identities, verified

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

TARGET = "gfx942"


def test_standing_cluster_serves_builds_warm_and_stops(built: Path, tmp_path: Path) -> None:
    """Warm by default: the first build that compiles starts the standing cluster (one line says so and how to
    stop it), later builds use its warm compiler, and `farm cluster down` ends it and every process it started."""
    project = small_expanded_copy(tmp_path / "project")
    everything: list[Identity] = []
    try:
        # Two builds at once, auto-start on: one daemon, started by one of them and used by both.
        cmd = [sys.executable, "-m", "farm.cli", "build", f"targets=[{TARGET}]", "executor.num_cpus=1"]
        env = dict(os.environ, **AUTO_START_ON)
        env.pop("FARM_PROJECT", None)
        procs = [subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(2)]
        outs = [p.communicate(timeout=900) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        said = [line for _, err in outs for line in err.splitlines() if STARTED in line]
        assert len(said) == 1, outs
        assert "stops itself after 30 idle minutes" in said[0] and "`farm cluster down` stops it now" in said[0]
        # The builds take the output tree's lock in turn: the one that compiles does it on the daemon.
        [first] = [err for _, err in outs if "using the standing cluster at 127.0.0.1:" in err]
        assert "rows go through the daemon's build socket: no Ray in this process" in first
        state = json.loads((project / ".farm" / "cluster" / "state.json").read_text())
        daemon = psutil.Process(int(state["pid"]))
        # Detached: its own session (it outlived both builds), a private state directory, a 0600 token.
        assert os.getsid(daemon.pid) == daemon.pid != os.getsid(0)
        where = project / ".farm" / "cluster"
        assert stat.S_IMODE(where.stat().st_mode) == 0o700
        assert stat.S_IMODE((where / "auth_token").stat().st_mode) == 0o600
        assert "standing cluster up at" in run_farm(project, "cluster", "status", check=True).stdout
        rows = latest_report(project)["rows"]  # the build that compiled (the other found every row up to date)
        assert len(rows) == 6 and all(r["ok"] and r["written"] for r in rows)
        # One compiler, warmed when the cluster came up: no row paid the warm-up.
        workers = {r["worker"] for r in rows}
        assert len(workers) == 1 and all(r["warmup_seconds"] == 0 for r in rows)
        actor = worker_pid(workers.pop())
        assert actor in {p.pid for p in daemon.children(recursive=True)} or psutil.pid_exists(actor)
        # The same bytes as the private cluster's build of the same rows.
        ours, theirs = project / "outputs" / "rmsnorm" / TARGET, built / "outputs" / "rmsnorm" / TARGET
        objects = sorted(p.name for p in theirs.glob("*.hsaco"))
        assert objects == sorted(p.name for p in ours.glob("*.hsaco"))
        for name in objects:
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name

        # A second build is served by the same warm compiler (the zygote outlived the first build), its row
        # relayed through the daemon: the build's own process never imports Ray.
        (ours / objects[0]).unlink()
        # Auto-start is on for it too: with a daemon up, it starts nothing.
        second = run_farm(project, "build", f"targets=[{TARGET}]",
                          env={"PYTHONPROFILEIMPORTTIME": "1", **AUTO_START_ON}, check=True)
        assert "built 1, failed 0" in second.stderr and STARTED not in second.stderr
        assert "rows go through the daemon's build socket: no Ray in this process" in second.stderr
        imported = {line.rsplit("|", 1)[1].strip() for line in second.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "farm.execute.relay" in imported and "ray" not in imported
        # The Ray work moved to the daemon, and the report counts it (it is central work all the same).
        assert latest_report(project)["driver"]["daemon_cpu_seconds"] > 0
        [row] = latest_report(project)["rows"]
        assert worker_pid(row["worker"]) == actor and row["warmup_seconds"] == 0
        assert (ours / objects[0]).read_bytes() == (theirs / objects[0]).read_bytes()

        # Another checkout shares this cluster by naming it (executor.standing_root), and starts none of its own.
        other_checkout = small_expanded_copy(tmp_path / "other")
        shared = run_farm(other_checkout, "build", f"targets=[{TARGET}]", f"names=[{objects[0][:-len('.hsaco')]}]",
                          f"executor.standing_root={project}", check=True)
        assert "rows go through the daemon's build socket" in shared.stderr
        [row] = latest_report(other_checkout)["rows"]
        assert worker_pid(row["worker"]) == actor and not (other_checkout / ".farm" / "cluster").exists()
        assert (other_checkout / "outputs" / "rmsnorm" / TARGET / objects[0]).read_bytes() == (
            theirs / objects[0]).read_bytes()

        # A relayed build whose toolchain is not the pinned one: its rows go to the daemon while the toolchain
        # check runs beside them (farm/toolchain/beside.py), and the check still fails the build, nothing written.
        pin = project / "conf" / "toolchain" / "pinned.yaml"
        pinned = pin.read_text()
        pin.write_text(pinned.replace("version: LLD 22.1.8", "version: LLD 19.1.7"))
        before = {p.name: p.read_bytes() for p in ours.iterdir()}
        wrong = run_farm(project, "build", f"targets=[{TARGET}]")
        assert wrong.returncode == 2, wrong.stderr
        assert "rows go through the daemon's build socket" in wrong.stderr
        assert "linker.version: pinned 'LLD 19.1.7', found 'LLD 22.1.8'" in wrong.stderr
        assert {p.name: p.read_bytes() for p in ours.iterdir()} == before
        pin.write_text(pinned)

        # A build pinning another real linker gets objects that linker linked, though the compilers warmed up
        # with the daemon's: a warm server started for one linker never links for another.
        write_lld19_toolchain(project, "lld19")
        other = run_farm(project, "build", f"targets=[{TARGET}]", "toolchain=lld19", f"outputs_dir={tmp_path / 'o19'}",
                         check=True)
        assert "rows go through the daemon's build socket" in other.stderr
        linked = {p.name: read_code_object(p.read_bytes()).comment
                  for p in (tmp_path / "o19" / "rmsnorm" / TARGET).glob("*.hsaco")}
        assert len(linked) == 6 and set(linked.values()) == {"Linker: Debian LLD 19.1.7"}, linked
        # and the next build of the daemon's own pin is linked by its own linker again.
        (ours / objects[0]).unlink()
        run_farm(project, "build", f"targets=[{TARGET}]", check=True)
        assert (ours / objects[0]).read_bytes() == (theirs / objects[0]).read_bytes()

        # A cluster running other farm code is not used: its bytes would be refused.
        state_path = project / ".farm" / "cluster" / "state.json"
        state_path.write_text(json.dumps(dict(state, generator="0" * 64)))
        (ours / objects[1]).unlink()
        third = run_farm(project, "build", f"targets=[{TARGET}]", check=True)
        assert "runs older farm code; this build starts a private cluster" in third.stderr
        [row] = latest_report(project)["rows"]
        assert worker_pid(row["worker"]) != actor
        state_path.write_text(json.dumps(state))
        # executor.standing=false always builds on a private cluster.
        (ours / objects[2]).unlink()
        fourth = run_farm(project, "build", f"targets=[{TARGET}]", "executor.standing=false", check=True)
        assert "using the standing cluster" not in fourth.stderr
        assert latest_report(project)["driver"]["daemon_cpu_seconds"] is None  # no daemon in between
        assert worker_pid(latest_report(project)["rows"][0]["worker"]) != actor
        tree = [daemon, *daemon.children(recursive=True)]
        everything = identities(tree if actor in {p.pid for p in tree} else [*tree, psutil.Process(actor)])
    finally:
        down = run_farm(project, "cluster", "down")
    assert down.stdout.strip() == "standing cluster stopped", down.stdout + down.stderr
    assert still_running(everything) == []  # every process it started, by pid
    assert not (project / ".farm" / "cluster" / "state.json").exists() and not standing_files.starting(project)
    assert not Path(state["relay"]).exists()  # its build socket went with it
    assert run_farm(project, "cluster", "status", check=True).stdout.strip() == "no standing cluster is up"


def test_cluster_verb_names_its_actions(tmp_path: Path) -> None:
    project = small_copy(tmp_path / "project")
    proc = run_farm(project, "cluster", "upp")
    assert proc.returncode == 2
    assert "farm cluster needs one of up, down, status; got upp" in proc.stderr
    assert run_farm(project, "cluster", "down", check=True).stdout.strip() == "no standing cluster was up"


def test_a_recorded_process_is_still_recognised_after_the_clock_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil's create_time() is boot time (/proc/stat's btime) plus the start tick; btime moves by a second
    when NTP slews the clock, and a daemon recorded before that read as 'gone' (its state was removed while it
    ran). Identities are boot-relative now: a moved btime changes nothing."""
    from farm.execute import processes

    me = processes.identity(psutil.Process())
    # psutil's Linux layer reads btime here (private, which is why only this test touches it).
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: 1e9)
    assert verified(me) is not None
    assert processes.recorded_by(psutil.Process()) == []  # no record of this process: read, never guessed
