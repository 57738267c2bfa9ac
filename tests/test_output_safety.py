"""Files read back from disk are data: a hostile manifest, a symlinked directory or a planted cache entry
never makes the farm touch a file it does not own. One test per case of the reliability review."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import SESSION_CLUSTERS, built_copy, last_line, latest_report, run_farm

from farm.toolchain.installed import installed

TARGET = "gfx942"
SEL = f"targets=[{TARGET}]"


def manifest_of(project: Path, target: str = TARGET) -> Path:
    return project / "outputs" / "rmsnorm" / target / "manifest.json"


def add_entries(project: Path, files: list[object], target: str = TARGET) -> None:
    """Append entries naming `files`, each a copy of a real entry (so only the name is hostile)."""
    path = manifest_of(project, target)
    data = json.loads(path.read_text())
    template = data["objects"][0]
    for file in files:
        data["objects"].append(dict(template, file=file))
    path.write_text(json.dumps(data))


@pytest.mark.slow
def test_manifest_entry_with_dotdot_or_absolute_path_deletes_nothing(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    neighbour = project / "outputs" / "rmsnorm" / "gfx950" / "rmsnorm_bf16_train_n2560.hsaco"
    victim = tmp_path / "victim.hsaco"
    victim.write_bytes(b"not the farm's")
    before = neighbour.read_bytes()
    add_entries(project, ["../gfx950/rmsnorm_bf16_train_n2560.hsaco", str(victim)])

    plan = run_farm(project, "plan", SEL)
    assert plan.returncode == 0, plan.stderr
    assert "up_to_date=0" in last_line(plan.stdout)  # never "up to date" beside a hostile manifest
    assert "manifest has an entry the farm would never write" in plan.stdout

    check = run_farm(project, "check", SEL)
    assert check.returncode == 1
    assert "../gfx950/rmsnorm_bf16_train_n2560.hsaco" in check.stdout and str(victim) in check.stdout

    build = run_farm(project, "build", SEL)
    assert build.returncode == 0, build.stderr
    assert neighbour.read_bytes() == before and victim.read_bytes() == b"not the farm's"
    # The rebuilt manifest holds only the farm's own entries, and everything checks clean again.
    files = [e["file"] for e in json.loads(manifest_of(project).read_text())["objects"]]
    assert all("/" not in f for f in files) and len(files) == 6
    assert run_farm(project, "check").returncode == 0


@pytest.mark.slow
def test_manifest_names_123_empty_and_dotdot_do_not_crash(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    add_entries(project, [123, "", "..", None])
    plan = run_farm(project, "plan", SEL)
    assert plan.returncode == 0 and "Traceback" not in plan.stderr, plan.stderr
    check = run_farm(project, "check", SEL)
    assert check.returncode == 1 and "Traceback" not in check.stderr, check.stderr
    for shown in ("objects[6]: file name 123", "objects[7]: file name ''", "objects[8]: file name '..'",
                  "objects[9]: file name None"):
        assert shown in check.stdout, check.stdout
    build = run_farm(project, "build", SEL)
    assert build.returncode == 0 and "Traceback" not in build.stderr, build.stderr
    assert run_farm(project, "check").returncode == 0


@pytest.mark.slow
def test_unrecorded_object_is_never_deleted(built: Path, tmp_path: Path) -> None:
    """Prune removes only objects the manifest recorded; a file the farm cannot show it wrote stays."""
    project = built_copy(built, tmp_path / "p")
    foreign = project / "outputs" / "rmsnorm" / TARGET / "someone_elses.hsaco"
    foreign.write_bytes(b"foreign")
    build = run_farm(project, "build", SEL)
    assert build.returncode == 0, build.stderr
    assert foreign.read_bytes() == b"foreign"
    check = run_farm(project, "check", SEL)
    assert check.returncode == 1 and f"{foreign}: file not recorded in manifest.json" in check.stdout


@pytest.mark.slow
def test_symlinked_target_directory_is_refused(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "foreign.hsaco").write_bytes(b"foreign")
    (elsewhere / ".foreign.hsaco.1.0123456789abcdef.tmp").write_bytes(b"foreign temp")
    shutil.copy(manifest_of(project), elsewhere / "manifest.json")
    target_dir = project / "outputs" / "rmsnorm" / TARGET
    shutil.rmtree(target_dir)
    target_dir.symlink_to(elsewhere)
    before = {p.name: p.read_bytes() for p in elsewhere.iterdir()}

    build = run_farm(project, "build", SEL)
    assert build.returncode == 2
    assert str(target_dir) in build.stderr and "symlink" in build.stderr and "fix:" in build.stderr
    assert "Traceback" not in build.stderr
    check = run_farm(project, "check", SEL)
    assert check.returncode == 1 and f"{target_dir} is a symlink" in check.stdout
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == before


@pytest.mark.slow
def test_object_symlink_is_not_up_to_date_and_is_replaced(built: Path, tmp_path: Path) -> None:
    """An object swapped for a symlink (even to identical bytes) is not "up to date"; the rebuild replaces the
    link and never writes through it."""
    project = built_copy(built, tmp_path / "p")
    obj = project / "outputs" / "rmsnorm" / TARGET / "rmsnorm_bf16_train_n2560.hsaco"
    outside = tmp_path / "outside.hsaco"
    outside.write_bytes(obj.read_bytes())
    obj.unlink()
    obj.symlink_to(outside)
    plan = run_farm(project, "plan", SEL)
    assert "missing" in plan.stdout and "is a symlink, not a regular file" in plan.stdout
    assert run_farm(project, "build", SEL).returncode == 0
    assert not obj.is_symlink() and obj.read_bytes() == outside.read_bytes()


@pytest.mark.slow
def test_predictable_toolchain_cache_path_is_not_written(built: Path, tmp_path: Path) -> None:
    """The old shared path `$TMPDIR/farm-toolchain-cache/linker-sha256.json` is not used: a symlink planted
    there (pointing at a private file) is never written through."""
    project = built_copy(built, tmp_path / "p")
    tmp = tmp_path / "tmp"
    (tmp / "farm-toolchain-cache").mkdir(parents=True)
    secret = tmp_path / "root-only"
    secret.write_text("precious")
    secret.chmod(0o600)
    (tmp / "farm-toolchain-cache" / "linker-sha256.json").symlink_to(secret)
    # Force a compile so the driver and the workers both fingerprint their toolchain.
    (project / "outputs" / "rmsnorm" / TARGET / "rmsnorm_bf16_train_n2560.hsaco").unlink()
    build = run_farm(project, "build", SEL, env={"TMPDIR": str(tmp)})
    assert build.returncode == 0, build.stderr
    assert secret.read_text() == "precious"
    private = tmp / f"farm-{os.getuid()}"
    assert private.is_dir() and (private.stat().st_mode & 0o777) == 0o700


def test_private_directory_planted_as_symlink_is_refused(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "attacker").mkdir()
    (tmp / f"farm-{os.getuid()}").symlink_to(tmp_path / "attacker")
    code = "from farm.core.private import private_dir; private_dir('toolchain-cache')"
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, TMPDIR=str(tmp)),
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "is a symlink" in proc.stderr
    assert list((tmp_path / "attacker").iterdir()) == []


def test_linker_changed_in_place_with_timestamp_restored_is_hashed_again(tmp_path: Path) -> None:
    """The linker-hash cache cannot vouch for a binary that changed: its key includes the inode change time."""
    linker = tmp_path / "ld.lld"
    linker.write_text("#!/bin/sh\necho 'LLD 22.1.8 (compatible with GNU linkers)'\n")
    linker.chmod(0o755)
    cache = Path(tempfile.mkdtemp(dir=tmp_path))
    first = installed(cache, {"path": str(linker)})["linker"]["sha256"]
    stat = linker.stat()
    linker.write_text("#!/bin/sh\necho 'LLD 22.1.8 (compatible with GNU linkers)'\n# changed\n")
    os.utime(linker, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert linker.stat().st_mtime_ns == stat.st_mtime_ns
    second = installed(cache, {"path": str(linker)})["linker"]["sha256"]
    assert second != first


@pytest.mark.slow
def test_disk_full_while_writing_is_one_clear_error(built: Path, tmp_path: Path) -> None:
    """ENOSPC while writing an object: one error naming the cause and the fix, the report still written,
    and the objects already on disk kept."""
    project = built_copy(built, tmp_path / "p")
    obj = project / "outputs" / "rmsnorm" / TARGET / "rmsnorm_bf16_train_n2560.hsaco"
    obj.unlink()
    others = {p.name: p.read_bytes() for p in obj.parent.iterdir()}
    code = (
        "import errno, os, sys\n"
        "import farm.store.outtree as t\n"
        "def full(self, name, data, **how):\n"
        "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)\n"
        "t.OutputDir.write_atomic = t.OutputDir.stage = full\n"  # every way an object's bytes reach disk
        "from farm.cli import main\n"
        # The rows go to the session's standing cluster: the disk is the writer's, the build's own process.
        f"sys.exit(main(['build', '{SEL}', 'executor.standing_root={SESSION_CLUSTERS.root_for_builds()}']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2, proc.stderr
    assert "No space left on device" in proc.stderr and "free disk space" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in obj.parent.iterdir()} == others
    report = latest_report(project)
    assert "No space left on device" in report["error"]


def test_non_utf8_instance_table_is_one_clear_error(tmp_path: Path, small_project: Path) -> None:
    project = tmp_path / "p"
    for name in ("conf", "kernels_src", "instances"):
        shutil.copytree(small_project / name, project / name)
    table = project / "instances" / "rmsnorm.jsonl"
    table.write_bytes(table.read_bytes() + b"\xff\xfe\n")
    for verb in ("plan", "check", "build"):
        proc = run_farm(project, verb)
        assert proc.returncode == 2, (verb, proc.stderr)
        assert "Traceback" not in proc.stderr and "rmsnorm.jsonl" in proc.stderr, proc.stderr


@pytest.mark.parametrize("field,value", [("name", "../escape"), ("target", "/abs"), ("op", "")])
def test_instance_row_with_unsafe_name_is_refused(tmp_path: Path, small_project: Path, field: str,
                                                  value: str) -> None:
    from farm.core.errors import FarmError
    from farm.table.rows import Row

    row = {"op": "rmsnorm", "target": TARGET, "name": "x", "group": "g", "knobs": {}, "allow": {}}
    with pytest.raises(FarmError, match="safe alphabet"):
        Row.from_json(dict(row, **{field: value}), "instances/rmsnorm.jsonl:1")
