"""Two commands at once: one lock per output tree, no lost manifest entry, no deleted in-flight file,
unique report names, and a push that publishes exactly the tree it checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL_ROWS_PER_TARGET, built_copy, on_shared_cluster, run_farm, small_expanded_copy

from farm.store.lock import tree_lock

pytestmark = pytest.mark.slow


def _farm(project: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("FARM_PROJECT", None)
    return subprocess.Popen([sys.executable, "-m", "farm.cli", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _entries(project: Path, target: str) -> list[str]:
    data = json.loads((project / "outputs" / "rmsnorm" / target / "manifest.json").read_text())
    return sorted(e["file"] for e in data["objects"])


def test_two_builds_at_once_on_overlapping_selections_lose_no_entry(tmp_path: Path) -> None:
    """Two real `farm build` processes, started together, overlapping on gfx942: every entry and object of
    all three targets is there after both, and the tree checks clean."""
    project = small_expanded_copy(tmp_path / "p")
    # Both on the session's standing cluster (warm compilers): what is tested is the output tree's lock.
    first = _farm(project, *on_shared_cluster(project, ("build", "targets=[gfx90a,gfx942]"), None))
    second = _farm(project, *on_shared_cluster(project, ("build", "targets=[gfx942,gfx950]"), None))
    out1, err1 = first.communicate(timeout=900)
    out2, err2 = second.communicate(timeout=900)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    # One of them waited for the other, and said for whom.
    assert "waiting for" in err1 + err2 and "locked by pid" in err1 + err2
    for target in ("gfx90a", "gfx942", "gfx950"):
        files = _entries(project, target)
        assert len(files) == SMALL_ROWS_PER_TARGET, (target, files)
        on_disk = sorted(p.name for p in (project / "outputs" / "rmsnorm" / target).glob("*.hsaco"))
        assert on_disk == files
        assert not list((project / "outputs" / "rmsnorm" / target).glob(".*.tmp"))
    check = run_farm(project, "check", "targets=[gfx90a,gfx942,gfx950]")
    assert check.returncode == 0, check.stdout
    reports = sorted((project / ".farm" / "reports").glob("build-*[0-9].json"))
    assert len(reports) == 2  # report names never collide


def test_second_writer_refuses_at_once_with_lock_wait_zero(built: Path) -> None:
    with tree_lock(built / "outputs", "test: holding the lock"):
        proc = run_farm(built, "build", "targets=[gfx942]", "lock_wait_s=0")
    assert proc.returncode == 2
    assert f"is locked by pid {os.getpid()} (test: holding the lock)" in proc.stderr, proc.stderr
    assert "fix:" in proc.stderr


def test_check_waits_for_a_writer_and_names_it(built: Path) -> None:
    """`farm check` is safe beside a build: it never reads a half-written batch, it waits for the writer."""
    with tree_lock(built / "outputs", "test: a build"):
        check = _farm(built, "check")
        time.sleep(6)
        assert check.poll() is None  # still waiting: the writer holds the tree
    out, err = check.communicate(timeout=600)
    assert check.returncode == 0, out
    assert f"locked by pid {os.getpid()} (test: a build)" in err
    assert "no drift" in out


def test_temp_files_of_a_dead_writer_are_removed_and_a_live_ones_kept(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    where = project / "outputs" / "rmsnorm" / "gfx942"
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = where / f".rmsnorm_bf16_train_n2560.hsaco.{os.getpid()}.0123456789abcdef.tmp"
    theirs = where / f".rmsnorm_bf16_train_n2560.hsaco.{dead.pid}.0123456789abcdef.tmp"
    mine.write_bytes(b"in flight")
    theirs.write_bytes(b"left by a killed build")
    (where / "rmsnorm_bf16_train_n2560.hsaco").unlink()  # something to build, so the directory is written
    assert run_farm(project, "build", "targets=[gfx942]").returncode == 0
    assert mine.read_bytes() == b"in flight"  # its writer (this test) is alive
    assert not theirs.exists()


def test_push_refuses_when_the_tree_changes_between_check_and_publish(built: Path, tmp_path: Path) -> None:
    """A writer that ignores the lock changes outputs/ after the check: push publishes nothing and leaves
    outputs.dvc as it was."""
    project = built_copy(built, tmp_path / "p")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import farm.publish.pushing as p\n"
        "checked = p.drift\n"
        "def drift_then_write(*args):\n"
        "    result = checked(*args)\n"
        "    Path('outputs/rmsnorm/gfx942/late.hsaco').write_bytes(b'late')\n"
        "    return result\n"
        "p.drift = drift_then_write\n"
        "from farm.cli import main\n"
        "sys.exit(main(['push', '--partial']))\n")  # the small build is part of a table of many
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "refusing to publish" in said and "late.hsaco" in said
    assert not (project / "outputs.dvc").exists()
    remote = project / ".farm" / "dvc-remote"
    assert not remote.exists() or not any(remote.rglob("*.dir"))
